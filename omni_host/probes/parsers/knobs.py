"""The host's knobs (``remote/knobs.py``'s document: the files of the knobs' table, by name):
transparent huge pages, NUMA balancing, the CPU's frequency policy, SMT and the cores under the
logical CPUs, PCIe ASPM, the kernel command line, and any knob declared since. Pure: text in, a
frozen fact out; a document that is not the helper's is a ParseError naming what is wrong."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt

_CHOICE = re.compile(r"\[([^\]\s]+)\]")


def selected(text: str | None) -> str | None:
    """The bracketed choice of a sysfs switch (``always [madvise] never`` -> madvise); a
    single word is itself; None where there is none."""
    if not text:
        return None
    match = _CHOICE.search(text)
    if match:
        return match.group(1)
    words = text.split()
    return words[0] if len(words) == 1 else None


def cpu_list(text: str | None) -> list[int]:
    """``0-3,8,10-11`` as CPU numbers (a kernel cpulist); [] where it is none."""
    found: list[int] = []
    for part in (text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            found += range(int(lo), int(hi or lo) + 1)[:4096]
    return found


@dataclass(frozen=True)
class HostKnobs:
    thp_enabled: str | None = None  # always, madvise, never
    thp_defrag: str | None = None  # always, defer, defer+madvise, madvise, never
    numa_balancing: int | None = None  # 0 off; 1 (or 2, 3: memory tiering) on
    governors: dict[str, int] = field(default_factory=dict)  # governor -> logical CPUs
    epp: dict[str, int] = field(default_factory=dict)  # energy_performance_preference -> CPUs
    freq_driver: str | None = None  # intel_pstate, amd-pstate-epp, acpi-cpufreq...
    boost: bool | None = None  # frequency boost allowed (cpufreq/boost, intel_pstate no_turbo)
    smt_control: str | None = None  # on, off, forceoff, notsupported, notimplemented
    smt_active: bool | None = None
    cores: dict[int, str] = field(default_factory=dict)  # logical CPU -> "package:core"
    aspm: str | None = None  # default, performance, powersave, powersupersave
    cmdline: str | None = None
    # every single file the audit read, by its name in the knobs' table (plan/knobs.py): a
    # knob added there is read, and its value here, with no change to the helper or to this
    read: dict[str, str] = field(default_factory=dict)

    def value(self, knob: str) -> str | None:
        """A knob's value as read (a sysfs switch's bracketed choice), None where unread."""
        return selected(self.read.get(knob))

    def physical_cores(self, cpus: Iterable[int]) -> int | None:
        """The physical cores under these logical CPUs (None where the topology is unknown)."""
        cpus = list(cpus)
        if not cpus or not all(c in self.cores for c in cpus):
            return None
        return len({self.cores[c] for c in cpus})

    def kernel_options(self, *names: str) -> dict[str, str]:
        """The command line's ``name=value`` (or bare ``name``) for each of ``names`` given."""
        found: dict[str, str] = {}
        for word in (self.cmdline or "").split():
            key, _, value = word.partition("=")
            if key in names:
                found[key] = value
        return found


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.strip().isdigit() else None


def _counts(value: Any, name: str) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in value.items()):
        raise ParseError(f"knobs helper: {name} is not a count of CPUs by value")
    return {k[:64]: v for k, v in list(value.items())[:64]}


# The first helper's document (stored bundles, captures) by section: read as the table's names.
_V1 = {"thp": ("thp", "enabled"), "thp-defrag": ("thp", "defrag"),
       "numa-balancing": ("numa_balancing",), "governor": ("cpu", "governors"),
       "epp": ("cpu", "epp"), "freq-driver": ("cpu", "driver"), "boost": ("cpu", "boost"),
       "no-turbo": ("cpu", "no_turbo"), "smt-control": ("smt", "control"),
       "smt-active": ("smt", "active"), "aspm": ("aspm",), "cmdline": ("cmdline",)}


def _first_helper(doc: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    if not all(isinstance(doc.get(part), dict) for part in ("thp", "cpu", "smt")):
        raise ParseError("knobs helper: thp, cpu and smt must be mappings")
    files = {}
    for name, where in _V1.items():
        value: Any = doc
        for key in where:
            value = value.get(key) if isinstance(value, dict) else None
        files[name] = value
    return files, doc["cpu"].get("cores")


def parse_knobs(text: str) -> HostKnobs:
    try:
        doc = load_json(text)
    except ValueError:
        raise ParseError(f"not the knobs helper's document: {excerpt(text, 80)!r}") from None
    if not isinstance(doc, dict) or doc.get("helper") not in (1, 2):
        raise ParseError(f"not the knobs helper's document: {excerpt(text, 80)!r}")
    if doc.get("helper") == 1:
        files, cores = _first_helper(doc)
    elif isinstance(doc.get("files"), dict):
        files, cores = doc["files"], doc.get("cores")
    else:
        raise ParseError(f"knobs helper: {excerpt(str(doc.get('error') or 'no files read'), 80)}")
    counted = ("governor", "epp")
    if not all(v is None or isinstance(v, str) for k, v in files.items() if k not in counted):
        raise ParseError("knobs helper: a sysfs value is not text")
    cores = cores or {}
    if not isinstance(cores, dict) or not all(
            isinstance(k, str) and k.isdigit() and isinstance(v, str) for k, v in cores.items()):
        raise ParseError("knobs helper: cpu.cores is not CPU -> core")
    boost, no_turbo, active = (_int(files.get(k)) for k in ("boost", "no-turbo", "smt-active"))
    return HostKnobs(
        thp_enabled=selected(files.get("thp")), thp_defrag=selected(files.get("thp-defrag")),
        numa_balancing=_int(files.get("numa-balancing")),
        governors=_counts(files.get("governor") or {}, "cpu.governors"),
        epp=_counts(files.get("epp") or {}, "cpu.epp"),
        freq_driver=(files.get("freq-driver") or None),
        boost=bool(boost) if boost is not None else (not no_turbo if no_turbo is not None
                                                      else None),
        smt_control=(files.get("smt-control") or None),
        smt_active=bool(active) if active is not None else None,
        cores={int(k): v[:32] for k, v in list(cores.items())[:4096]},
        aspm=selected(files.get("aspm")), cmdline=(files.get("cmdline") or None),
        read={str(k)[:64]: v[:4096] for k, v in list(files.items())[:64]
              if k not in counted and isinstance(v, str)})
