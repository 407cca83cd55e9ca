"""Swap and memory: ``/proc/swaps``, ``/proc/meminfo``, ``/etc/fstab`` and psutil's view.

Lessons S-009 (a 200 GB NVMe swap file for conversions beyond RAM), F-022 (a model larger than
RAM+swap froze the box), S-012 (state that does not survive a reboot is lost).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt

_MEMINFO = re.compile(r"^(\w+):\s+(\d{1,19})(?:\s+kB)?\s*$", re.M)  # past 19 digits: no reading


def _unescape(field: str) -> str:
    """/proc and fstab escape spaces and tabs as octal (\\040, \\011)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class SwapArea:
    path: str
    kind: str  # "file" or "partition"
    size_kib: int
    used_kib: int
    priority: int

    @property
    def line(self) -> str:
        return f"{self.path} {self.kind} {self.size_kib} {self.used_kib} {self.priority}"


@dataclass(frozen=True)
class MemInfo:
    mem_total_kib: int
    mem_available_kib: int | None
    swap_total_kib: int
    swap_free_kib: int


@dataclass(frozen=True)
class FstabEntry:
    spec: str
    mountpoint: str
    fstype: str
    options: str
    line: str


def parse_proc_swaps(text: str) -> tuple[SwapArea, ...]:
    """``/proc/swaps``: a header, then one line per active area (no lines = no swap)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("Filename"):
        raise ParseError(f"/proc/swaps has no 'Filename' header: {excerpt(text, 80)!r}")
    areas = []
    for line in lines[1:]:
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 5:
            raise ParseError(f"/proc/swaps line has {len(parts)} fields: {line!r}")
        try:
            areas.append(SwapArea(_unescape(parts[0]), parts[1], int(parts[2]), int(parts[3]),
                                  int(parts[4])))
        except ValueError as exc:
            raise ParseError(f"/proc/swaps line is not numeric: {line!r}") from exc
    return tuple(areas)


def parse_meminfo(text: str) -> MemInfo:
    values = {k: int(v) for k, v in _MEMINFO.findall(text)}
    try:
        return MemInfo(values["MemTotal"], values.get("MemAvailable"), values["SwapTotal"],
                       values["SwapFree"])
    except KeyError as exc:
        raise ParseError(f"/proc/meminfo lacks {exc.args[0]}: {excerpt(text, 80)!r}") from exc


def parse_fstab(text: str) -> tuple[FstabEntry, ...]:
    entries = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 3:
            continue  # malformed lines are ignored by mount(8) too
        entries.append(FstabEntry(_unescape(parts[0]), _unescape(parts[1]), parts[2],
                                  parts[3] if len(parts) > 3 else "defaults", line))
    return tuple(entries)


def parse_psutil(text: str) -> MemInfo:
    """The collector helper's JSON of ``psutil.virtual_memory()`` and ``swap_memory()``."""
    try:
        doc = load_json(text)
        return MemInfo(doc["mem_total"] // 1024, doc["mem_available"] // 1024,
                       doc["swap_total"] // 1024, doc["swap_free"] // 1024)
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"psutil output is not the expected JSON: {exc}") from exc


