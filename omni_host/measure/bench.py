"""The tokens/s Sentinel's judgement, pure: a bench run against the host's own baseline, the
state that changed since it, and the ceiling the hardware allows.

* **Noise is measured.** Each test keeps every repetition's tokens/s. The threshold of a test is
  the largest of ``omni_bench.tolerance_pct``, three pooled standard deviations of the two
  runs' repetitions (relative), and, once three healthy runs are known (the baseline and those
  that passed against it), three standard deviations of their means: runs differ more from
  each other than repetitions within one run do. A drop beyond it warns, beyond twice it fails.
  Prompt processing and generation are judged apart.
* **What changed** is the difference between the baseline's context and this run's: NUMA nodes
  per socket, driver, CUDA, kernel, swap, each GPU's link, power limit and clocks, the clock
  event reasons seen during the run, the llama-bench binary and libraries (sha256), the
  llama.cpp build, the CPUs allowed and the cgroup CPU quota, other load on the GPUs and CPUs.
  Numbers differ only beyond 5% (other load: 0.25 CPUs; the CPU llama-bench got: 0.25 CPUs or
  20% of it), so measurement jitter is not called a change.
* **The ceiling** of generation (``measure/ceiling.py``): the bytes a token reads on each
  device, from the model's GGUF tensor table and the test's placement (partial offload and
  mixtures of experts included), at each device's bandwidth; where the CPU's is unknown, at
  the rate an all-CPU test of the same run reached (a prediction, said so).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_host.codec import document, from_dict
from omni_host.measure.ceiling import limit_words, run_ceilings
from omni_host.measure.context import (
    MODEL_FINGERPRINT,
    OWN_CPU,
    Change,
    diff,
    label,
    same,
)
from omni_host.measure.during import links_during, measured
from omni_host.measure.series import (
    SIGMAS,
    TestVerdict,
    drops_past,
    judge_test,
    step_began,
    step_window,
)
from omni_host.measure.settle import RANK, judgement, measured_test, settle, worst_first
from omni_host.model import BENCH_CHECK, Baseline, CheckResult, Evidence, LinkUnderLoad, Status
from omni_host.outcome import BenchOutcome, BenchRef, Ceiling, FirstRun
from omni_host.plan.policy import BenchSpec
from omni_host.probes.parsers.bench import SHORT
from omni_host.probes.parsers.bench_run import BenchRun

if TYPE_CHECKING:
    from omni_host.evaluate.meta import CheckMeta

CHECK_ID = BENCH_CHECK


def _evidence(run: BenchRun, links: list[LinkUnderLoad]) -> tuple[Evidence, ...]:
    lines = [f"{t.name}: {t.estimate.center_ts:.2f} t/s ±{t.estimate.spread:.1%} (median and "
             f"robust spread of {t.estimate.used} of {len(t.samples_ts)} repetitions: "
             f"{', '.join(f'{s:.2f}' for s in t.samples_ts)})" for t in run.result.tests] \
        if run.result else []
    lines += [link.line() for link in links]
    if run.error:  # what it said when it failed (after the tests it finished, if any)
        lines += [*run.stderr_tail[-5:]]
    return (Evidence("bench.llama", " ".join(run.argv) or "llama-bench", tuple(lines)),)


def disturbances(spec: BenchSpec, run: BenchRun) -> list[str]:
    """What else ran while it measured: forced past a busy gate, other processes on the GPUs,
    other CPU load past max_other_cpus. A disturbed run never passes."""
    why = []
    if run.gate.get("forced"):
        why.append("run with --force")
    busy = run.context.get("busy_before") or []
    if busy:
        why.append("busy at the start (" + "; ".join(str(b) for b in busy) + ")")
    during = run.during or {}
    others = during.get("other_gpu_processes") or []
    if others:
        why.append("other processes on the GPUs during the run: " + ", ".join(map(str, others)))
    load = during.get("other_cpu_load")
    if measured(load) and load > spec.max_other_cpus:
        why.append(f"other processes used {load:.2f} CPUs during the run (a baseline allows "
                   f"{spec.max_other_cpus:g}: omni_bench.max_other_cpus)")
    return why


def unfit_reasons(spec: BenchSpec, run: BenchRun) -> list[str]:
    """Why this run cannot be a baseline or a sample of the noise between runs: it was
    disturbed, the load of other processes was not measured, or its repetitions spread wider
    than a baseline may. [] for a fit run."""
    why = disturbances(spec, run)
    if not measured((run.during or {}).get("other_cpu_load")):
        why.append("the CPU load of other processes during the run was not measured")
    for test in run.result.tests if run.result else ():
        if test.estimate.spread * 100 > spec.max_spread_pct:
            why.append(f"{test.name}'s repetitions spread ±{test.estimate.spread:.1%} (a baseline "
                       f"allows ±{spec.max_spread_pct:g}%: omni_bench.max_spread_pct)")
    return why


def _flag(field: str) -> str:
    return f"-{SHORT[field]}" if field in SHORT else field


def key_diff(before: tuple[tuple[str, str], ...], after: tuple[tuple[str, str], ...]) -> list[str]:
    """What a test measured differently ("-t 2 -> 1"), over the fields both records have."""
    a, b = dict(before), dict(after)
    return [f"{_flag(k)} {a[k]} -> {b[k]}" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]


def comma_split(argv: tuple[str, ...] | list[str]) -> str | None:
    """A tensor split given to llama-bench with commas: llama-bench reads a comma as a list
    of configurations (-ts 75,25 is two tests, ts 75 and ts 25, each with every layer on one
    GPU), and a split's shares with '/'. The words that say so, or None."""
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in ("-ts", "--tensor-split"):
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            parts = [p for p in value.split(",") if p]
            if len(parts) > 1 and not any("/" in p for p in parts):
                return (f"{name} {value} made llama-bench measure {len(parts)} configurations "
                        f"({', '.join('ts ' + p for p in parts)}, each with every layer on one "
                        f"GPU): llama-bench separates a split's shares with '/' ({name} "
                        f"{'/'.join(parts)}), llama-server with ',' ({name} {value})")
    return None


