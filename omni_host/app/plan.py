"""The plan use case (issue 46): ``omni-host plan`` reads, in the audit's one round trip, the
model's tensor table, each GPU's free and total memory and bandwidth, the CPUs' physical cores
and llama.cpp's own answers (llama-fit-params: its ``--fit`` placement and its memory
estimates); the candidates are assessed here (``evaluate.placement``) and ranked
(perf.placement). ``--prove`` then runs llama-bench for the leading candidates, the current
args and ``--fit``'s answer, in rounds behind the bench's gate (a second round trip: what to
run is known only once the first is judged), and says which is fastest beyond the noise. Stored
like a bench, never a baseline."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_host.app.audit import AuditRun, Hosts, finish
from omni_host.app.bench import BenchHost, BenchRefused
from omni_host.app.past import Past, past_of
from omni_host.collect.run import collect_host
from omni_host.collect.transport.base import SshOptions
from omni_host.errors import TransportError, UsageError
from omni_host.evaluate.audit import evaluate_bundle, unreachable
from omni_host.evaluate.ceiling import CCD_LINKS, CPU, CPU_BANDWIDTH, n_layers, visible_gpus
from omni_host.evaluate.checks import catalog
from omni_host.evaluate.placement import (
    Candidate,
    Gpu,
    Host,
    PlanItem,
    Workload,
    candidate_of,
    candidates,
    engine_compute,
    from_args,
    memory_need,
    where,
    without_placement,
)
from omni_host.evaluate.plan import CHECK_ID, PROOF_ID, PlanRow, plan_result, prove_result, row
from omni_host.model import CheckResult, FactSummary, HostReport, Source, Status, scrub_host
from omni_host.plan.hosts import HostPlan
from omni_host.plan.knobs import Arm
from omni_host.plan.policy import BenchSpec
from omni_host.plan.waivers import Waiver
from omni_host.probes.catalog import BENCH, evaluate, knob_probe, plan_probe
from omni_host.probes.parsers.bench import BenchRun, PlanFacts, TensorMap
from omni_host.report.history import History, HostEntries
from omni_host.report.results import PERF, details_of


@dataclass(frozen=True)
class PlanRequest:
    ctx: int = 4096  # the context the server will serve: what the KV cache must hold
    depth: int = 0  # the context a generated token reads (llama-bench -d) in the proof
    prove: bool = False
    rounds: int = 4
    top: int = 4  # the plan's leading candidates proved, beside the current args and --fit
    force: bool = False


def measured_rates(entries: HostEntries) -> dict[str, Any]:
    """What this host's newest stored benches reached: the fraction of its ceiling where the
    GPUs took every but 1% of a token's time, and the rate its CPU read weights at (an
    all-CPU or hybrid test)."""
    found: dict[str, Any] = {}
    for audit, entry in entries:
        if audit.report.source is not Source.BENCH:
            continue
        details = details_of(entry, PERF)
        ceilings = details.get("ceiling")
        ceilings = ceilings if isinstance(ceilings, dict) else {}
        for name, c in ceilings.items():
            devices = (c.get("devices") or {}) if isinstance(c, dict) else {}
            ms = {d: float(v.get("ms") or 0) for d, v in devices.items() if isinstance(v, dict)}
            if ms and ms.get(CPU, 0.0) <= 0.01 * sum(ms.values()) and c.get("fraction") \
                    and "gpu_efficiency" not in found:
                found["gpu_efficiency"] = float(c["fraction"])
                found["gpu_from"] = f"{name} of stored bench {audit.id}"
        rates = details.get("cpu_rates")
        rates = rates if isinstance(rates, dict) else {}
        for name, gbs in rates.items():
            if isinstance(gbs, int | float) and gbs > 0 and "cpu_gbs" not in found:
                found["cpu_gbs"] = float(gbs) * 1e9
                found["cpu_from"] = f"measured by {name} of stored bench {audit.id}"
        if "gpu_efficiency" in found and "cpu_gbs" in found:
            break
    return found


def plan_host_facts(run: BenchRun, context: dict[str, Any], rates: dict[str, Any]) -> Host:
    """The host as the plan sees it: the GPUs llama-bench sees, in its order (free and total
    memory, bandwidth), the CPU's read rate (measured, else its memory channels), the cores."""
    assert run.plan is not None
    gpus = tuple(Gpu(int(g.get("memory_total_bytes") or g.get("memory_free_bytes") or 0),
                     int(g.get("memory_free_bytes") or 0),
                     g["bus_width_bits"] / 8 * g["max_mem_clock_mhz"] * 1e6 * 2
                     if g.get("bus_width_bits") and g.get("max_mem_clock_mhz") else None)
                 for g in visible_gpus(run))
    cpu = rates.get("cpu_gbs")
    basis = rates.get("cpu_from", "")
    if cpu is None:
        theoretical = [v for v in (context.get(CPU_BANDWIDTH), context.get(CCD_LINKS)) if v]
        if theoretical:
            cpu, basis = min(theoretical) * 1e9, "the memory channels' theoretical rate (a " \
                "ceiling: no bench of this host measured its CPU)"
    compute: dict[str, int] = {}
    for estimate in run.plan.estimates:
        for device, amount in engine_compute(estimate.rows).items():
            compute[device] = max(compute.get(device, 0), amount)
    return Host(gpus, cpu, basis, rates.get("gpu_efficiency"), run.plan.physical_cores,
                compute)


