"""Swap and memory: ``/proc/swaps``, ``/proc/meminfo``, ``/etc/fstab`` and psutil's view.

Lessons S-009 (a 200 GB NVMe swap file for conversions beyond RAM), F-022 (a model larger than
RAM+swap froze the box), S-012 (state that does not survive a reboot is lost).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt

_MEMINFO = re.compile(r"^(\w+):\s+(\d+)(?:\s+kB)?\s*$", re.M)


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
        doc = json.loads(text)
        return MemInfo(doc["mem_total"] // 1024, doc["mem_available"] // 1024,
                       doc["swap_total"] // 1024, doc["swap_free"] // 1024)
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"psutil output is not the expected JSON: {exc}") from exc