# --- The memory system: ``dmidecode -t 4 -t 17`` (SMBIOS processors and memory devices) ---
# A slot's channel, where its names say it (None otherwise: Dell's "A1".."A12" number slots,
# not channels). Socket and channel keys as the board names them.
_CHANNEL_PATTERNS = (
    # AMD AGESA: "Bank Locator: P0 CHANNEL A", "Locator: DIMM 0"
    ("bank", re.compile(r"^P(\d+) CHANNEL ([A-Z])$", re.I)),
    # Supermicro / AMI: "Bank Locator: P0_Node0_Channel2_Dimm0"
    ("bank", re.compile(r"^P(\d+)_Node\d+_Channel(\d+)_Dimm\d+$", re.I)),
    # Cisco: "Bank Locator: NODE 0 CHANNEL 0 DIMM 0"
    ("bank", re.compile(r"^NODE (\d+) CHANNEL (\d+) DIMM \d+$", re.I)),
    # "CPU1_DIMM_A1", "CPU0_DIMM_A1", "P1-DIMMA1", "DIMM_P0_A0": socket, channel letter, slot
    ("loc", re.compile(r"^(?:CPU|P)(\d+)[_-]DIMM_?([A-Z])\d+$", re.I)),
    ("loc", re.compile(r"^DIMM_P(\d+)_([A-Z])\d+$", re.I)),
    # Intel desktop and Xeon E: "ChannelA-DIMM0", "Controller0-ChannelA-DIMM0"
    ("loc", re.compile(r"^(?:Controller(\d+)-)?Channel([A-Z])-DIMM\d+$", re.I)),
)
# "Locator: DIMM_A1" with "Bank Locator: NODE 1": the socket from the bank, the channel letter
_NODE_BANK = re.compile(r"^NODE (\d+)$", re.I)
_LETTER_SLOT = re.compile(r"^DIMM_?([A-Z])\d+$", re.I)
# More digits than any DIMM's speed or size has are no reading (a 5,000-digit speed raised
# out of int()), and a rating past any memory made is not believed.
_SPEED = re.compile(r"^(\d{1,7}) (?:MT/s|MHz)$")
_SIZE = re.compile(r"^(\d{1,9}) (MB|GB|TB)$")
MAX_MTS = 20_000  # DDR5 MRDIMMs reach 12,800 MT/s (2025); 4,000,000,000 was believed


@dataclass(frozen=True)
class Dimm:
    """One SMBIOS memory device (a slot): its size (0: empty), rated and configured speed."""

    locator: str
    bank: str
    size_mib: int
    rated_mts: int | None
    configured_mts: int | None
    kind: str  # DDR4, DDR5, ...
    channel: tuple[str, str] | None  # (socket, channel) where the names say it

    @property
    def name(self) -> str:
        return " ".join(p for p in (self.bank, self.locator) if p and p != "Not Specified")


@dataclass(frozen=True)
class MemorySystem:
    dimms: tuple[Dimm, ...]
    cpus: tuple[str, ...]  # populated processor sockets: their version strings

    @property
    def populated(self) -> tuple[Dimm, ...]:
        return tuple(d for d in self.dimms if d.size_mib)

    @property
    def channels_named(self) -> bool:
        return bool(self.dimms) and all(d.channel for d in self.dimms)

    def channels(self) -> dict[tuple[str, str], list[Dimm]]:
        """Each channel the slots name -> its populated DIMMs, on sockets that hold a CPU
        (the slots of an empty socket are no channels of this machine)."""
        found: dict[tuple[str, str], list[Dimm]] = {}
        for d in self.dimms:
            if d.channel:
                found.setdefault(d.channel, [])
                if d.size_mib:
                    found[d.channel].append(d)
        sockets = sorted({c[0] for c in found}, key=lambda s: (len(s), s))
        live = set(sockets[:len(self.cpus)]) if self.cpus else set(sockets)
        return {c: ds for c, ds in found.items() if c[0] in live}

    def bandwidth_gbs(self) -> float | None:
        """The theoretical read bandwidth: 8 bytes a transfer on each populated channel, at the
        speed its slowest DIMM runs (configured); None where channels or speeds are not known."""
        channels = self.channels()
        if not self.channels_named or not channels:
            return None
        total = 0.0
        for dimms in channels.values():
            speeds = [d.configured_mts for d in dimms]
            if not dimms:
                continue
            if None in speeds:
                return None
            total += 8 * min(s for s in speeds if s) * 1e6
        return round(total / 1e9, 1)


def _channel(locator: str, bank: str) -> tuple[str, str] | None:
    for where, pattern in _CHANNEL_PATTERNS:
        match = pattern.match(bank if where == "bank" else locator)
        if match:
            return (match.group(1) or "0", match.group(2).upper())
    node, slot = _NODE_BANK.match(bank), _LETTER_SLOT.match(locator)
    if node and slot:
        return (node.group(1), slot.group(1).upper())
    return None


def _mts(value: str) -> int | None:
    match = _SPEED.match(value)
    return int(match.group(1)) if match and 0 < int(match.group(1)) <= MAX_MTS else None


def _size_mib(value: str) -> int:
    match = _SIZE.match(value)
    if not match:
        return 0  # "No Module Installed", "Not Installed", "0 B"
    return int(match.group(1)) * {"MB": 1, "GB": 1024, "TB": 1024 * 1024}[match.group(2)]


