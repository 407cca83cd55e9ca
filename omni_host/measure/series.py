"""One test's series judged, pure: today's repetitions against the baseline's and the centres
of the runs between (``judge_test``). The noise is measured (within a run, between runs, at
each run's own level), the baseline's modes are learned only from runs that are not a descent,
a slide and a step below the tolerance are read from the series, and the verdict states the
smallest drop it could detect (``TestVerdict``)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from omni_host.model import (
    Baseline,
    JudgedSince,
    Status,
)
from omni_host.probes.parsers.bench import (
    Estimate,
    estimate,
    robust_spread,
)


@dataclass(frozen=True)
class TestVerdict:
    name: str
    status: Status
    baseline_ts: float
    now_ts: float
    drop: float  # fraction below the reference (negative: faster)
    threshold: float  # the drop that warns (fraction)
    noise: float = 0.0  # one run's relative standard deviation, as measured
    detectable: float = 0.0  # the smallest drop this comparison can tell from noise
    tolerance: float = 0.0  # the operator's (omni_bench.tolerance_pct), as a fraction
    modes: tuple[float, ...] = ()  # the centers of the modes its unchanged runs cluster in
    drift: float | None = None  # its runs since the baseline slid this much, in a row
    resolution: float = 0.0  # the least drop its baseline (and runs since) can resolve
    typical: bool = False  # judged from the median of its unchanged runs, not the baseline's
    step: float | None = None  # its last STEP_RUNS runs sit this far below the runs before
    wander_unknown: int | None = None  # the runs known where fewer than the spread needs
    step_began: str = ""  # where the step began and what changed in its runs (step_began)

    @property
    def noisier(self) -> bool:
        """This run scattered past what its baseline resolves: something on the host did."""
        return not self.dropped and self.status is Status.WARN

    @property
    def blind(self) -> bool:
        """The noise hides a drop of the operator's tolerance: judged at its resolution."""
        return self.detectable > self.tolerance

    @property
    def dropped(self) -> bool:
        return self.drop > self.threshold

    def line(self) -> str:
        mark = "the nearest of its modes" if len(self.modes) > 1 else \
            "its runs' median" if self.typical else "baseline"
        where = (f"{abs(self.drop):.0%} {'below' if self.drop > 0 else 'above'} {mark}"
                 if abs(self.drop) >= 0.005 else f"at {mark}")
        text = (f"{self.name} {where} ({self.now_ts:.1f} vs {self.baseline_ts:.1f} t/s, "
                f"noise ±{self.noise:.1%}, {drops_past(self.threshold)})")
        if len(self.modes) > 1:
            text += (f"; its unchanged runs cluster in {len(self.modes)} modes ("
                     + ", ".join(f"{m:.1f}" for m in self.modes) + " t/s): a drop is judged "
                     "from the nearest, below the lowest")
        if self.drift is not None:
            text += (f"; its runs since the baseline fell {self.drift:.0%} and stayed down (a "
                     "slide or a step): a drift, judged from the baseline, never learned as noise")
        if self.wander_unknown is not None and self.dropped and \
                self.drop <= 2 * self.tolerance and self.drop < HALVED:
            text += (f"; how far its runs wander between runs is not known yet ("
                     f"{self.wander_unknown} run(s) of the {MIN_RUNS_FOR_SPREAD} that tell it): "
                     "not claimed as a drop until they do (run omni-host bench again)")
        if self.step is not None:
            text += (f"; a step: this run and the {STEP_RUNS - 1} before it sit {self.step:.1%} "
                     f"below the runs before them, past {SIGMAS} x their spread (named under "
                     "the tolerance: a slow decline starts so)")
            if self.step_began:
                text += f"; {self.step_began}"
        if self.noisier:
            text += (f": this run scattered past what its baseline resolves ("
                     f"{drops_past(self.resolution, 'drops past')}): "
                     + (f"cannot judge drops below {self.detectable:.0%}" if self.detectable < 1
                        else "cannot judge a drop here"))
        elif self.blind and not self.dropped:
            text += (f"; judged at its resolution, {drops_past(self.detectable, 'drops past')} "
                     f"(tolerance {self.tolerance:.0%})")
        return text