def _starved(before: dict[str, Any], after: dict[str, Any],
             verdicts: list[TestVerdict]) -> str | None:
    """A drop past the tolerance that the noise alone cannot call, measured beside its cause:
    llama-bench got less CPU than at the baseline (past the jitter ``context.same`` allows). The CPU
    it got is measured apart from its rate, so the two together say what neither says alone.
    The words that say so, or None."""
    a, b = before.get(OWN_CPU), after.get(OWN_CPU)
    if not (measured(a) and measured(b)) or b >= a or same(OWN_CPU, a, b):
        return None
    fell = [v for v in verdicts if v.tolerance < v.drop <= v.threshold]
    if not fell:
        return None
    names = ", ".join(f"{v.name} fell {v.drop:.0%} (tolerance {v.tolerance:.0%})" for v in fell)
    return (f"llama-bench got {1 - b / a:.0%} less CPU than at the baseline ({a:g} -> {b:g} "
            f"CPUs) and {names}: within the noise alone, but the contention measured beside it "
            "is the likely cause")


def _outcome(run: BenchRun, spec: BenchSpec, context: dict[str, Any],
             links: list[LinkUnderLoad]) -> BenchOutcome:
    """What the run measured, before any baseline: its tests, context, ceilings, fitness."""
    assert run.result is not None
    limits = run_ceilings(run, context)
    unfit = unfit_reasons(spec, run)
    return BenchOutcome(
        {t.name: measured_test(t) for t in run.result.tests}, context,
        {n: from_dict(Ceiling, c) for n, c in limits.items() if "ceiling_ts" in c},
        {n: c["why_not"] for n, c in limits.items() if "why_not" in c},
        # the rate the CPU read weights at, where a test says it (omni-host plan predicts with it)
        {n: c["cpu_effective_gbs"] for n, c in limits.items() if c.get("cpu_effective_gbs")},
        forced=bool(run.gate.get("forced")), fit=not unfit, unfit=tuple(unfit),
        disturbances=tuple(disturbances(spec, run)),
        # each GPU's PCIe link while it ran: the audit's gpu.pcie-link reads it from here
        links=tuple(links))


