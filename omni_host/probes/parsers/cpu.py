"""CPU identity and flags from ``/proc/cpuinfo`` (or ``lscpu``), with py-cpuinfo as fallback.

Lesson F-010: Zen 5 (AMD family 26 = 0x1A) needs GLIBC_TUNABLES to mask five AVX-512 hwcaps
in some containers.
"""

from __future__ import annotations

from dataclasses import dataclass

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt

ZEN5_FAMILY = 26

# /proc/cpuinfo keys and their lscpu spellings, normalised to one name.
_KEYS = {
    "vendor_id": "vendor", "vendor id": "vendor",
    "cpu family": "family",
    "model": "model",
    "model name": "model_name",
    "flags": "flags",
    "processor": "processor",
    "cpu(s)": "cpus",
    "physical id": "physical_id",
    "socket(s)": "sockets",
}


@dataclass(frozen=True)
class CpuInfo:
    vendor: str
    family: int | None
    model: int | None
    model_name: str
    flags: frozenset[str]
    logical_cpus: int | None
    source: str
    sockets: int | None = None  # distinct "physical id" (lscpu: "Socket(s)"); None: not shown

    @property
    def is_zen5(self) -> bool:
        return self.vendor == "AuthenticAMD" and self.family == ZEN5_FAMILY

    def describe(self) -> str:
        fam = f"family {self.family}" if self.family is not None else "family unknown"
        return f"{self.model_name or self.vendor} ({self.vendor}, {fam})"


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_cpuinfo(text: str) -> CpuInfo:
    """``/proc/cpuinfo`` (first processor block is representative; processors are counted) or
    ``lscpu`` (the same keys with other spellings)."""
    seen: dict[str, str] = {}
    processors = 0
    packages: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        name = _KEYS.get(key.strip().lower())
        if name == "processor":
            processors += 1
        elif name == "physical_id":
            packages.add(value.strip())
        elif name and name not in seen:
            seen[name] = value.strip()
    if "vendor" not in seen:
        raise ParseError(f"no vendor_id in cpuinfo output: {excerpt(text, 80)!r}")
    return CpuInfo(
        vendor=seen["vendor"],
        family=_int(seen.get("family")),
        model=_int(seen.get("model")),
        model_name=seen.get("model_name", ""),
        flags=frozenset(seen.get("flags", "").split()),
        logical_cpus=processors or _int(seen.get("cpus")),
        source="lscpu" if processors == 0 else "/proc/cpuinfo",
        sockets=len(packages) or _int(seen.get("sockets")),
    )


def parse_pycpuinfo(text: str) -> CpuInfo:
    """The JSON of py-cpuinfo's ``get_cpu_info()``, printed by the collector's helper."""
    try:
        info = load_json(text)
        return CpuInfo(
            vendor=str(info["vendor_id_raw"]),
            family=_int(str(info.get("family"))),
            model=_int(str(info.get("model"))),
            model_name=str(info.get("brand_raw", "")),
            flags=frozenset(info.get("flags", [])),
            logical_cpus=_int(str(info.get("count"))),
            source="py-cpuinfo",
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"py-cpuinfo output is not the expected JSON: {exc}") from exc