def drops_past(fraction: float, words: str = "detects drops past") -> str:
    """The smallest drop a verdict could detect, in words; past 100% (a rate cannot fall by
    more than all of it) no drop can be judged, and that is said instead of a number
    ("detects drops past 110-138%" read as if it meant something)."""
    if fraction < 1:
        return f"{words} {fraction:.0%}"
    return f"cannot judge a drop here: its noise spans {fraction:.0%} of the rate"


MIN_RUNS_FOR_SPREAD = 3
MEDIAN_SE = 1.2533  # the standard error of a median, in standard deviations / sqrt(n) (normal)


SIGMAS = 3  # a drop past 3 standard deviations of one run is not noise
HALVED = 0.5  # a significant drop to half fails however noisy the runs (S-005)
# Modes: two groups of run centers are two modes when each holds at least MODE_SHARE of the
# runs (and three of them) and their centers lie MODE_GAP pooled standard deviations apart.
MODE_SHARE, MODE_MIN_RUNS, MODE_GAP, MAX_MODES = 0.2, 3, 4.0, 3
MIN_SPREAD = 0.002  # a group of identical centers is known to 0.2%, not to 0
MIN_RUNS_FOR_DRIFT = 4
MAX_CENTERS = 60  # the baseline's and the latest runs' centers: the noise of today's host
NOISIER = 1.5  # a run whose noise hides 1.5x what its baseline resolves is itself a finding
DRIFT_TAU = -0.8  # Kendall's tau of the centers in time order at or below: a slide, not noise


def _standard_error(est: Estimate) -> float:
    return MEDIAN_SE * est.spread / math.sqrt(est.used) if est.used else 0.0


def _scale(est: Estimate, reference: float) -> float:
    """What ``est``'s relative spread is worth as a share of ``reference``: a run at a third
    of the baseline whose repetitions scatter by 30% of its own level scatter by 10% of the
    baseline's (relative spreads of two levels do not add as they stand)."""
    return est.center_ts / reference if reference > 0 else 1.0


def _pooled(groups: list[list[float]]) -> float:
    """The pooled relative robust spread within groups (each at least MIN_SPREAD)."""
    parts = [(len(g), max(robust_spread(g), MIN_SPREAD)) for g in groups]
    return math.sqrt(sum(n * s * s for n, s in parts) / sum(n for n, _ in parts))


def modes(centers: list[float] | tuple[float, ...]) -> list[list[int]]:
    """The run centers grouped by mode (each group: indices into ``centers``), lowest first.
    A group is split where the split (the least pooled variance of the sorted centers, Otsu's
    rule in one dimension) leaves two groups of at least MODE_SHARE of the runs whose medians
    lie MODE_GAP pooled robust standard deviations apart; at most MAX_MODES. Unimodal centers
    stay one group."""
    least = max(MODE_MIN_RUNS, math.ceil(MODE_SHARE * len(centers)))
    groups = [sorted(range(len(centers)), key=lambda i: centers[i])]
    while len(groups) < MAX_MODES:
        best: tuple[float, int, int] | None = None
        for gi, group in enumerate(groups):
            values = [centers[i] for i in group]
            for cut in range(least, len(values) - least + 1):
                cost = sum((v - statistics.fmean(part)) ** 2
                           for part in (values[:cut], values[cut:]) for v in part)
                if best is None or cost < best[0]:
                    best = (cost, gi, cut)
        if best is None:
            break
        _, gi, cut = best
        low = [centers[i] for i in groups[gi][:cut]]
        high = [centers[i] for i in groups[gi][cut:]]
        gap = (statistics.median(high) - statistics.median(low)) / \
            statistics.median(low + high)
        if gap <= MODE_GAP * _pooled([low, high]):
            break
        groups[gi:gi + 1] = [groups[gi][:cut], groups[gi][cut:]]
    return groups


