"""The plan use case (issue 46): ``omni-host plan`` reads, in the audit's one round trip, the
model's tensor table, each GPU's free and total memory and bandwidth, the CPUs' physical cores
and llama.cpp's own answers (llama-fit-params: its ``--fit`` placement and its memory
estimates); the registered check perf.placement assesses the candidates
(``measure.placement``) and ranks them. ``--prove`` then loads each of the leading candidates,
the current args and ``--fit``'s answer once as a real llama-server at the served context
(``remote/serverload.py``: one that does not load is not benched) and runs llama-bench for
them in rounds behind the bench's gate (a
second round trip: what to run is known only once the plan is judged); its rounds join the
plan's bundle, and the whole is judged once (perf.placement-proof says which is fastest beyond
the noise). Stored like a bench, never a baseline."""

from __future__ import annotations

import dataclasses
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from omni_host.app.audit import AuditRun, Hosts, finish
from omni_host.app.bench import BenchHost, judged
from omni_host.app.past import Past, past_of
from omni_host.collect.run import collect_host
from omni_host.collect.transport.base import SshOptions
from omni_host.errors import TransportError, UsageError
from omni_host.evaluate.audit import unreachable
from omni_host.evaluate.checks.placement import current_args, load_flags
from omni_host.measure.asked import Asked, PlanAsked, ProofAsked
from omni_host.measure.candidates import HALF_THREADS
from omni_host.measure.placement import (
    Candidate,
    without_placement,
)
from omni_host.measure.plan import CHECK_ID, PlanRow, rows_of
from omni_host.model import Source
from omni_host.plan.hosts import HostPlan
from omni_host.plan.knobs import Arm
from omni_host.plan.policy import BenchSpec
from omni_host.plan.waivers import Waiver
from omni_host.probes.catalog import BENCH, BENCH_PROOF, knob_probe, plan_probe
from omni_host.report.history import History


@dataclass(frozen=True)
class PlanRequest:
    ctx: int = 4096  # the context the server will serve: what the KV cache must hold
    depth: int = 0  # the context a generated token reads (llama-bench -d) in the proof
    prove: bool = False
    rounds: int = 4
    top: int = 4  # the plan's leading candidates proved, beside the current args and --fit
    force: bool = False
    wait_s: float = 0.0  # --wait: --prove waits this long for another bench's lock
    budget_s: float | None = 300.0  # --budget: --prove's time, from the plan's start


def _estimate_args(current: Candidate, req: PlanRequest) -> list[list[str]]:
    """The args llama-fit-params estimates memory for: the current placement, and every layer
    on the GPUs (what gives each GPU's compute buffer), at the served context."""
    base = ["-c", str(req.ctx)]
    return [[*base, *current.server_flags()], [*base, "--n-gpu-layers", "999"]]


def _policy_spec(plan: HostPlan) -> BenchSpec:
    spec = plan.policy.bench
    if spec is None:
        raise UsageError(f"{plan.name}: no omni_bench in its policy: omni-host plan places "
                         "omni_bench.model with omni_bench.llama_bench's build (docs/plan.md)")
    return spec


def plan_one(plan: HostPlan, ssh: SshOptions, past: Past, req: PlanRequest, *,
             probe_timeout_s: float | None = None) -> BenchHost:
    """One host's plan (and proof): its audit, perf.placement (the plan), and the proof's
    perf.placement-proof where asked. The proof's rounds are kept in the plan's bundle and the
    whole is judged once; what the proof runs is chosen from the plan's first verdict."""
    spec = _policy_spec(plan)
    current = current_args(spec)
    if isinstance(current, str):
        raise UsageError(f"{plan.name}: {current}")
    start = time.monotonic()
    try:
        bundle = collect_host(plan, ssh, probe_timeout_s, extra=(plan_probe(
            spec, ["-c", str(req.ctx)], _estimate_args(current, req)),))
    except TransportError as exc:
        return BenchHost(unreachable(plan, str(exc), time.monotonic() - start), False, None)
    asked = Asked(plan=PlanAsked(req.ctx, req.depth))
    first = judged(bundle, plan, past, asked, duration_s=time.monotonic() - start)
    if not req.prove:
        return BenchHost(first, False, None)
    planned = first.result(CHECK_ID)
    rows = rows_of(planned.details.get("plan")) if planned is not None else []
    if not rows:  # no plan: nothing to prove (its verdict says why)
        return BenchHost(first, False, None)
    proved = _to_prove(rows, req.top)
    arms = tuple(Arm(r.key, (), (*without_placement(spec.args), *shlex.split(r.llama_bench),
                                    *(("-d", str(req.depth)) if req.depth else ())))
                 for r in proved)
    keys = tuple(r.key for r in proved)
    loads = {r.key: load_flags(spec, req.ctx, r.llama_server) for r in proved}
    left = None if req.budget_s is None else max(1.0, req.budget_s - (time.monotonic() - start))
    try:
        again = collect_host(plan, ssh, probe_timeout_s,
                             extra=(knob_probe(spec, arms, req.rounds, force=req.force,
                                               wait_s=req.wait_s, loads=loads,
                                               rounds_budget_s=left, keep=_kept(proved)),))
    except TransportError as exc:
        proof = ProofAsked(keys, f"the proof could not be collected: {exc}")
    else:
        proof = ProofAsked(keys)
        found = again.results.get(BENCH.id)
        if found is not None:
            bundle = dataclasses.replace(bundle, results={
                **bundle.results, BENCH_PROOF.id: dataclasses.replace(found,
                                                                      probe_id=BENCH_PROOF.id)})
    report = judged(bundle, plan, past, dataclasses.replace(asked, proof=proof),
                    duration_s=time.monotonic() - start)
    return BenchHost(report, False, None)


def within_margin(r: PlanRow) -> bool:
    """A row short only of the plan's own margin on each device it is short on: it would
    load by the plan's figures, with less left free than the plan keeps."""
    return not r.fits and bool(r.short_mib) and all(
        short <= ((r.memory_mib or {}).get(device) or {}).get("margin", 0)
        for device, short in (r.short_mib or {}).items())


def _kept(proved: list[PlanRow]) -> tuple[str, ...]:
    """The candidates a proof's budget never sheds: the plan's predicted leader and --fit's
    answer (what the proof is for: whether the plan beats the placement llama.cpp picks)."""
    leader = next((r.key for r in proved if r.origin == "plan"), None)
    return tuple(r.key for r in proved if r.key == leader or r.origin == "fit")


def _to_prove(rows: list[PlanRow], top: int) -> list[PlanRow]:
    """The plan's own ``top`` leading candidates that fit (those with a prediction first),
    then the current args and --fit's answer where they fit, each placement once. --fit's
    answer is proved also where it is short only of the plan's margin (llama.cpp keeps a
    margin of its own): the placement an operator would otherwise serve, measured beside the
    plan's; its load says whether it holds. The thread lever's candidate (half the cores) has
    no prediction to rank it by: it is proved beside the leaders."""
    fitting = [r for r in rows if r.fits]
    chosen = [r for r in fitting if r.origin == "plan" and r.key != HALF_THREADS][:top]
    chosen += [r for r in fitting if r.key == HALF_THREADS]  # the thread lever: only measured
    chosen += [r for r in rows if r.origin in ("current", "fit") and
               (r.fits or r.origin == "fit" and within_margin(r))]
    seen: set[str] = set()
    out = []
    for r in chosen:
        if r.llama_bench not in seen:
            seen.add(r.llama_bench)
            out.append(r)
    return out


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