def _blocks(text: str) -> list[list[str]]:
    """dmidecode's records: runs of lines between blank ones (one pass, no regex: a host's
    long whitespace line cost 86 s of backtracking in the split this replaced)."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def _fields(lines: list[str]) -> dict[str, str]:
    """A record's indented ``Name: value`` lines (the name holds no colon)."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line[:1].isspace():
            continue
        name, sep, value = line.strip().partition(":")
        if sep and name and value.startswith(" "):
            fields[name] = value.strip()
    return fields


# Memory channels per socket by the CPU's SMBIOS version string (AMD and Intel product
# specifications): a property of the CPU, not of the slots its board lists. A TRX50 board lists
# eight "P0 CHANNEL A-H" slots for a four-channel Threadripper 7960X (B, D, F, H always empty);
# another vendor's lists four.
CPU_CHANNELS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"Threadripper PRO \d{4}WX", re.I), 8),  # 3000WX, 5000WX, 7000WX, 9000WX
    (re.compile(r"Threadripper \d{4}X\b", re.I), 4),  # 1000/2000 (TR4), 3000 (sTRX4), 7000/9000 (TRX50)
    (re.compile(r"EPYC 9\d{2}[45]", re.I), 12),  # Genoa 9004, Turin 9005
    (re.compile(r"EPYC 8\d{2}4", re.I), 6),  # Siena 8004
    (re.compile(r"EPYC 7\d{2}[123]", re.I), 8),  # Naples 7001, Rome 7002, Milan 7003
    (re.compile(r"EPYC 4\d{2}[45]", re.I), 2),  # 4004, 4005 (AM5)
    (re.compile(r"(Bronze|Silver|Gold|Platinum) \d[12]\d\d", re.I), 6),  # Skylake, Cascade Lake
    # Ice Lake to Emerald Rapids (Cooper Lake's "H" parts keep six)
    (re.compile(r"(Bronze|Silver|Gold|Platinum) \d[3-5]\d\d(?![0-9A-Z]*H\b)", re.I), 8),
    (re.compile(r"\bw[3-9]-3\d{3}", re.I), 8),  # Xeon W-3400 / W-3500
    (re.compile(r"\bw[3-9]-2\d{3}", re.I), 4),  # Xeon W-2400 / W-2500
)


def cpu_channels(version: str) -> int | None:
    """The memory channels a socket of this CPU has (its SMBIOS version string), None where
    the table does not know it."""
    return next((n for pattern, n in CPU_CHANNELS if pattern.search(version)), None)


def parse_dmidecode_memory(text: str) -> MemorySystem:
    """``dmidecode -t 4 -t 17``: each memory device (slot) and the populated CPU sockets."""
    if "Memory Device" not in text and "Processor Information" not in text:
        why = "permission denied: dmidecode needs root" if "ermission denied" in text else \
            f"no SMBIOS memory device: {excerpt(text, 80)!r}"
        raise ParseError(why)
    dimms, cpus = [], []
    for lines in _blocks(text):
        if len(lines) < 2:
            continue
        fields = _fields(lines)
        if lines[1].strip() == "Memory Device":
            locator, bank = fields.get("Locator", ""), fields.get("Bank Locator", "")
            configured = fields.get("Configured Memory Speed",
                                    fields.get("Configured Clock Speed", ""))
            dimms.append(Dimm(locator, bank, _size_mib(fields.get("Size", "")),
                              _mts(fields.get("Speed", "")), _mts(configured),
                              fields.get("Type", "Unknown"), _channel(locator, bank)))
        elif lines[1].strip() == "Processor Information" and \
                fields.get("Status", "").startswith("Populated"):
            cpus.append(fields.get("Version", "").strip())
    return MemorySystem(tuple(dimms), tuple(cpus))


def parse_l3_domains(text: str) -> int:
    """The distinct ``shared_cpu_list`` of the CPUs' L3 caches (sysfs): one per CCD on AMD Zen,
    one per socket on most Intel parts."""
    domains = {line.strip() for line in text.splitlines() if line.strip()}
    if not domains or not all(re.fullmatch(r"[\d,\-]+", d) for d in domains):
        raise ParseError(f"not L3 shared_cpu_list lines: {excerpt(text, 80)!r}")
    return len(domains)