def _ceiling_note(ceilings: dict[str, Ceiling]) -> str:
    return "; ".join(
        f"{n} at {c.fraction:.0%} of " + (f"its {c.ceiling_ts:g} t/s ceiling"
                                          if c.basis == "theoretical"
                                          else f"the {c.ceiling_ts:g} t/s predicted at {c.basis}")
        + f" ({limit_words(c.limit.removesuffix(' memory'), fraction=c.fraction)})"
        for n, c in ceilings.items())


@dataclass(frozen=True)
class _Said:
    """A verdict as it will be stored: its status, its words and the outcome they describe."""

    status: Status
    text: str
    outcome: BenchOutcome
    expected: str | None = None


def _measured_line(run: BenchRun) -> str:
    assert run.result is not None
    return ", ".join(f"{t.name} {t.estimate.center_ts:.1f} t/s ±{t.estimate.spread:.1%}"
                     for t in run.result.tests)


def _record(spec: BenchSpec, run: BenchRun, outcome: BenchOutcome, *, record: bool) -> _Said:
    """A run that becomes the baseline (asked to, or the host's first), or says why it cannot."""
    assert run.result is not None
    measured = _measured_line(run)
    if outcome.unfit:
        ask = "--baseline refused" if record else "no baseline yet"
        return _Said(Status.WARN, f"{ask}: this run is not fit to be one ("
                     f"{'; '.join(outcome.unfit)}); run omni-host bench again when the host is "
                     f"idle: {measured}", outcome)
    why = "recorded on purpose (--baseline)" if record else "the host's first bench"
    summary = f"baseline recorded ({why}): {measured}"
    kinds = {t.name: t.kind for t in run.result.tests}
    resolution = {t.name: max(spec.tolerance_for(t.kind) / 100, SIGMAS * t.estimate.spread)
                  for t in run.result.tests}
    coarse = [f"{n} to {drops_past(r, 'drops past')}" for n, r in resolution.items()
              if r > spec.tolerance_for(kinds[n]) / 100]
    if coarse:  # said once, here: later runs are judged at it without a warn each time
        summary += (f"; its repetitions' spread resolves {', '.join(coarse)} until the "
                    "spread between runs is measured")
    note = _ceiling_note(outcome.ceiling)
    return _Said(Status.PASS, summary + (f"; {note}" if note else ""),
                 dataclasses.replace(outcome, recorded_baseline=True, resolution={
                     n: round(r, 4) for n, r in resolution.items()}))


def _compare(spec: BenchSpec, run: BenchRun, context: dict[str, Any], baseline: Baseline,
             outcome: BenchOutcome, first: FirstRun | None
             ) -> tuple[BenchOutcome, list[TestVerdict], list[Change]] | _Said:
    """Each comparable test judged against the baseline and settled; what changed since it.
    The words that say why nothing can be compared, where nothing can."""
    assert run.result is not None
    tests = {t.name: t for t in run.result.tests}
    was, now = baseline.context.get(MODEL_FINGERPRINT), context.get(MODEL_FINGERPRINT)
    other = [f"{label(MODEL_FINGERPRINT)} {was} -> {now} (another file at {spec.model})"] \
        if was not in (None, now) else []
    differ = {n: key_diff(baseline.keys.get(n, ()), t.key) for n, t in tests.items()}
    comparable = [n for n in tests if n in baseline.tests and not differ[n] and not other]
    changes, unchanged = diff(baseline.context, context)
    outcome = dataclasses.replace(
        outcome, baseline=BenchRef(baseline.audit, baseline.recorded_at),
        not_comparable=tuple(sorted({*other, *(d for n in tests for d in differ[n])})),
        unchanged=tuple(unchanged), changed=tuple(c.line() for c in changes))
    if not comparable:
        why = "; ".join(outcome.not_comparable) or \
            f"the baseline measured other tests ({', '.join(baseline.tests)})"
        settings = [c.line() for c in changes if c.setting]
        moved = f"; since the baseline: {'; '.join(settings)}" if settings else ""
        trap = comma_split(run.argv)
        return _Said(Status.WARN, f"not comparable with baseline {baseline.audit}: {why}"
                     f"{moved}{'; ' + trap if trap else ''}; record a new baseline: "
                     "omni-host bench --baseline", outcome)
    verdicts = []
    for n in comparable:
        series, window = step_window(baseline, n)
        v = judge_test(n, baseline.tests[n], list(tests[n].samples_ts),
                       spec.tolerance_for(tests[n].kind), baseline.run_centers.get(n, ()),
                       series)
        verdicts.append(v if v.step is None else
                        dataclasses.replace(v, step_began=step_began(window)))
    outcome = dataclasses.replace(outcome, verdicts=settle(
        {v.name: judgement(v) for v in verdicts}, first), first_run=first)
    return outcome, verdicts, changes