def descent(centers: list[float] | tuple[float, ...], groups: list[list[int]]
            ) -> tuple[list[list[int]], float | None]:
    """The modes of ``centers`` that are modes, and how far a descent fell (None: none). A
    lowest group whose every run came after every run of the others is a step down, not a
    mode; what is left is grouped again, so a staircase (100, 97, 94: each step under the
    tolerance) is peeled a step at a time down to the level it fell from (issue 67: each new
    level was learned as a mode, and 12% below the baseline passed). A mode is learned only
    where the series returned to a level or alternated between levels."""
    fell: list[float] = []
    while len(groups) > 1 and min(groups[0]) > max(i for g in groups[1:] for i in g):
        fell = fell or [centers[i] for i in groups[0]]
        rest = sorted(i for g in groups[1:] for i in g)
        regrouped = modes([centers[i] for i in rest]) if len(rest) >= MIN_RUNS_FOR_SPREAD \
            else [list(range(len(rest)))]
        groups = [[rest[j] for j in g] for g in regrouped]
    if not fell:
        return groups, None
    top = statistics.median([centers[i] for g in groups for i in g])
    return groups, 1 - statistics.median(fell) / top


STEP_RUNS = 3  # a step is named once this many runs (this one the last) sit below the rest
STEP_BEFORE = 6  # the runs before a step that measure how far runs wander
STEP_SHARE = 0.4  # a step is named from 40% of the tolerance (half of it: named reliably)
# the step's mean lies this far below the level, in standard errors: Student's t at the runs
# before it, one-sided 1e-4 (z 3.719): about one false step in 10,000 runs judged, where
# runs wander normally (measured: tests/test_quiet_sentinel.py)
STEP_Z = 3.719
T_TAIL = (9.68, 8.02, 7.06, 6.44, 6.01, 5.69, 5.45, 5.26, 5.11, 4.99, 4.88, 4.79, 4.71, 4.65,
          4.59, 4.54, 4.49, 4.45, 4.42, 4.38, 4.35, 4.32, 4.30, 4.28, 4.25, 4.23, 4.22, 4.20,
          4.18, 4.17, 4.15, 4.14, 4.13, 4.12, 4.10, 4.09)  # degrees of freedom 5 to 40


def _t_quantile(df: int) -> float:
    """Student's t at one-sided 1e-4 with ``df`` degrees of freedom: the table (computed by
    integrating the t density; t(10) = 5.69) to 40, the Cornish-Fisher expansion past it
    (within 0.01 of the exact value from 30 degrees on)."""
    if df < len(T_TAIL) + 5:
        return T_TAIL[max(df, 5) - 5]
    z = STEP_Z
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def step_of(centers: list[float] | tuple[float, ...], now: float,
            tolerance: float) -> float | None:
    """How far this run and the STEP_RUNS - 1 before it sit below the runs before them (the
    mean of theirs against the median of those), when every one of them lies below that median,
    their mean past Student's t (one-sided 1e-4) standard errors below it and at least
    STEP_SHARE of the tolerance down: a step the tolerance alone would pass run by run (issue
    67: a sustained 3% step was never named). None otherwise. Its false alarms: about 1 in
    10,000 runs judged (1 in 17,710 generated, none over the lent H100's 30 unchanged runs:
    tests/test_quiet_sentinel.py)."""
    series = [*centers, now]
    before, after = series[:-STEP_RUNS], series[-STEP_RUNS:]
    if len(before) < STEP_BEFORE:
        return None
    level: float = statistics.median(before)
    # the larger of the robust spread and the standard deviation: the MAD of a few runs can
    # read far under the runs' noise (18 runs of ±1.6% read ±0.64%: a false step)
    spread = max(robust_spread(before), statistics.stdev(before) / statistics.fmean(before),
                 MIN_SPREAD)
    fell: float = 1 - statistics.fmean(after) / level
    # the step's mean against the level, at the noise of a mean of STEP_RUNS runs and of the
    # level's; and each of its runs below the level (a step, not one low run among them)
    line = level * (1 - _t_quantile(len(before) - 1) * spread
                    * math.sqrt(1 / STEP_RUNS + 1 / len(before)))
    if fell < STEP_SHARE * tolerance or statistics.fmean(after) > line or max(after) >= level:
        return None
    return fell