def _estimate_args(current: Candidate, req: PlanRequest) -> list[list[str]]:
    """The args llama-fit-params estimates memory for: the current placement, and every layer
    on the GPUs (what gives each GPU's compute buffer), at the served context."""
    base = ["-c", str(req.ctx)]
    return [[*base, *current.server_flags()], [*base, "--n-gpu-layers", "999"]]


def _workload(spec: BenchSpec, req: PlanRequest) -> Workload:
    types = {"type_k": "f16", "type_v": "f16"}
    for i, arg in enumerate(spec.args[:-1]):
        if arg in ("-ctk", "--cache-type-k"):
            types["type_k"] = spec.args[i + 1].split(",")[0]
        if arg in ("-ctv", "--cache-type-v"):
            types["type_v"] = spec.args[i + 1].split(",")[0]
    return Workload(req.ctx, req.depth, **types)


def _engine_check(tensors: TensorMap, current: Candidate, host: Host, work: Workload,
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


def _policy_spec(plan: HostPlan) -> BenchSpec:
    spec = plan.policy.bench
    if spec is None:
        raise UsageError(f"{plan.name}: no omni_bench in its policy: omni-host plan places "
                         "omni_bench.model with omni_bench.llama_bench's build (docs/plan.md)")
    return spec


def _bench_run(bundle: Any, what: str) -> BenchRun | str:
    probe = evaluate(BENCH, bundle.results.get(BENCH.id))
    if not probe.ok:
        return f"{what} not run: {probe.why_not()}"
    run: BenchRun = probe.fact
    if run.refused:
        raise BenchRefused(f"{bundle.host}: {what} refused: {run.refused}"
                           + (" (--force runs it anyway)" if run.refused.startswith("busy")
                              else ""))
    return run


def plan_one(plan: HostPlan, ssh: SshOptions, past: Past, req: PlanRequest, *,
             probe_timeout_s: float | None = None) -> BenchHost:
    """One host's plan (and proof): its audit, perf.placement (the plan), and the proof's
    perf.placement where asked."""
    spec = _policy_spec(plan)
    meta, proof_meta = catalog()[CHECK_ID], catalog()[PROOF_ID]
    current = from_args(spec.args, "current", "the current args (omni_bench.args)", "current",
                        server=False)
    if isinstance(current, str):
        raise UsageError(f"{plan.name}: {current}")
    start = time.monotonic()
    try:
        bundle = collect_host(plan, ssh, probe_timeout_s, extra=(plan_probe(
            spec, ["-c", str(req.ctx)], _estimate_args(current, req)),))
    except TransportError as exc:
        return BenchHost(unreachable(plan, str(exc), time.monotonic() - start), False, None)
    report = evaluate_bundle(bundle, plan.policy, address=plan.address,
                             duration_s=time.monotonic() - start, expected=plan.expected,
                             prior=past.prior())
    from omni_host.evaluate.bench import bench_context

    run = _bench_run(bundle, "plan")
    if isinstance(run, str) or run.plan is None or not isinstance(run.tensors, TensorMap):
        why = run if isinstance(run, str) else "the bench helper read no plan facts" \
            if run.plan is None else str(run.tensors)
        return _with(report, meta.result(Status.ERROR, f"no plan: {why}"), plan)
    context = bench_context(report.facts or FactSummary(), run)
    rates = measured_rates(past.entries)
    host = plan_host_facts(run, context, rates)
    work = _workload(spec, req)
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
                       "cpu_from": host.cpu_basis or "unknown"},
             "gpus_free_mib": [round(g.free / 2**20) for g in host.gpus],
             "gpus_total_mib": [round(g.total / 2**20) for g in host.gpus],
             "physical_cores": host.physical_cores, "cpus": run.plan.cpus,
             "fit_params": run.plan.fit_params, "fit_error": run.plan.fit_error,
             **_engine_check(run.tensors, current, host, work, run.plan)}
    planned = plan_result(meta, ranked, about)
    if not req.prove:
        return _with(report, planned, plan)
    proved = _to_prove(ranked, req.top)
    flags = {candidate_of(item).key: candidate_of(item).bench_flags() for item in ranked}
    arms = tuple(Arm(r.key, (), (*without_placement(spec.args), *flags[r.key],
                                    *(("-d", str(req.depth)) if req.depth else ())))
                 for r in proved)
    try:
        again = collect_host(plan, ssh, probe_timeout_s,
                             extra=(knob_probe(spec, arms, req.rounds, force=req.force),))
    except TransportError as exc:
        return _with(report, planned, plan, proof_meta.result(
            Status.ERROR, f"the proof could not be collected: {exc}"))
    proof_run = _bench_run(again, "proof")
    if isinstance(proof_run, str) or proof_run.ab is None:
        why = proof_run if isinstance(proof_run, str) else "the bench helper ran no rounds"
        return _with(report, planned, plan, proof_meta.result(Status.ERROR, why))
    return _with(report, planned, plan, prove_result(proof_meta, proved, proof_run.ab, about))


