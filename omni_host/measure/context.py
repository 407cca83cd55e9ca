"""The host state a bench ran under, named in code (issue 45): each fact a stable key that is
stored and compared, and a label an operator reads, given only where a change is said. What
a fact is decides how it is compared and where a change of it ranks among the causes of a
drop: a setting of the host (the environment, the binary, the driver...), what the run
measured beside its rate (other load, the CPU it got), or a symptom of a cause (the clocks and
their reasons). Renaming a label moves no stored baseline.

Benches stored before the keys (their contexts keyed by the labels) are read into the keys
(``keyed``), so an old baseline compares with a new run fact by fact."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import Any

from omni_host.plan.knobs import KNOBS


class Kind(enum.Enum):
    SETTING = "setting"  # how the host is set: a change of it explains a drop
    MEASURED = "measured"  # what the run measured beside its rate (a disturbance says it)
    SYMPTOM = "symptom"  # what follows from a cause (clocks, their reasons, a link under load)


class Compare(enum.Enum):
    EXACT = "exact"  # numbers within a relative tolerance, the rest equal
    CPUS = "cpus"  # CPU time measured: a quarter of a CPU is jitter
    OWN_CPU = "own_cpu"  # ... and for the CPU llama-bench got, a share of it too


@dataclass(frozen=True)
class Fact:
    label: str
    rank: int  # where a change of it is named among the causes (what takes tokens/s first)
    kind: Kind = Kind.SETTING
    compare: Compare = Compare.EXACT


NUMBER_TOLERANCE = 0.05  # a relative move of a number below this is no change
LOAD_TOLERANCE_CPUS = 0.25  # CPU time measured over a run: a quarter of a CPU is jitter
# The CPU llama-bench got scales its rate: a one-thread bench that went from 0.66 to 0.41 of a
# CPU beside more busy loops ran 41% slower, within the absolute 0.25 (seen beside
# ordinary-machine's loops on both CPUs: "no change in the recorded host state").
OWN_CPU_TOLERANCE = 0.20

CPU_BANDWIDTH = "cpu_memory_gbs"
CCD_LINKS = "cpu_ccd_links_gbs"
OWN_CPU = "own_cpu"
MODEL_FINGERPRINT = "model_fingerprint"
CPU_LIST = "cpu_list"  # which CPUs llama-bench may run on, read by benches since issue 65

# The order changes are named in: what takes tokens/s away (other work, limits, the binary,
# the environment, the platform) before what follows from it (clocks and their reasons).
FACTS: dict[str, Fact] = {
    "gpu_processes": Fact("other processes on the GPUs", 0, Kind.MEASURED),
    "cpu_quota": Fact("CPU quota (cgroup)", 1),
    "cpus_allowed": Fact("CPUs allowed", 2),
    "cpu_list": Fact("CPUs allowed (which)", 2),
    "llama_bench_sha256": Fact("llama-bench sha256", 4),
    "build": Fact("llama.cpp build", 6),
    "backends": Fact("backends", 7),
    "memory_channels": Fact("CPU memory channels with DIMMs", 8),
    "memory_mts": Fact("CPU memory speed (MT/s)", 8),
    CPU_BANDWIDTH: Fact("CPU memory bandwidth (GB/s)", 8),
    CCD_LINKS: Fact("CPU CCD links (GB/s)", 9),
    "numa_per_socket": Fact("NUMA nodes per socket", 10),
    "driver": Fact("NVIDIA driver", 11),
    "cuda": Fact("CUDA (driver)", 12),
    "kernel": Fact("kernel", 13),
    "gpu_event_reasons": Fact("GPU clock event reasons during the run", 14, Kind.SYMPTOM),
    "other_cpu_load": Fact("other CPU load during the run (CPUs)", 15, Kind.MEASURED,
                           Compare.CPUS),
    OWN_CPU: Fact("CPU llama-bench got during the run (CPUs)", 16, Kind.MEASURED,
                  Compare.OWN_CPU),
    "model_bytes": Fact("model bytes", 17),
    MODEL_FINGERPRINT: Fact("model fingerprint", 18),
}
ENV, LIB, GPU = "env.", "lib.", "gpu."  # a variable, a library, a GPU: keys with a name
KNOB = "knob."  # a knob's setting (plan.knobs: its file), read by benches since issue 65
ENV_RANK, LIB_RANK, KNOB_RANK, GPU_RANK, UNKNOWN_RANK = 3, 5, 9, 14, 18
# A GPU's facts: gpu.<index>.<field>, said as "GPU<index> <label>".
GPU_FACTS: dict[str, tuple[str, Kind]] = {
    "pcie_max": ("PCIe link (max trained)", Kind.SETTING),
    "power_limit_w": ("power limit W", Kind.SETTING),
    "max_sm_mhz": ("max SM clock MHz", Kind.SETTING),
    "max_memory_mhz": ("max memory clock MHz", Kind.SETTING),
    "name": ("name", Kind.SETTING),
    "uuid": ("UUID", Kind.SETTING),
    "sm_mhz": ("SM clock MHz (median during the run)", Kind.SYMPTOM),
    "pcie": ("PCIe link during the run (median)", Kind.SYMPTOM),
}


def gpu_key(index: Any, field: str) -> str:
    return f"{GPU}{index}.{field}"


def _gpu_parts(key: str) -> tuple[str, str] | None:
    """(index, field) of a GPU's key (``gpu.0.uuid``), None for another key."""
    if not key.startswith(GPU):
        return None
    index, _, field = key[len(GPU):].partition(".")
    return (index, field) if field in GPU_FACTS else None


