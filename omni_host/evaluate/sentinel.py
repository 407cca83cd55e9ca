"""The Sentinel view of an audit (lesson S-013): a summary of each host's key facts, the
Strategic layer (which alternative engines are still blocked on this host, and why), and the
layer each check belongs to. Pure functions of facts and data in ``checks/``."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from omni_host.evaluate.facts import HostFacts
from omni_host.measure.rules import ASYMMETRY_RATIO, size_text
from omni_host.model import (
    EngineStatus,
    EngineVerdict,
    FactSummary,
    GpuSummary,
    MemorySummary,
    ModelSummary,
    ProbeResult,
)
from omni_host.plan.policy import Policy
from omni_host.resources import data_path, read_yaml


def _models(facts: HostFacts, policy: Policy | None) -> tuple[ModelSummary, ...] | None:
    """The models of the host's own policy, with size and architecture where examined."""
    if policy is None or not policy.models:
        return None
    probe = facts.get("model.files")
    seen = {m.path: m for m in probe.fact.models if not m.error} if probe.ok else {}
    return tuple(ModelSummary(w.path, seen[w.path].size_bytes, seen[w.path].architecture)
                 if w.path in seen else ModelSummary(w.path) for w in policy.models)


# About 64 GB/s of reads per CCD link on Zen 3 and later (llama.cpp PR #13435): a part with few
# CCDs cannot read all its channels' bandwidth.
CCD_LINK_GBS = 64.0
ZEN3_FAMILY = 25


def _memory(facts: HostFacts, cpu: Any) -> MemorySummary | None:
    dimms, l3 = facts.probes.get("mem.dimms"), facts.probes.get("cpu.l3")
    system = dimms.fact if dimms is not None and dimms.ok else None
    domains = l3.fact if l3 is not None and l3.ok else None
    if system is None and domains is None:
        return None
    channels = system.channels() if system is not None and system.channels_named else None
    speeds = [d.configured_mts for d in system.populated if d.configured_mts] if system else []
    zen3 = cpu is not None and cpu.vendor == "AuthenticAMD" and (cpu.family or 0) >= ZEN3_FAMILY
    return MemorySummary(
        channels=len(channels) if channels else None,
        channels_populated=sum(1 for d in channels.values() if d) if channels else None,
        mts=min(speeds) if speeds else None,
        bandwidth_gbs=system.bandwidth_gbs() if system else None,
        l3_domains=domains,
        ccd_links_gbs=domains * CCD_LINK_GBS if domains and zen3 else None)


def fact_summary(facts: HostFacts, policy: Policy | None = None) -> FactSummary:
    """The facts a diff and the Strategic layer compare, None where unobserved; the models are
    those of ``policy`` (the host's own), as examined on the host."""
    def fact(probe: ProbeResult | str) -> Any:
        found = facts.get(probe) if isinstance(probe, str) else probe
        return found.fact if found.ok else None

    numa = fact(facts.numa())
    gpus = fact(facts.gpus())
    cpu = fact(facts.cpu())
    mem = fact(facts.memory())
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
        models=_models(facts, policy),
        servers=fact("serve.servers"),
        memory=_memory(facts, cpu),
    )


@lru_cache(maxsize=1)
def strategic_catalog() -> list[dict[str, Any]]:
    doc = read_yaml(data_path("checks") / "strategic.yaml")
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
    if kind == "model_over_memory":
        return _model_over_memory(summary)
    if kind == "model_architecture":
        return _model_architecture(summary, {str(a) for a in arg})
    raise ValueError(f"unknown strategic condition {kind!r}")


NO_MODELS = "no omni_models in this host's policy: the models it serves are not known"


def _model_over_memory(summary: FactSummary) -> tuple[bool | None, str]:
    models, mem, swap = summary.models, summary.mem_total_mib, summary.swap_total_mib
    if models is None:
        return None, NO_MODELS
    if mem is None or swap is None:
        return None, "memory facts unavailable"
    budget = (mem + swap) * 1024 ** 2
    room = f"RAM+swap {size_text(budget)}"
    over = [f"{m.path} {size_text(m.size_bytes)}" for m in models
            if m.size_bytes is not None and m.size_bytes > budget]
    if over:
        return True, f"{'; '.join(over)} > {room}"
    unsized = [m.path for m in models if m.size_bytes is None]
    if unsized:
        return None, f"size of {', '.join(unsized)} not examined"
    largest = max(m.size_bytes or 0 for m in models)
    return False, f"largest model {size_text(largest)} <= {room}"


def _model_architecture(summary: FactSummary, names: set[str]) -> tuple[bool | None, str]:
    if summary.models is None:
        return None, NO_MODELS
    hits = [f"{m.path}: {m.architecture}" for m in summary.models if m.architecture in names]
    if hits:
        return True, "; ".join(hits)
    unread = [m.path for m in summary.models if m.architecture is None]
    if unread:
        return None, f"architecture of {', '.join(unread)} unknown (not examined or not GGUF)"
    return False, "models: " + ", ".join(sorted({m.architecture or "" for m in summary.models}))


def strategic(summary: FactSummary) -> tuple[EngineVerdict, ...]:
    """Each engine judged on this host (its facts and its policy's models): blocked (the
    conditions that hold, with the facts), unknown (what could not be decided, and why), or
    re-evaluate: viable here, with the facts that clear each condition."""
    out = []
    for entry in strategic_catalog():
        reasons: list[str] = []
        unknown: list[str] = []
        cleared: list[str] = []
        host_blocked = False
        for cond in entry["conditions"]:
            kind = next(k for k in cond if k != "why")
            why = cond.get("why") or cond[kind]
            holds, fact = _holds(kind, cond[kind], summary)
            (reasons if holds else unknown if holds is None else cleared).append(f"{why} [{fact}]")
            host_blocked = host_blocked or bool(holds and kind != "upstream")
        # An upstream block holds whatever the host's facts say: blocked, not unknown.
        status = (EngineStatus.BLOCKED if host_blocked else EngineStatus.BLOCKED_UPSTREAM
                  if reasons else EngineStatus.UNKNOWN if unknown else EngineStatus.RE_EVALUATE)
        out.append(EngineVerdict(entry["engine"], tuple(entry["lessons"]), status,
                                 tuple(reasons + unknown), tuple(cleared)))
    return tuple(out)