def step_window(baseline: Baseline, name: str) -> tuple[list[float], tuple[JudgedSince, ...]]:
    """The series the step reads for test ``name``, and the runs of its window: the level (the
    baseline's centre and the centres of the fit, unchanged runs before the window, the
    latest MAX_CENTERS) then the STEP_RUNS - 1 latest runs judged against the baseline
    whatever their state, this run to follow. A job that started and stayed leaves its runs
    changed: kept out of the level, they still show the step it made (issue 67)."""
    runs = tuple(r for r in baseline.since if name in r.centers)
    window = runs[max(len(runs) - (STEP_RUNS - 1), 0):]
    level = [*baseline.run_centers.get(name, [])[:1],
             *(v for r in runs[:len(runs) - len(window)] for v in r.level.get(name, ()))]
    return [*level[-MAX_CENTERS:], *(r.centers[name] for r in window)], window


def step_began(window: Sequence[JudgedSince]) -> str:
    """Where a step named over ``window`` (its runs before this one) began, and what had
    changed since the baseline in those runs, in words."""
    if not window:
        return "it began with this run"
    first = window[0]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(first.started_at))
    near = list(dict.fromkeys(c for r in window for c in r.changed))
    return (f"it began by the run of {when} ({first.audit}); "
            + (f"what had changed since the baseline in its runs: {'; '.join(near)}" if near
               else "no change in the recorded host state in its runs"))


def sustained_fall(centers: list[float] | tuple[float, ...], now: float,
                   tolerance: float) -> float | None:
    """How far the latest runs fell, when they fell past the tolerance below the baseline
    (``centers[0]``) and stayed there: this run and the one before it at least, and no run
    before them had been down there (the series never returned, so the new level is no
    mode). None otherwise. The safety net under ``modes`` and ``slide``: a staircase whose
    steps each stay under the tolerance and whose levels hide in one another's spread
    (100, 97, 94 t/s: 9% below passed, issue 67) is judged from the baseline."""
    if len(centers) < MODE_MIN_RUNS + 1 or centers[0] <= 0:
        return None
    line = centers[0] * (1 - tolerance)
    series = [*centers[1:], now]
    tail = 0
    while tail < len(series) and series[-1 - tail] < line:
        tail += 1
    before = [centers[0], *series[:len(series) - tail]]
    if tail < 2 or len(before) < MODE_MIN_RUNS or min(before) < line:
        return None
    fell: float = 1 - statistics.median(series[len(series) - tail:]) / statistics.median(before)
    return fell


def slide(centers: list[float] | tuple[float, ...]) -> float | None:
    """How far centers in time order (the baseline's first) slid, when they slide in a row
    (Kendall's tau at or below DRIFT_TAU over at least MIN_RUNS_FOR_DRIFT runs): a regression
    creeping in, which would otherwise be learned as noise. None when they do not."""
    n = len(centers)
    if n < MIN_RUNS_FOR_DRIFT:
        return None
    pairs = [(centers[j] > centers[i]) - (centers[j] < centers[i])
             for i in range(n) for j in range(i + 1, n)]
    tau = sum(pairs) / len(pairs)
    fall = (centers[0] - centers[-1]) / centers[0] if centers[0] > 0 else 0.0
    return fall if tau <= DRIFT_TAU and fall > 0 else None