def fact(key: str) -> Fact:
    """What a key names; a key of a later omni-host (or an unreadable one) is its own label."""
    if key in FACTS:
        return FACTS[key]
    if key.startswith(ENV):
        return Fact(f"env {key[len(ENV):]}", ENV_RANK)
    if key.startswith(LIB):
        return Fact(f"{key[len(LIB):]} sha256", LIB_RANK)
    if key.startswith(KNOB) and key[len(KNOB):] in KNOBS:
        return Fact(KNOBS[key[len(KNOB):]].what, KNOB_RANK)
    gpu = _gpu_parts(key)
    if gpu is not None:
        label, kind = GPU_FACTS[gpu[1]]
        return Fact(f"GPU{gpu[0]} {label}", GPU_RANK, kind)
    return Fact(key, UNKNOWN_RANK)


def label(key: str) -> str:
    return fact(key).label


_LABELLED = {f.label: key for key, f in FACTS.items()}
_GPU_LABEL = re.compile(r"GPU(\S+) (.+)")


def _key_of(name: str) -> str:
    """The key of a label as benches stored before the keys wrote it (a key stays itself)."""
    if name in FACTS or name.startswith((ENV, LIB, GPU, KNOB)):
        return name
    if name in _LABELLED:
        return _LABELLED[name]
    if name.startswith("env "):
        return ENV + name[4:]
    gpu = _GPU_LABEL.fullmatch(name)
    if gpu:
        field = next((f for f, (text, _) in GPU_FACTS.items() if text == gpu[2]), None)
        if field is not None:
            return gpu_key(gpu[1], field)
    if name.endswith(" sha256"):
        return LIB + name[:-len(" sha256")]
    return name


def keyed(context: dict[str, Any]) -> dict[str, Any]:
    """A stored context by key, in its order (one stored before the keys: by its labels)."""
    return {_key_of(str(k)): v for k, v in context.items()}


@dataclass(frozen=True)
class Change:
    key: str
    before: Any
    after: Any
    was: bool = True  # the baseline had it
    now: bool = True  # this run has it

    @property
    def fact(self) -> Fact:
        return fact(self.key)

    @property
    def setting(self) -> bool:
        """A change of how the host is set (the environment, the binary, the driver...), not
        of what the run measured."""
        return self.fact.kind is Kind.SETTING

    @property
    def card(self) -> bool:
        """A GPU's UUID moved: the baseline measured another card."""
        gpu = _gpu_parts(self.key)
        return gpu is not None and gpu[1] == "uuid"

    @property
    def rank(self) -> tuple[int, int]:
        return int(self.fact.kind is Kind.SYMPTOM), self.fact.rank

    def line(self) -> str:
        """"name: before -> after", as an operator reads it."""
        gone = "unset" if self.key.startswith(ENV) else "not seen"
        return (f"{self.fact.label}: {_show(self.before) if self.was else gone} -> "
                f"{_show(self.after) if self.now else gone}")


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same(key: str, a: Any, b: Any) -> bool:
    """Whether two values of a fact are the same state (numbers within their jitter)."""
    if numeric(a) and numeric(b):
        how = fact(key).compare
        if how is not Compare.EXACT:
            relative = OWN_CPU_TOLERANCE * max(a, b) if how is Compare.OWN_CPU else math.inf
            return bool(abs(a - b) <= min(LOAD_TOLERANCE_CPUS, relative))
        return bool(abs(a - b) <= NUMBER_TOLERANCE * max(abs(a), abs(b), 1e-9))
    return bool(a == b)


def diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[Change], list[str]]:
    """(what changed, the causes first; the labels of the facts that did not), between two
    contexts by key."""
    changed, unchanged = [], []
    for key in [*before, *(k for k in after if k not in before)]:
        a, b = before.get(key), after.get(key)
        if key in before and key in after and same(key, a, b):
            unchanged.append(label(key))
        elif key not in before and (fact(key).kind is Kind.SYMPTOM or key.startswith(KNOB)
                                    or key == CPU_LIST):
            continue  # read since a later omni-host: the baseline did not, nothing moved
        else:
            changed.append(Change(key, a, b, key in before, key in after))
    if any(c.key == "cpus_allowed" for c in changed):  # their count said it: which, once
        changed = [c for c in changed if c.key != CPU_LIST]
    changed.sort(key=lambda c: c.rank)
    return changed, unchanged