def _attribute(run: BenchRun, context: dict[str, Any], baseline: Baseline,
               outcome: BenchOutcome, verdicts: list[TestVerdict], changes: list[Change],
               first: FirstRun | None) -> _Said:
    """The settled verdicts said with what explains them: what changed since the baseline
    first, then the CPU it was starved of, a split llama-bench misread, another card, a run
    not fit to learn the noise, a disturbed run. Each of these keeps a pass from passing."""
    settled = worst_first(outcome.verdicts)
    status = max((v.status for v in settled), key=RANK.__getitem__)
    text = "; ".join(v.line for v in settled)
    settings = [c for c in changes if c.setting]
    if changes:  # what moved comes first, before anything about the noise
        text = f"since the baseline: {'; '.join(outcome.changed)}; {text}"
        if settings and any(v.blind for v in settled) and status is Status.PASS:
            # the host changed and this comparison cannot see a drop of the tolerance
            status = Status.WARN
    elif any(v.dropped for v in settled):
        text += "; since the baseline: no change in the recorded host state"
    elif status is Status.PASS and (note := _ceiling_note(outcome.ceiling)):
        text += f"; {note}"
    starved = _starved(baseline.context, context, verdicts)
    if starved and status is Status.PASS:
        status, text = Status.WARN, f"{text}; {starved}"
    warns = []
    if trap := comma_split(run.argv):
        text += f"; {trap}"
        warns.append(trap)
    if any(c.card for c in changes):  # the baseline measured another card
        text += "; another GPU than the baseline's: record this one's with omni-host bench --baseline"
        warns.append("card")
    if outcome.unfit:
        text += f"; not used to learn the noise ({'; '.join(outcome.unfit)})"
    if outcome.disturbances:  # it measured the host and something else
        warns.append("disturbed")
    if first and first.disturbed and status is Status.PASS and not warns:
        text += f"; the first of two runs was disturbed ({first.disturbed})"
        warns.append("first disturbed")
    if warns and status is Status.PASS:
        status = Status.WARN
    return _Said(status, text, outcome, f"within the noise of baseline {baseline.audit}")


def judge(meta: CheckMeta, spec: BenchSpec, run: BenchRun, context: dict[str, Any],
          baseline: Baseline | None, *, record: bool,
          first: FirstRun | None = None) -> CheckResult:
    """The verdict on one run. ``record``: this run is asked to become the baseline
    (--baseline); with no baseline the run becomes one if fit. A run that is not fit is never
    a baseline: it is judged (when there is a baseline) and kept as evidence, and says why.
    The result's details are the typed outcome's JSON form (``HostReport.bench`` reads it).
    Three steps: settle each test against the baseline (``_compare``, ``settle``), then say
    what explains the verdict (``_attribute``)."""
    links = list(links_during((run.during or {}).get("samples") or []).values())
    evidence = _evidence(run, links)
    if run.error or run.result is None:
        return meta.result(Status.ERROR, f"llama-bench failed: {run.error}", evidence=evidence,
                           details={"error": run.error, "stderr_tail": list(run.stderr_tail)})
    outcome = _outcome(run, spec, context, links)
    if record or baseline is None:
        said = _record(spec, run, outcome, record=record)
    else:
        compared = _compare(spec, run, context, baseline, outcome, first)
        said = compared if isinstance(compared, _Said) else \
            _attribute(run, context, baseline, *compared, first)
    return meta.result(said.status, said.text, expected=said.expected,
                       actual=_measured_line(run), evidence=evidence,
                       details=document(said.outcome))