def _to_prove(ranked: list[PlanItem], top: int) -> list[PlanRow]:
    """The plan's own ``top`` leading candidates that fit (those with a prediction first),
    then the current args and --fit's answer where they fit, each placement once."""
    rows = [row(item) for item in ranked]
    fitting = [r for r in rows if r.fits]
    chosen = [r for r in fitting if r.origin == "plan"][:top]
    chosen += [r for r in fitting if r.origin in ("current", "fit")]
    seen: set[str] = set()
    out = []
    for r in chosen:
        if r.llama_bench not in seen:
            seen.add(r.llama_bench)
            out.append(r)
    return out


def _with(report: HostReport, result: CheckResult, plan: HostPlan,
          proof: CheckResult | None = None) -> BenchHost:
    results = (*report.results, result, *((proof,) if proof is not None else ()))
    return BenchHost(scrub_host(dataclasses.replace(report, results=results), plan.secrets),
                     False, None)


def plan(plans: list[HostPlan], ssh: SshOptions, history: History, req: PlanRequest, *,
         waivers: tuple[Waiver, ...], inventory: str | None,
         probe_timeout_s: float | None = None,
         hint_args: tuple[str, ...] = ()) -> tuple[AuditRun, list[BenchHost]]:
    """Plan (and prove) each host in turn, then one report as a bench's."""
    started = time.time()
    pasts = {p.name: past_of(history, p.name) for p in plans}  # each host's store read once
    done = [plan_one(p, ssh, pasts[p.name], req, probe_timeout_s=probe_timeout_s)
            for p in plans]
    hosts = Hosts([d.report for d in done], Source.BENCH, started)
    return finish(hosts, inventory=inventory, waivers=waivers, history=history,
                  hint_args=hint_args, pasts=pasts), done


@dataclass(frozen=True)
class PlanRun:
    """A plan as the command line asks for it: the hosts, how to reach them, the store."""

    plans: tuple[HostPlan, ...]
    ssh: SshOptions
    request: PlanRequest
    inventory: str | None = None
    store_root: Path | None = None  # None: the default store
    store: bool = True
    probe_timeout_s: float | None = None
    hint_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Planned:
    run: AuditRun
    stored: Path | None
    warnings: tuple[str, ...]  # the store's, one line each


def run(req: PlanRun) -> Planned:
    """Resolve the store, read the hosts' past, plan (and prove) each host, store the report
    unless asked not to. Raises BenchRefused where a host's helper refused to run."""
    from omni_host.app.audit import keep
    from omni_host.app.stored import history_at, store_at

    store_root = store_at(req.store_root)
    history = history_at(store_root)
    if history.unreadable and req.store:  # as the bench does: never kept where others write
        raise UsageError(f"plan refused: {history.unreadable}; its report would be kept "
                         "there (--report-dir names another store, --no-store keeps none)")
    done, _ = plan(list(req.plans), req.ssh, history, req.request, waivers=(),
                   inventory=req.inventory, probe_timeout_s=req.probe_timeout_s,
                   hint_args=req.hint_args)
    stored = keep(done, store_root) if req.store else None
    return Planned(done, stored, tuple(history.warnings))
