"""The bench use case: one round trip per host collects the host's state and then runs its
llama-bench (the bench probe runs last, alone); the audit's checks judge the state, the
tokens/s Sentinel judges the run against the host's baseline, and the report (source
``bench``) is stored like an audit. The baseline is the newest stored bench of the host whose
perf.tokens-per-s result recorded one."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from omni_host.app.audit import AuditRun, Hosts, finish
from omni_host.app.past import Past, past_of
from omni_host.collect.run import Background, collect_host
from omni_host.collect.transport.base import SshOptions
from omni_host.errors import TransportError, UsageError
from omni_host.evaluate.audit import evaluate_bundle, unreachable
from omni_host.measure.asked import Asked, KnobAsked, RunRefused, SweepAsked, WhyAsked
from omni_host.measure.bench import CHECK_ID
from omni_host.measure.settle import first_run
from omni_host.measure.sweep import SweepPlan, plan_sweep
from omni_host.measure.twins import benched, gpu_twins, twins
from omni_host.measure.why import factors, pace, plan_why
from omni_host.model import Bundle, Source, Status
from omni_host.outcome import FirstRun
from omni_host.plan.hosts import HostPlan
from omni_host.plan.knobs import Knob
from omni_host.plan.knobs import arms as knob_arms
from omni_host.plan.knobs import current as knob_current
from omni_host.plan.policy import BenchSpec
from omni_host.plan.waivers import Waiver
from omni_host.probes.catalog import bench_probe, knob_probe
from omni_host.report.history import History
from omni_host.reports import HostReport, scrub_host


class BenchRefused(UsageError):
    """The host was busy (or its binary or model missing): nothing ran, nothing is stored."""


@dataclass(frozen=True)
class BenchHost:
    report: HostReport
    recorded: bool  # this run is now the host's baseline
    baseline: str | None  # the stored bench compared with
    warnings: tuple[str, ...] = ()  # stored benches skipped, one line each
    refused_baseline: str | None = None  # why this run is not the baseline asked for


def bench_spec(plan: HostPlan) -> BenchSpec:
    """The host's omni_bench; a UsageError naming what to set where it has none."""
    spec = plan.policy.bench
    if spec is None:
        raise UsageError(f"{plan.name}: no omni_bench in its policy: set omni_bench.llama_bench, "
                         "omni_bench.model and omni_bench.args (docs/bench.md)")
    return spec


def judged(bundle: Bundle, plan: HostPlan, past: Past, asked: Asked, *,
           duration_s: float = 0.0) -> HostReport:
    """A collected bundle judged once: the audit's checks and the check of what the run
    asked (``asked``), against the host's past, scrubbed of the plan's secrets. Raises
    BenchRefused where the helper refused to run (nothing measured, nothing stored)."""
    try:
        report = evaluate_bundle(bundle, plan.policy, address=plan.address,
                                 duration_s=duration_s, expected=plan.expected,
                                 prior=past.prior(), asked=asked)
    except RunRefused as exc:
        hint = " (--force runs it anyway)" if exc.why.startswith("busy") and exc.what in (
            "bench", "plan", "proof") else ""
        raise BenchRefused(f"{bundle.host}: {exc}{hint}") from None
    return scrub_host(report, plan.secrets)


def knob_host(plan: HostPlan, ssh: SshOptions, knob: tuple[Knob, str], pairs: int, *,
              force: bool, past: Past, probe_timeout_s: float | None = None,
              wait_s: float = 0.0) -> BenchHost:
    """An A/B of one knob on one host (perf.knob): its audit, and what the knob costs here;
    never a baseline. Raises BenchRefused when the helper refused to run."""
    spec = bench_spec(plan)
    start = time.monotonic()
    two = knob_arms(knob[0], knob[1], spec.args)
    try:
        bundle = collect_host(plan, ssh, probe_timeout_s,
                              extra=(knob_probe(spec, two, pairs, force=force, wait_s=wait_s),))
    except TransportError as exc:
        return BenchHost(unreachable(plan, str(exc), time.monotonic() - start), False, None)
    asked = Asked(knob=KnobAsked(knob[0], knob[1], knob_current(knob[0], spec.args)))
    return BenchHost(judged(bundle, plan, past, asked, duration_s=time.monotonic() - start),
                     False, None)


