"""perf.tokens-per-s, perf.knob, perf.split-sweep, perf.why and serve.stability: the checks of what a
run measured (a bench, a knob's A/B, a split sweep, a watch's rounds), registered like every
other check and judged once, with
the host's facts, its past and what the run asked (``measure.asked``). An audit asks for
none of them: they give no result there."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check_of_run
from omni_host.evaluate.prior import Prior
from omni_host.evaluate.sentinel import fact_summary
from omni_host.measure.asked import Asked, RunRefused
from omni_host.measure.bench import CHECK_ID as PERF
from omni_host.measure.bench import judge
from omni_host.measure.during import bench_context
from omni_host.measure.knob import CHECK_ID as KNOB
from omni_host.measure.knob import judge_knob
from omni_host.measure.sweep import CHECK_ID as SWEEP
from omni_host.measure.sweep import judge_sweep
from omni_host.measure.watch import CHECK_ID as STABILITY
from omni_host.measure.watch import judge_watch
from omni_host.measure.why import CHECK_ID as WHY
from omni_host.measure.why import judge_why
from omni_host.model import CheckResult, Status
from omni_host.plan.policy import Policy
from omni_host.probes.catalog import BENCH
from omni_host.probes.parsers.bench_run import BenchRun, KnobAB


def measured(facts: HostFacts, what: str, probe_id: str = BENCH.id) -> BenchRun | str:
    """The run the bench helper made, else why there is none. Raises RunRefused where the
    helper refused to run (nothing measured: nothing to judge)."""
    probe = facts.probes.get(probe_id)
    if probe is None or not probe.ok:
        return f"{what} not run: {probe.why_not() if probe is not None else 'no output'}"
    run: BenchRun = probe.fact
    if run.refused:
        raise RunRefused(what, run.refused)
    return run


@check_of_run(PERF, "omni-host bench")
def tokens_per_s(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
                 asked: Asked) -> CheckResult | None:
    """A bench against the host's baseline (none where the run is to record one)."""
    if not asked.bench:
        return None
    run = measured(facts, "bench")
    if isinstance(run, str):
        return meta.result(Status.ERROR, run)
    if policy.bench is None:
        return meta.result(Status.ERROR, "no omni_bench in the host's policy (docs/bench.md)")
    context = bench_context(fact_summary(facts, policy), run)
    return judge(meta, policy.bench, run, context, None if asked.record else prior.baseline,
                 record=asked.record, first=asked.first)


def rounds(facts: HostFacts, meta: CheckMeta, what: str, none: str,
           probe_id: str = BENCH.id) -> KnobAB | CheckResult:
    """The rounds of an A/B, a sweep or a proof, else the error that says why there are none
    (``none``: the words for a helper that ran none)."""
    run = measured(facts, what, probe_id)
    if isinstance(run, str):
        return meta.result(Status.ERROR, run)
    if run.ab is None:
        return meta.result(Status.ERROR, none)
    return run.ab


@check_of_run(KNOB, "omni-host bench --knob")
def knob_ab(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
            asked: Asked) -> CheckResult | None:
    """What one knob costs here: its A/B, never a baseline."""
    if asked.knob is None:
        return None
    ab = rounds(facts, meta, "A/B", "the bench helper ran no A/B (an older helper?)")
    return ab if isinstance(ab, CheckResult) else \
        judge_knob(meta, asked.knob.knob, asked.knob.value, ab, asked.knob.now)


@check_of_run(SWEEP, "omni-host bench --sweep-split")
def split_sweep(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
                asked: Asked) -> CheckResult | None:
    """Every split configuration's rounds against the advised split (never a baseline)."""
    if asked.sweep is None:
        return None
    ab = rounds(facts, meta, "sweep", "the bench helper ran no rounds (an older helper?)")
    return ab if isinstance(ab, CheckResult) else \
        judge_sweep(meta, ab, asked.sweep.advised, asked.sweep.dropped)


@check_of_run(WHY, "omni-host bench --why")
def why(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
        asked: Asked) -> CheckResult | None:
    """What each change since the baseline costs: each set back in rounds (never a baseline)."""
    if asked.why is None:
        return None
    ab = rounds(facts, meta, "--why", "the bench helper ran no rounds (an older helper?)")
    return ab if isinstance(ab, CheckResult) else \
        judge_why(meta, ab, asked.why.measured, asked.why.left)


@check_of_run(STABILITY, "omni-host serve watch")
def stability(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
              asked: Asked) -> CheckResult | None:
    """A watch's rounds: the servers hold their rate, stay up and do not grow."""
    if asked.watch is None:
        return None
    return judge_watch(meta, list(asked.watch.samples), interrupted=asked.watch.interrupted,
                       asked_s=asked.watch.window_s)