def _against(b: Estimate, n: Estimate, values: list[list[float]]
             ) -> tuple[float, tuple[float, ...], float, float]:
    """What a run is compared with, the modes found, the comparison's noise and the noise that
    sets the baseline's resolution. ``values``: the unchanged runs' centres by mode, empty
    where how far runs wander is not yet measured (then the repetitions' spread stands in)."""
    if not values:
        return (b.center_ts, (), math.sqrt((b.spread ** 2
                                             + (n.spread * _scale(n, b.center_ts)) ** 2) / 2),
                b.spread)
    reference, found = b.center_ts, tuple[float, ...]()
    if len(values) > 1:
        found = tuple(statistics.median(v) for v in values)
        reference = min(found, key=lambda m: abs(m - n.center_ts)) \
            if n.center_ts >= found[0] else found[0]
        between = _pooled(values)
    else:
        # the host's typical level: the median of its unchanged runs, the baseline's among
        # them (a baseline that ran in a fast minute no longer makes every later run a drop)
        between = robust_spread(values[0])
        reference = statistics.median(values[0])
    noise = max(math.hypot(_standard_error(b), _standard_error(n) * _scale(n, reference)),
                between)
    return reference, found, noise, max(math.sqrt(2) * _standard_error(b), between)


def judge_test(name: str, base: list[float], now: list[float], tolerance_pct: float,
               run_centers: list[float] | tuple[float, ...] = (),
               step_series: Sequence[float] | None = None) -> TestVerdict:
    """``base`` and ``now``: each repetition's tokens/s; ``run_centers``: the centers of the
    fit, comparable runs of the host's unchanged state in time order (the baseline's first),
    whose spread is the noise between runs once there are at least three; ``step_series``:
    the series a step is read over (``step_window``; ``run_centers`` where not given).

    The noise of the comparison: until the spread between runs is measured (three fit runs),
    the repetitions' pooled robust spread stands in for it (runs differ more from each other
    than repetitions do: measured, docs/bench.md); once measured, the larger of that spread
    between runs and the standard error of the two medians (1.2533 x spread / sqrt(n) each).
    Where the runs cluster in modes (``modes``), the spread between runs is the pooled spread
    within modes and a run is compared with the nearest mode (below the lowest: with the
    lowest). Where they slid in a row (``slide``), they are not noise: the run is judged from
    the baseline at its repetitions' noise. ``detectable`` = 3 x the noise. A drop past
    max(tolerance, detectable) warns; it fails past 1.5 x that line when it is also twice the
    tolerance, or when it halves tokens/s (S-005: NPS4). Where ``detectable`` exceeds the
    tolerance the test is judged at that resolution, and says so: noise is not the host's
    fault, so it never warns by itself."""
    b, n = estimate(base), estimate(now)
    centers = (list(run_centers[:1]) + list(run_centers[1:])[1 - MAX_CENTERS:]
               if len(run_centers) > MAX_CENTERS else list(run_centers))
    drift = slide(centers)
    if drift is None:
        drift = sustained_fall(centers, n.center_ts, tolerance_pct / 100)
    groups = modes(centers) if len(centers) >= MIN_RUNS_FOR_SPREAD and drift is None \
        else []
    groups, stepped = descent(centers, groups)
    drift = stepped if stepped is not None else drift
    values = [[centers[i] for i in g] for g in groups]
    wander_known = sum(map(len, values)) >= MIN_RUNS_FOR_SPREAD  # how far runs move, measured
    reference, found, noise, resolution_noise = _against(b, n, values if wander_known else [])
    tolerance = tolerance_pct / 100
    detectable = SIGMAS * noise
    threshold = max(tolerance, detectable)
    drop = (reference - n.center_ts) / reference
    status = Status.PASS
    if drop > threshold:
        fails = drop > 1.5 * threshold and drop > 2 * tolerance or drop >= HALVED
        status = Status.FAIL if fails else Status.WARN
    elif detectable > NOISIER * max(tolerance, SIGMAS * resolution_noise):
        status = Status.WARN  # this run scattered past what its baseline resolves: the host's
    step = step_of(centers if step_series is None else list(step_series), n.center_ts,
                   tolerance) if status is Status.PASS else None
    if step is not None:
        status = Status.WARN
    return TestVerdict(name, status, reference, n.center_ts, drop, threshold, noise,
                       detectable, tolerance, found, drift,
                       max(tolerance, SIGMAS * resolution_noise),
                       len(values) == 1 and drift is None and reference != b.center_ts, step,
                       None if wander_known or drift is not None else len(centers))