def why_host(plan: HostPlan, ssh: SshOptions, past: Past, *, force: bool,
             probe_timeout_s: float | None = None, wait_s: float = 0.0) -> BenchHost:
    """Each change since the baseline set back in rounds (perf.why): the factors read from
    the baseline and the latest bench judged against it; never a baseline. Raises
    BenchRefused where there is nothing to prove or the helper refused to run."""
    spec = bench_spec(plan)
    baseline = past.baseline
    latest = next((b for a, e in past.entries if a.report.source is Source.BENCH
                   and (b := e.bench) is not None and b.baseline is not None
                   and b.baseline.audit == (baseline.audit if baseline else None)), None)
    if baseline is None or latest is None:
        raise BenchRefused(f"{plan.name}: --why refused: "
                           + ("no baseline: run omni-host bench --baseline first" if baseline is None
                              else "no bench since the baseline: run omni-host bench first (--why "
                                   "proves what changed since)"))
    test = next((n for n in latest.tests if n in baseline.keys), None)
    then_keys = dict(baseline.keys.get(test, ())) if test else {}
    now_keys = {str(k): str(v) for k, v in latest.tests[test].key.items()} if test else {}
    found = factors(then_keys, now_keys, baseline.context, dict(latest.context))
    per_run = pace(baseline.tests, {n: list(t.samples_ts) for n, t in latest.tests.items()}) \
        or spec.budget_s
    planned = plan_why(spec.args, found, per_run)
    if isinstance(planned, str):
        raise BenchRefused(f"{plan.name}: --why refused: {planned}")
    start = time.monotonic()
    try:
        bundle = collect_host(plan, ssh, probe_timeout_s, extra=(knob_probe(
            spec, planned.arms, planned.rounds, force=force, wait_s=wait_s),))
    except TransportError as exc:
        return BenchHost(unreachable(plan, str(exc), time.monotonic() - start), False, None)
    asked = Asked(why=WhyAsked(planned.measured, planned.left))
    return BenchHost(judged(bundle, plan, past, asked, duration_s=time.monotonic() - start),
                     False, baseline.audit)


def bench_host(plan: HostPlan, ssh: SshOptions, past: Past, *, record: bool,
               force: bool, probe_timeout_s: float | None = None,
               sweep: bool = False, started: Background | None = None,
               wait_s: float = 0.0) -> BenchHost:
    """Collect and bench one host (``sweep``: the split sweep instead of the baseline's
    args; ``started``: its collection, already under way); raises BenchRefused when it
    refused to run."""
    spec = bench_spec(plan)
    swept: SweepPlan | None = None
    if sweep:
        baseline = past.baseline
        vram = [g.vram_gib for g in plan.policy.gpus or ()]
        planned = plan_sweep(spec, vram, baseline.tests if baseline else None)
        if isinstance(planned, str):
            raise BenchRefused(f"{plan.name}: split sweep refused: {planned}")
        swept = planned
    start = time.monotonic()
    probe = bench_probe(spec, force=force, wait_s=wait_s) if swept is None else \
        knob_probe(spec, swept.arms, swept.rounds, force=force, wait_s=wait_s)
    try:
        bundle = started.bundle() if started is not None and swept is None else \
            collect_host(plan, ssh, probe_timeout_s, extra=(probe,))
    except TransportError as exc:
        return BenchHost(unreachable(plan, str(exc), time.monotonic() - start), False, None)
    if swept is not None:
        return judge_sweep_bundle(bundle, plan, swept.splits[0], swept.dropped,
                                  duration_s=time.monotonic() - start, past=past)
    done = judge_bench(bundle, plan, None, record=record, duration_s=time.monotonic() - start,
                       past=past)
    first = None if record else first_of(done)
    if first is None:
        return done
    # a drop or a scattered run is measured once more before it is said (measure.bench.settle)
    try:
        again = collect_host(plan, ssh, probe_timeout_s,
                             extra=(bench_probe(spec, force=force, wait_s=wait_s),))
    except TransportError as exc:
        return dataclasses.replace(done, warnings=(*done.warnings, f"{plan.name}: the second "
                                                   f"run could not be collected: {exc}"))
    try:
        return judge_bench(again, plan, None, record=False,
                           duration_s=time.monotonic() - start, first=first, past=past)
    except BenchRefused as exc:  # busy now: the first run's verdict stands, and says so
        return dataclasses.replace(done, warnings=(*done.warnings, f"{exc}: the first run's "
                                                   "verdict stands unconfirmed"))


