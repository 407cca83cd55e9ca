"""perf.placement and perf.placement-proof (issue 46): the placement plan of the model's
tensors, from the facts the plan's round trip read (the tensor table, each GPU's memory and
bandwidth, the CPU's cores, llama-fit-params' answers) and the rates the host's stored benches
reached; and the proof, its leading candidates measured in rounds, kept in the same bundle
(``bench.proof``). Registered checks of what the run asked (``measure.asked``): an audit and a
bench ask for neither."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from typing import Any

from omni_host.evaluate.checks.runs import measured, rounds
from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check_of_run
from omni_host.evaluate.prior import Prior
from omni_host.evaluate.sentinel import fact_summary
from omni_host.measure.asked import Asked, PlanAsked
from omni_host.measure.candidates import candidates
from omni_host.measure.ceiling import CPU, n_layers, visible_gpus
from omni_host.measure.context import CCD_LINKS, CPU_BANDWIDTH
from omni_host.measure.during import bench_context
from omni_host.measure.placement import (
    Candidate,
    Gpu,
    Host,
    PlanItem,
    Workload,
    engine_compute,
    engine_seen,
    from_args,
    memory_need,
    where,
)
from omni_host.measure.plan import CHECK_ID, PROOF_ID, plan_result, prove_result, row
from omni_host.measure.why import SPELLINGS
from omni_host.model import CheckResult, Status
from omni_host.plan.policy import BenchSpec, Policy
from omni_host.probes.catalog import BENCH_PROOF
from omni_host.probes.parsers.bench_run import BenchRun, PlanFacts, TensorMap


def current_args(spec: BenchSpec) -> Candidate | str:
    """The placement omni_bench.args give (the plan's "current" candidate), else why not."""
    return from_args(spec.args, "current", "the current args (omni_bench.args)", "current",
                     server=False)


def plan_host_facts(run: BenchRun, context: dict[str, Any], rates: Mapping[str, Any],
                    cpu_free: int | None = None) -> Host:
    """The host as the plan sees it: the GPUs llama-bench sees, in its order (free and total
    memory, bandwidth), the CPU's read rate (measured, else its memory channels), the cores,
    the host memory available (``cpu_free``, bytes; None where not read)."""
    assert run.plan is not None
    gpus = tuple(Gpu(int(g.get("memory_total_bytes") or g.get("memory_free_bytes") or 0),
                     int(g.get("memory_free_bytes") or 0),
                     g["bus_width_bits"] / 8 * g["max_mem_clock_mhz"] * 1e6 * 2
                     if g.get("bus_width_bits") and g.get("max_mem_clock_mhz") else None)
                 for g in visible_gpus(run))
    gpus = engine_seen(gpus, run.plan.engine_free)
    cpu = rates.get("cpu_gbs")
    basis = rates.get("cpu_from", "")
    theoretical = [v for v in (context.get(CPU_BANDWIDTH), context.get(CCD_LINKS)) if v]
    ceiling = min(theoretical) * 1e9 if theoretical else None
    if cpu is None and ceiling:
        cpu, basis = ceiling, "the memory channels' theoretical rate (a ceiling: no bench of " \
            "this host measured its CPU)"
    compute: dict[str, int] = {}
    for estimate in run.plan.estimates:
        for device, amount in engine_compute(estimate.rows).items():
            compute[device] = max(compute.get(device, 0), amount)
    threads = rates.get("cpu_threads") if rates.get("cpu_gbs") is not None else None
    ratio = rates.get("tg_ratio")
    learned: dict[str, Any] = {"ratio": (float(ratio[0]), float(ratio[1])),
                               "ratio_from": str(rates.get("tg_ratio_from"))} \
        if isinstance(ratio, list) and len(ratio) == 2 else {}
    spreads = {kind: float(w) for kind, w in ((CPU, rates.get("cpu_wander")),
                                              ("GPU", rates.get("gpu_wander")))
               if isinstance(w, (int, float))}
    return Host(gpus, cpu, basis, rates.get("gpu_efficiency"), run.plan.physical_cores,
                compute, cpu_free, threads if isinstance(threads, int) else None, ceiling,
                wander=spreads, **learned)


def _given(args: tuple[str, ...], option: str) -> str | None:
    """The option's value in the args (either spelling, the last given; a llama-bench list
    read at its first value), or None."""
    values = [v for a, v in zip(args, args[1:], strict=False) if a in SPELLINGS[option]]
    return values[-1].split(",")[0] if values else None


def load_flags(spec: BenchSpec, ctx: int, server_flags: str) -> list[str]:
    """What ``plan --prove`` loads a candidate with as a real llama-server: the served
    context, the candidate's flags as the plan prints them, and the bench args' flash
    attention and cache types in llama-server's spelling (a candidate's own cache type
    first)."""
    flags = shlex.split(server_flags)
    fa = _given(spec.args, "-fa")
    out = ["-c", str(ctx), *flags]
    if fa is not None:
        out += ["--flash-attn", "on" if fa in ("1", "on", "true") else
                "off" if fa in ("0", "off", "false") else "auto"]
    for option, spelled in (("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v")):
        value = _given(spec.args, option)
        if value is not None and spelled not in flags:
            out += [spelled, value]
    return out


def workload(spec: BenchSpec, asked: PlanAsked) -> Workload:
    def given(option: str) -> str | None:
        return _given(spec.args, option)

    type_k, type_v = given("-ctk"), given("-ctv")
    return Workload(asked.ctx, asked.depth, type_k or "f16", type_v or "f16",
                    cache_given=(type_k, type_v) != (None, None),
                    flash_attn=given("-fa") in ("1", "on", "true"))


def engine_check(tensors: TensorMap, current: Candidate, host: Host, work: Workload,
                  facts: PlanFacts) -> dict[str, Any]:
    """Our memory figures for the current args beside llama-fit-params' for the same args."""
    p = where(current, host)
    estimate = facts.estimates[0] if facts.estimates else None
    if isinstance(p, str) or estimate is None or estimate.error:
        return {"engine": None if estimate is None else estimate.error}
    ours = memory_need(tensors, p, host, work)
    engine = {}
    for device, model, context, compute in estimate.rows:
        digits = "".join(c for c in device if c.isdigit())
        name = CPU if device == "Host" else f"GPU{int(digits)}" if digits else device
        mine = ours.get(name, {})
        engine[name] = {"engine_model_mib": model, "engine_context_mib": context,
                        "engine_compute_mib": compute,
                        "plan_weights_mib": round(mine.get("weights", 0) / 2**20),
                        "plan_kv_mib": round(mine.get("kv", 0) / 2**20)}
    return {"engine": engine}


def planned(facts: HostFacts, policy: Policy, prior: Prior, asked: PlanAsked
            ) -> tuple[list[PlanItem], dict[str, Any]] | str:
    """The candidates, assessed and ranked, and what they were assessed with (the workload,
    the rates and their basis, llama-fit-params' answers); else why there is no plan."""
    spec = policy.bench
    if spec is None:
        return "no omni_bench in the host's policy (docs/plan.md)"
    current = current_args(spec)
    if isinstance(current, str):
        return current
    run = measured(facts, "plan")
    if isinstance(run, str) or run.plan is None or not isinstance(run.tensors, TensorMap):
        return run if isinstance(run, str) else "the bench helper read no plan facts" \
            if run.plan is None else str(run.tensors)
    trained = run.tensors.context_length
    if trained and max(asked.ctx, asked.depth) > trained:
        return (f"--ctx {asked.ctx} / --depth {asked.depth} is past the model's trained context "
                f"({trained} tokens): a server past it answers garbage; plan at most {trained}")
    context = bench_context(fact_summary(facts, policy), run)
    rates = prior.rates
    memory = facts.memory()
    available = memory.fact.mem_available_kib if memory.ok else None
    host = plan_host_facts(run, context, rates, None if available is None else available * 1024)
    work = workload(spec, asked)
    fit = None
    if run.plan.fit_args is not None:
        got = from_args(run.plan.fit_args, "fit", "llama.cpp's --fit answer "
                        "(llama-fit-params)", "fit", server=True)
        fit = None if isinstance(got, str) else dataclasses.replace(got,
                                                                     threads=host.physical_cores)
    ranked = candidates(run.tensors, host, work, current, fit)
    model = run.context.get("model") or {}
    about = {"model": {"path": model.get("path"), "fingerprint": model.get("fingerprint")},
             "n_layers": n_layers(run.tensors) + 1,
             "workload": {"ctx": work.ctx, "depth": work.depth, "type_k": work.type_k,
                          "type_v": work.type_v},
             "rates": {"gpu_gbs": [None if g.gbs is None else round(g.gbs / 1e9, 1)
                                   for g in host.gpus],
                       "gpu_efficiency": host.gpu_efficiency,
                       "gpu_efficiency_from": rates.get("gpu_from") or
                       "none measured: GPUs at their full bandwidth",
                       "cpu_gbs": None if host.cpu_gbs is None else round(host.cpu_gbs / 1e9, 1),
                       "cpu_from": host.cpu_basis or "unknown",
                       "cpu_threads": host.cpu_threads,
                       "tg_ratio": list(host.ratio), "tg_ratio_from": host.ratio_from,
                       "wander": host.wander},
             "gpus_free_mib": [round(g.free / 2**20) for g in host.gpus],
             # each GPU's NVML index, in llama-bench's order (a proof's loads are read by it)
             "gpus_nvml_index": [g.get("index") for g in visible_gpus(run)],
             # NVML's figure before the engine's (a CUDA context of its own) was taken
             "gpus_free_nvml_mib": [round(int(g.get("memory_free_bytes") or 0) / 2**20)
                                    for g in visible_gpus(run)],
             "gpus_free_engine_mib": {name: free for name, free, _ in run.plan.engine_free},
             "cpu_available_mib": None if host.cpu_free is None else round(host.cpu_free / 2**20),
             "swap_free_mib": memory.fact.swap_free_kib // 1024 if memory.ok else None,
             "gpus_total_mib": [round(g.total / 2**20) for g in host.gpus],
             "physical_cores": host.physical_cores, "cpus": run.plan.cpus,
             "fit_params": run.plan.fit_params, "fit_error": run.plan.fit_error,
             **engine_check(run.tensors, current, host, work, run.plan)}
    return ranked, about


@check_of_run(CHECK_ID, "omni-host plan")
def placement(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
              asked: Asked) -> CheckResult | None:
    """The candidates ranked by predicted generation rate, with the memory each needs."""
    if asked.plan is None:
        return None
    found = planned(facts, policy, prior, asked.plan)
    if isinstance(found, str):
        return meta.result(Status.ERROR, f"no plan: {found}")
    return plan_result(meta, *found)


@check_of_run(PROOF_ID, "omni-host plan --prove")
def placement_proof(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
                    asked: Asked) -> CheckResult | None:
    """The plan's candidates the run proved (``asked.proof``: their keys), measured in
    rounds: which is fastest beyond the noise."""
    if asked.plan is None or asked.proof is None:
        return None
    if asked.proof.error:
        return meta.result(Status.ERROR, asked.proof.error)
    found = planned(facts, policy, prior, asked.plan)
    if isinstance(found, str):
        return meta.result(Status.ERROR, f"no plan: {found}")
    ranked, about = found
    rows = {r.key: r for r in map(row, ranked)}
    proved = [rows[key] for key in asked.proof.keys if key in rows]
    ab = rounds(facts, meta, "proof", "the bench helper ran no rounds", BENCH_PROOF.id)
    return ab if isinstance(ab, CheckResult) else prove_result(meta, proved, ab, about)
