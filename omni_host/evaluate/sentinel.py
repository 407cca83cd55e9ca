"""The Sentinel view of an audit (lesson S-013): a summary of each host's key facts, the
Strategic layer (which alternative engines are still blocked on this host, and why), and the
layer each check belongs to. Pure functions of facts and data in ``checks/``."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import yaml

from omni_host.evaluate.facts import HostFacts
from omni_host.model import EngineStatus, EngineVerdict, FactSummary, GpuSummary
from omni_host.resources import data_path

ASYMMETRY_RATIO = 1.2


def fact_summary(facts: HostFacts) -> FactSummary:
    """The facts a diff and the Strategic layer compare, None where unobserved."""
    def fact(*ids: str) -> Any:
        probe = facts.first_observed(*ids)
        return probe.fact if probe.ok else None

    numa = fact("numa.numactl", "numa.sysfs")
    gpus = fact("gpu.nvidia-smi", "gpu.pynvml")
    cpu = fact("cpu.cpuinfo", "cpu.pycpuinfo")
    mem = fact("mem.meminfo", "mem.psutil")
    swaps = fact("mem.swaps")
    topo = fact("gpu.topo")
    kernel = fact("system.kernel")
    containers = fact("docker.containers")
    return FactSummary(
        numa_nodes=numa.node_count if numa else None,
        sockets=(cpu.sockets if cpu else None) or (numa.sockets_from_distances() if numa
                                                   else None),
        cpu=cpu.describe() if cpu else None,
        zen5=cpu.is_zen5 if cpu else None,
        kernel=kernel.release if kernel else None,
        driver_version=gpus.driver_version if gpus else None,
        cuda_version=gpus.cuda_version if gpus else None,
        gpus=tuple(GpuSummary(g.name, g.memory_total_mib, g.architecture)
                   for g in gpus.gpus) if gpus else None,
        nvlink=any(c.startswith("NV") for _, _, c in topo.links()) if topo else None,
        mem_total_mib=mem.mem_total_kib // 1024 if mem else None,
        swap_total_mib=sum(a.size_kib for a in swaps) // 1024 if swaps is not None else None,
        containers=tuple(sorted(c.name for c in containers)) if containers is not None else None,
    )


@lru_cache(maxsize=1)
def strategic_catalog() -> list[dict[str, Any]]:
    doc = yaml.safe_load((data_path("checks") / "strategic.yaml").read_text(encoding="utf-8"))
    return list(doc["engines"])


def _is_blackwell(gpu: GpuSummary) -> bool:
    return gpu.arch == "Blackwell" or any(
        tag in gpu.name for tag in ("Blackwell", "RTX 50", "B200", "B100", "GB200"))


def _holds(kind: str, arg: Any, summary: FactSummary) -> tuple[bool | None, str]:
    """Does a blocking condition hold on this host? None when the facts to decide are missing."""
    gpus = summary.gpus
    if kind == "upstream":
        return True, "not a host condition: re-check upstream"
    if kind == "blackwell":
        if gpus is None:
            return None, "GPU facts unavailable"
        names = [g.name for g in gpus if _is_blackwell(g)]
        return bool(names), ", ".join(names) if names else "no Blackwell GPU"
    if kind == "asymmetric_vram":
        sizes = [g.vram_mib for g in gpus or () if g.vram_mib]
        if gpus is None:
            return None, "GPU facts unavailable"
        if len(sizes) < 2:
            return False, f"{len(sizes)} GPU(s)"
        return max(sizes) > ASYMMETRY_RATIO * min(sizes), f"VRAM {sorted(sizes)} MiB"
    if kind == "no_nvlink":
        if gpus is None or summary.nvlink is None:
            return None, "topology unavailable"
        if len(gpus) < 2:
            return False, "one GPU"
        return not summary.nvlink, "no NVLink" if not summary.nvlink else "NVLink present"
    if kind == "memory_below_gib":
        mem, swap = summary.mem_total_mib, summary.swap_total_mib
        if mem is None or swap is None:
            return None, "memory facts unavailable"
        total_gib = (mem + swap) / 1024
        return total_gib < float(arg), f"RAM+swap {total_gib:.0f} GiB"
    raise ValueError(f"unknown strategic condition {kind!r}")


def strategic(summary: FactSummary) -> tuple[EngineVerdict, ...]:
    """Each engine: blocked (the conditions that hold, with the facts), unknown, or
    re-evaluate (no host condition holds any more)."""
    out = []
    for entry in strategic_catalog():
        reasons, unknown = [], []
        for cond in entry["conditions"]:
            kind = next(k for k in cond if k != "why")
            why = cond.get("why") or cond[kind]
            holds, fact = _holds(kind, cond[kind], summary)
            if holds:
                reasons.append(f"{why} [{fact}]")
            elif holds is None:
                unknown.append(f"{why} [{fact}]")
        host_reasons = [r for r in reasons if "re-check upstream" not in r]
        status = (EngineStatus.BLOCKED if host_reasons else EngineStatus.UNKNOWN if unknown
                  else EngineStatus.BLOCKED_UPSTREAM if reasons else EngineStatus.RE_EVALUATE)
        out.append(EngineVerdict(entry["engine"], tuple(entry["lessons"]), status,
                                 tuple(reasons + unknown)))
    return tuple(out)