def first_of(done: BenchHost) -> FirstRun | None:
    """The first run's verdicts, when they call for a second run (measure.bench.first_run)."""
    result = done.report.result(CHECK_ID)
    return first_run(result.status, done.report.bench) if result is not None else None


def judge_sweep_bundle(bundle: Bundle, plan: HostPlan, advised: tuple[int, ...],
                       dropped: tuple[tuple[int, ...], ...], *, past: Past,
                       duration_s: float = 0.0) -> BenchHost:
    """A collected split-sweep bundle judged: its audit and perf.split-sweep (never a
    baseline). Raises BenchRefused where the helper refused to run."""
    asked = Asked(sweep=SweepAsked(advised, dropped))
    return BenchHost(judged(bundle, plan, past, asked, duration_s=duration_s), False, None)


def judge_bench(bundle: Bundle, plan: HostPlan, history: History | None, *, record: bool,
                duration_s: float = 0.0, first: FirstRun | None = None,
                past: Past | None = None) -> BenchHost:
    """A collected bench bundle (live, or recorded) judged: its audit and its tokens/s, each
    probe's output parsed once; against ``past`` (the host's, read once by the run), else the
    host's past in ``history``. Raises BenchRefused where the helper refused to run."""
    if past is None:
        assert history is not None
        past = past_of(history, plan.name)
    report = judged(bundle, plan, past, Asked(bench=True, record=record, first=first),
                    duration_s=duration_s)
    result = report.result(CHECK_ID)
    assert result is not None  # asked for: the check always says something
    outcome = report.bench
    recorded = outcome is not None and outcome.recorded_baseline
    unfit = outcome.unfit if outcome is not None else ()
    refused = "; ".join(unfit) if record and not recorded and unfit else None
    compared = past.baseline.audit if past.baseline is not None and not record \
        and result.status is not Status.ERROR else None
    return BenchHost(report, recorded, compared, () if record else past.warnings, refused)


def bench(plans: list[HostPlan], ssh: SshOptions, history: History, *, record: bool,
          force: bool, waivers: tuple[Waiver, ...], inventory: str | None,
          probe_timeout_s: float | None = None,
          sweep: bool = False, hint_args: tuple[str, ...] = (),
          under_way: Background | None = None, knob: tuple[Knob, str] | None = None,
          pairs: int = 6, wait_s: float = 0.0, why: bool = False
          ) -> tuple[AuditRun, list[BenchHost]]:
    """Bench each host in turn (never two benchmarks at once: they would measure each other
    where hosts share a machine), then one report as an audit's; ``under_way``: the first
    host's collection, started already; ``knob``: an A/B of that knob instead; ``why``: each
    change since the baseline set back instead (perf.why)."""
    started = time.time()
    pasts = {p.name: past_of(history, p.name) for p in plans}  # each host's store read once
    if knob is not None:
        done = [knob_host(p, ssh, knob, pairs, force=force, probe_timeout_s=probe_timeout_s,
                          past=pasts[p.name], wait_s=wait_s) for p in plans]
    elif why:
        done = [why_host(p, ssh, pasts[p.name], force=force, probe_timeout_s=probe_timeout_s,
                         wait_s=wait_s) for p in plans]
    else:
        done = [bench_host(p, ssh, pasts[p.name], record=record, force=force,
                           probe_timeout_s=probe_timeout_s, sweep=sweep,
                           started=under_way if i == 0 else None, wait_s=wait_s)
                for i, p in enumerate(plans)]
    hosts = Hosts([d.report for d in done], Source.BENCH, started)
    run = finish(hosts, inventory=inventory, waivers=waivers, history=history,
                 pasts=pasts, hint_args=hint_args)
    found: tuple[str, ...] = ()
    if knob is None and not sweep and not why:
        measured = benched(run.report.hosts)
        found = (*twins(measured), *(n for h, b in measured for n in gpu_twins(h, b)))
    return dataclasses.replace(run, report=dataclasses.replace(run.report, twins=found)), done

