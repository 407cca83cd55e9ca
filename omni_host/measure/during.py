"""What a bench ran under, as a context by key (``measure/context.py`` names the keys): the
host's facts when it started, each GPU's power limit, clocks and clock event reasons, and each
GPU's PCIe link as sampled while llama-bench ran. Pure: the run and the facts in, a dict out."""

from __future__ import annotations

from typing import Any, TypeGuard

from omni_host.measure.context import (
    CCD_LINKS,
    CPU_BANDWIDTH,
    CPU_LIST,
    ENV,
    KNOB,
    LIB,
    MODEL_FINGERPRINT,
    OWN_CPU,
    gpu_key,
)
from omni_host.model import (
    FactSummary,
    LinkUnderLoad,
)
from omni_host.probes.parsers import na
from omni_host.probes.parsers.bench_run import BenchRun


def measured(value: Any) -> TypeGuard[float]:
    """A number that was measured (not a missing value, not a flag)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _num(value: Any) -> float | None:
    text = na(str(value)) if value is not None else None
    if text is None:
        return None
    try:
        return float(text.split()[0])
    except ValueError:
        return None


def _gpu_context(run: BenchRun) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rows = (run.context.get("gpus") or {}).get("rows") or []
    for row in rows:
        i = row.get("index", "?")
        gen, width = na(row.get("pcie.link.gen.max")), na(row.get("pcie.link.width.max"))
        if gen or width:
            out[gpu_key(i, "pcie_max")] = f"gen{gen} x{width}"
        limit = _num(row.get("power.limit [W]"))
        if limit is not None:
            out[gpu_key(i, "power_limit_w")] = limit
        for field, key in (("clocks.max.sm [MHz]", "max_sm_mhz"),
                           ("clocks.max.memory [MHz]", "max_memory_mhz")):
            value = _num(row.get(field))
            if value is not None:
                out[gpu_key(i, key)] = value
        out[gpu_key(i, "name")] = row.get("name")
        if row.get("uuid"):  # another card than the baseline's is another machine's number
            out[gpu_key(i, "uuid")] = row.get("uuid")
    during = run.during or {}
    if rows:
        out["gpu_event_reasons"] = event_reasons(during.get("event_reasons") or [])
        apps = [f"{a.get('pid')} {a.get('process_name')}"
                for a in run.gate.get("compute_apps") or []]
        out["gpu_processes"] = ", ".join(
            sorted(set(apps + list(during.get("other_gpu_processes") or [])))) or "none"
        medians = _sm_medians(during.get("samples") or [])
        for i, mhz in medians.items():
            out[gpu_key(i, "sm_mhz")] = mhz
        for i, link in links_during(during.get("samples") or []).items():
            out[gpu_key(i, "pcie")] = link.typical
    return out


def links_during(samples: list[list[list[str]]]) -> dict[str, LinkUnderLoad]:
    """index -> its PCIe link while llama-bench ran, from the samples that carry it (the
    generation and width last). A link that trains down under load (left at Gen2) moves the
    median; one that flaps shows in the changes (evidence, never compared: a host whose link
    downshifts between tests does so in its baseline too)."""
    per: dict[str, list[tuple[int, int]]] = {}
    for sample in samples:
        for row in sample:
            if len(row) >= 8 and (gen := _num(row[6])) is not None and \
                    (width := _num(row[7])) is not None:
                per.setdefault(row[0].strip(), []).append((int(gen), int(width)))
    out = {}
    for i, links in per.items():
        speeds = sorted(links, key=lambda gw: gw[0] * gw[1])
        (g, w), (lg, lw) = speeds[len(speeds) // 2], speeds[0]
        out[i] = LinkUnderLoad(i, f"gen{g} x{w}", f"gen{lg} x{lw}", len(links),
                               sum(a != b for a, b in zip(links, links[1:], strict=False)))
    return out


# nvmlClocksEventReasons bits (nvidia-smi's clocks_event_reasons.active is their OR).
EVENT_BITS = ((0x1, "GPU idle"), (0x2, "applications clocks setting"), (0x4, "SW power cap"),
              (0x8, "HW slowdown"), (0x10, "sync boost"), (0x20, "SW thermal slowdown"),
              (0x40, "HW thermal slowdown"), (0x80, "HW power brake slowdown"),
              (0x100, "display clock setting"))


def event_reasons(masks: list[str]) -> str:
    """The clock event reasons seen in any sample, by name ("none" when none but idle)."""
    bits = 0
    for mask in masks:
        try:
            bits |= int(mask, 16)
        except ValueError:
            continue
    names = [name for bit, name in EVENT_BITS if bits & bit and bit != 0x1]
    return ", ".join(names) or "none"


def _sm_medians(samples: list[list[list[str]]]) -> dict[str, float]:
    """index -> the median SM clock over the samples taken while llama-bench ran."""
    per: dict[str, list[float]] = {}
    for sample in samples:
        for row in sample:
            if len(row) >= 2 and (mhz := _num(row[1])) is not None:
                per.setdefault(row[0].strip(), []).append(mhz)
    return {i: sorted(v)[len(v) // 2] for i, v in per.items() if v}


def bench_context(summary: FactSummary, run: BenchRun) -> dict[str, Any]:
    """The host state a bench ran under, by key (``measure.context``: labelled only where a
    change is said): what a drop is explained by (the audit's fact summary of the same
    bundle: it is evaluated once)."""
    ctx: dict[str, Any] = {}
    if summary.numa_nodes and summary.sockets:
        ctx["numa_per_socket"] = summary.numa_nodes / summary.sockets
    ctx["driver"] = summary.driver_version
    ctx["cuda"] = summary.cuda_version
    ctx["kernel"] = summary.kernel
    memory = summary.memory
    if memory is not None:
        if memory.channels:
            ctx["memory_channels"] = f"{memory.channels_populated} of {memory.channels}"
        ctx["memory_mts"] = memory.mts
        ctx[CPU_BANDWIDTH] = memory.bandwidth_gbs
        ctx[CCD_LINKS] = memory.ccd_links_gbs
    quota = run.context.get("cpu_quota")
    ctx["cpu_quota"] = (f"{quota['cpus']:g} CPUs ({quota['cgroup']})"
                        if isinstance(quota, dict) else "none")
    ctx["cpus_allowed"] = run.context.get("cpus_allowed")
    if run.context.get("cpu_list") is not None:  # read since issue 65: which CPUs they are
        ctx[CPU_LIST] = str(run.context["cpu_list"])[:200]
    binary = run.context.get("binary") or {}
    ctx["llama_bench_sha256"] = str(binary.get("sha256", ""))[:16] or None
    for lib, digest in sorted((binary.get("libs") or {}).items()):
        ctx[LIB + str(lib)] = str(digest)[:16]
    if run.result is not None:
        ctx["build"] = f"{run.result.build_commit} ({run.result.build_number})"
        ctx["backends"] = run.result.backends
    model = run.context.get("model") or {}
    ctx["model_bytes"] = model.get("size_bytes")
    ctx[MODEL_FINGERPRINT] = model.get("fingerprint")
    for name, value in sorted((run.context.get("env") or {}).items()):
        ctx[ENV + str(name)] = value
    for name, value in sorted((run.context.get("knobs") or {}).items()):
        ctx[KNOB + str(name)] = str(value)
    load = (run.during or {}).get("other_cpu_load")
    if load is not None:
        ctx["other_cpu_load"] = load
    own = (run.during or {}).get("own_cpu_s")
    if measured(own) and run.duration_s:
        # the other side of CPU contention: where the CPUs were busy before and after (a busy
        # loop beside both runs), other work cannot show as more load, only as less of it here
        ctx[OWN_CPU] = round(own / run.duration_s, 3)
    ctx.update(_gpu_context(run))
    return {k: v for k, v in ctx.items() if v is not None}

