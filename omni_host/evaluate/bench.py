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
* **The ceiling** of generation (``evaluate/ceiling.py``): the bytes a token reads on each
  device, from the model's GGUF tensor table and the test's placement (partial offload and
  mixtures of experts included), at each device's bandwidth; where the CPU's is unknown, at
  the rate an all-CPU test of the same run reached (a prediction, said so).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Any, TypeGuard

from omni_host.codec import document, from_dict
from omni_host.evaluate.ceiling import limit_words, run_ceilings
from omni_host.evaluate.context import (
    CCD_LINKS,
    CPU_BANDWIDTH,
    ENV,
    LIB,
    MODEL_FINGERPRINT,
    OWN_CPU,
    diff,
    gpu_key,
    keyed,
    label,
    same,
)
from omni_host.evaluate.meta import CheckMeta
from omni_host.model import (
    BENCH_CHECK,
    Baseline,
    BenchOutcome,
    BenchRef,
    Ceiling,
    CheckResult,
    Evidence,
    FactSummary,
    FirstRun,
    JudgedTest,
    LinkUnderLoad,
    MeasuredTest,
    Status,
)
from omni_host.plan.policy import BenchSpec
from omni_host.probes.parsers import na
from omni_host.probes.parsers.bench import (
    SHORT,
    BenchRun,
    BenchTest,
    Estimate,
    estimate,
    robust_spread,
)

CHECK_ID = BENCH_CHECK
RANK = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}


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
    """The host state a bench ran under, by key (``evaluate.context``: labelled only where a
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
    load = (run.during or {}).get("other_cpu_load")
    if load is not None:
        ctx["other_cpu_load"] = load
    own = (run.during or {}).get("own_cpu_s")
    if _measured(own) and run.duration_s:
        # the other side of CPU contention: where the CPUs were busy before and after (a busy
        # loop beside both runs), other work cannot show as more load, only as less of it here
        ctx[OWN_CPU] = round(own / run.duration_s, 3)
    ctx.update(_gpu_context(run))
    return {k: v for k, v in ctx.items() if v is not None}


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
STEP_SHARE = 0.5  # a step is named from half the tolerance


def step_of(centers: list[float] | tuple[float, ...], now: float,
            tolerance: float) -> float | None:
    """How far this run and the STEP_RUNS - 1 before it sit below the runs before them, when
    every one of them lies past SIGMAS x those runs' robust spread below their median and
    their median at least STEP_SHARE of the tolerance below: a step the tolerance alone
    would pass run by run (issue 67: a sustained 3% step was never named). None otherwise.
    Its false alarms: measured on the lent H100's 30 unchanged runs (none) and on generated
    unchanged histories (tests/test_quiet_sentinel.py)."""
    series = [*centers, now]
    before, after = series[:-STEP_RUNS], series[-STEP_RUNS:]
    if len(before) < STEP_BEFORE:
        return None
    level: float = statistics.median(before)
    spread = max(robust_spread(before), MIN_SPREAD)
    fell: float = 1 - statistics.median(after) / level
    if fell < STEP_SHARE * tolerance or max(after) > level * (1 - SIGMAS * spread):
        return None
    return fell


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


def judge_test(name: str, base: list[float], now: list[float], tolerance_pct: float,
               run_centers: list[float] | tuple[float, ...] = ()) -> TestVerdict:
    """``base`` and ``now``: each repetition's tokens/s; ``run_centers``: the centers of the
    fit, comparable runs of the host's unchanged state in time order (the baseline's first),
    whose spread is the noise between runs once there are at least three.

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
    reference, found = b.center_ts, tuple[float, ...]()
    wander_known = sum(map(len, values)) >= MIN_RUNS_FOR_SPREAD  # how far runs move, measured
    if wander_known:
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
        resolution_noise = max(math.sqrt(2) * _standard_error(b), between)
    else:
        noise = math.sqrt((b.spread ** 2 + (n.spread * _scale(n, b.center_ts)) ** 2) / 2)
        resolution_noise = b.spread
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
    step = step_of(centers, n.center_ts, tolerance) if status is Status.PASS else None
    if step is not None:
        status = Status.WARN
    return TestVerdict(name, status, reference, n.center_ts, drop, threshold, noise,
                       detectable, tolerance, found, drift,
                       max(tolerance, SIGMAS * resolution_noise),
                       len(values) == 1 and drift is None and reference != b.center_ts, step,
                       None if wander_known or drift is not None else len(centers))


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
    if _measured(load) and load > spec.max_other_cpus:
        why.append(f"other processes used {load:.2f} CPUs during the run (a baseline allows "
                   f"{spec.max_other_cpus:g}: omni_bench.max_other_cpus)")
    return why


def _measured(load: Any) -> TypeGuard[float]:
    return isinstance(load, (int, float)) and not isinstance(load, bool)


def unfit_reasons(spec: BenchSpec, run: BenchRun) -> list[str]:
    """Why this run cannot be a baseline or a sample of the noise between runs: it was
    disturbed, the load of other processes was not measured, or its repetitions spread wider
    than a baseline may. [] for a fit run."""
    why = disturbances(spec, run)
    if not _measured((run.during or {}).get("other_cpu_load")):
        why.append("the CPU load of other processes during the run was not measured")
    for test in run.result.tests if run.result else ():
        if test.estimate.spread * 100 > spec.max_spread_pct:
            why.append(f"{test.name}'s repetitions spread ±{test.estimate.spread:.1%} (a baseline "
                       f"allows ±{spec.max_spread_pct:g}%: omni_bench.max_spread_pct)")
    return why


@dataclass(frozen=True)
class StoredRun:
    """A stored bench as a later bench reads it: its repetitions, keys and context by key."""

    tests: dict[str, list[float]]
    keys: dict[str, tuple[tuple[str, str], ...]]
    context: dict[str, Any]
    recorded_baseline: bool
    fit: bool
    baseline: str | None  # the stored bench it was judged against
    changed: tuple[str, ...]
    # the centers of the first of two runs (a drop or a scattered run measured once more),
    # when that run was fit: the same host, measured
    first_centers: dict[str, float] = dataclasses.field(default_factory=dict)

    def centers(self) -> dict[str, float]:
        return {name: estimate(samples).center_ts for name, samples in self.tests.items()}


def stored_run(bench: BenchOutcome) -> StoredRun:
    """What a later bench reads of a stored one (its context by key: a bench stored before
    the keys kept it by display label)."""
    first = bench.first_run
    return StoredRun({n: list(t.samples_ts) for n, t in bench.tests.items()},
                     {n: t.key_items() for n, t in bench.tests.items()},
                     keyed(bench.context), bench.recorded_baseline, bench.fit,
                     bench.baseline.audit if bench.baseline else None, bench.changed,
                     dict(first.centers) if first is not None and first.fit else {})


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


def _measured_test(t: BenchTest) -> MeasuredTest:
    est = t.estimate
    return MeasuredTest(t.kind, t.samples_ts, round(t.mean_ts, 3), round(t.cv, 4),
                        round(est.center_ts, 3), round(est.spread, 4), t.params, dict(t.key))


def _judgement(v: TestVerdict) -> JudgedTest:
    return JudgedTest(v.status, round(v.drop, 4), round(v.threshold, 4), round(v.noise, 4),
                      round(v.detectable, 4), round(v.baseline_ts, 3),
                      tuple(round(m, 3) for m in v.modes),
                      None if v.drift is None else round(v.drift, 4), v.dropped, v.blind, v.line(),
                      round(v.now_ts, 3), step=None if v.step is None else round(v.step, 4))


def settle(now: dict[str, JudgedTest], first: FirstRun | None) -> dict[str, JudgedTest]:
    """Each test's deciding verdict. After a first run that did not pass (``first``: its
    verdicts), a test is decided by the run that judged it better: a drop must show in both
    runs to be called, a scattered run is settled by a steadier one; the verdict says which
    run (``run``, and its line). What is stored, said and plotted is this one verdict."""
    out = {}
    for name, v in now.items():
        earlier = first.verdicts.get(name) if first is not None else None
        take, which = v, None
        if earlier is not None and earlier.status in RANK:
            which = "second"
            if RANK[earlier.status] < RANK[v.status]:
                take, which = earlier, "first"
        out[name] = dataclasses.replace(take, run=which, line=take.line + (
            f" (the {which} of two runs)" if which else ""))
    return out


def worst_first(verdicts: dict[str, JudgedTest]) -> list[JudgedTest]:
    return sorted(verdicts.values(), key=lambda v: (-RANK[v.status], -v.drop))


def _starved(before: dict[str, Any], after: dict[str, Any],
             verdicts: list[TestVerdict]) -> str | None:
    """A drop past the tolerance that the noise alone cannot call, measured beside its cause:
    llama-bench got less CPU than at the baseline (past the jitter ``context.same`` allows). The CPU
    it got is measured apart from its rate, so the two together say what neither says alone.
    The words that say so, or None."""
    a, b = before.get(OWN_CPU), after.get(OWN_CPU)
    if not (_measured(a) and _measured(b)) or b >= a or same(OWN_CPU, a, b):
        return None
    fell = [v for v in verdicts if v.tolerance < v.drop <= v.threshold]
    if not fell:
        return None
    names = ", ".join(f"{v.name} fell {v.drop:.0%} (tolerance {v.tolerance:.0%})" for v in fell)
    return (f"llama-bench got {1 - b / a:.0%} less CPU than at the baseline ({a:g} -> {b:g} "
            f"CPUs) and {names}: within the noise alone, but the contention measured beside it "
            "is the likely cause")


def first_run(status: Status, bench: BenchOutcome | None) -> FirstRun | None:
    """What a second run is judged with, when this compared run's verdict did not pass on the
    tests' own evidence (a drop, or a run that scattered): the bench runs once more before it
    says so (``settle``). None when it passed, or was not compared."""
    if status is Status.ERROR or bench is None or bench.first_run is not None or not any(
            v.status is not Status.PASS for v in bench.verdicts.values()):
        return None
    return FirstRun(bench.verdicts, bench.centers(), bench.fit,
                    "; ".join(bench.disturbances) or None)


def _outcome(run: BenchRun, spec: BenchSpec, context: dict[str, Any],
             links: list[LinkUnderLoad]) -> BenchOutcome:
    """What the run measured, before any baseline: its tests, context, ceilings, fitness."""
    assert run.result is not None
    limits = run_ceilings(run, context)
    unfit = unfit_reasons(spec, run)
    return BenchOutcome(
        {t.name: _measured_test(t) for t in run.result.tests}, context,
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


def judge(meta: CheckMeta, spec: BenchSpec, run: BenchRun, context: dict[str, Any],
          baseline: Baseline | None, *, record: bool,
          first: FirstRun | None = None) -> CheckResult:
    """The verdict on one run. ``record``: this run is asked to become the baseline
    (--baseline); with no baseline the run becomes one if fit. A run that is not fit is never
    a baseline: it is judged (when there is a baseline) and kept as evidence, and says why.
    The result's details are the typed outcome's JSON form (``HostReport.bench`` reads it)."""
    links = list(links_during((run.during or {}).get("samples") or []).values())
    evidence = _evidence(run, links)
    if run.error or run.result is None:
        return meta.result(Status.ERROR, f"llama-bench failed: {run.error}", evidence=evidence,
                           details={"error": run.error, "stderr_tail": list(run.stderr_tail)})
    tests = {t.name: t for t in run.result.tests}
    outcome = _outcome(run, spec, context, links)
    unfit = list(outcome.unfit)
    ceiling_note = _ceiling_note(outcome.ceiling)
    measured = ", ".join(f"{t.name} {t.estimate.center_ts:.1f} t/s ±{t.estimate.spread:.1%}"
                         for t in run.result.tests)

    def result(status: Status, summary: str, done: BenchOutcome, **more: Any) -> CheckResult:
        return meta.result(status, summary, actual=measured, evidence=evidence,
                           details=document(done), **more)

    if record or baseline is None:
        if unfit:
            ask = "--baseline refused" if record else "no baseline yet"
            return result(Status.WARN, f"{ask}: this run is not fit to be one ("
                          f"{'; '.join(unfit)}); run omni-host bench again when the host is "
                          f"idle: {measured}", outcome)
        why = "recorded on purpose (--baseline)" if record else "the host's first bench"
        summary = f"baseline recorded ({why}): {measured}"
        resolution = {t.name: max(spec.tolerance_for(t.kind) / 100, SIGMAS * t.estimate.spread)
                      for t in run.result.tests}
        coarse = [f"{n} to {drops_past(r, 'drops past')}" for n, r in resolution.items()
                  if r > spec.tolerance_for(tests[n].kind) / 100]
        if coarse:  # said once, here: later runs are judged at it without a warn each time
            summary += (f"; its repetitions' spread resolves {', '.join(coarse)} until the "
                        "spread between runs is measured")
        return result(Status.PASS, summary + (f"; {ceiling_note}" if ceiling_note else ""),
                      dataclasses.replace(outcome, recorded_baseline=True, resolution={
                          n: round(r, 4) for n, r in resolution.items()}))
    was, now = baseline.context.get(MODEL_FINGERPRINT), context.get(MODEL_FINGERPRINT)
    other = [f"{label(MODEL_FINGERPRINT)} {was} -> {now} (another file at {spec.model})"] \
        if was not in (None, now) \
        else []
    differ = {n: key_diff(baseline.keys.get(n, ()), t.key) for n, t in tests.items()}
    comparable = [n for n in tests if n in baseline.tests and not differ[n] and not other]
    changes, unchanged = diff(baseline.context, context)
    changed = [c.line() for c in changes]  # the causes first
    outcome = dataclasses.replace(
        outcome, baseline=BenchRef(baseline.audit, baseline.recorded_at),
        not_comparable=tuple(sorted({*other, *(d for n in tests for d in differ[n])})),
        unchanged=tuple(unchanged), changed=tuple(changed))
    settings = [c.line() for c in changes if c.setting]
    trap = comma_split(run.argv)
    if not comparable:
        why = "; ".join(outcome.not_comparable) or \
            f"the baseline measured other tests ({', '.join(baseline.tests)})"
        moved = f"; since the baseline: {'; '.join(settings)}" if settings else ""
        return result(Status.WARN, f"not comparable with baseline {baseline.audit}: {why}"
                      f"{moved}{'; ' + trap if trap else ''}; record a new baseline: "
                      "omni-host bench --baseline", outcome)
    verdicts = [judge_test(n, baseline.tests[n], list(tests[n].samples_ts),
                           spec.tolerance_for(tests[n].kind), baseline.run_centers.get(n, ()))
                for n in comparable]
    outcome = dataclasses.replace(outcome, verdicts=settle(
        {v.name: _judgement(v) for v in verdicts}, first), first_run=first)
    settled = worst_first(outcome.verdicts)
    status = max((v.status for v in settled), key=RANK.__getitem__)
    text = "; ".join(v.line for v in settled)
    dropped = any(v.dropped for v in settled)
    if changed:  # what moved comes first, before anything about the noise
        text = f"since the baseline: {'; '.join(changed)}; {text}"
        if settings and any(v.blind for v in settled) and status is Status.PASS:
            # the host changed and this comparison cannot see a drop of the tolerance
            status = Status.WARN
    elif dropped:
        text += "; since the baseline: no change in the recorded host state"
    elif status is Status.PASS and ceiling_note:
        text += f"; {ceiling_note}"
    starved = _starved(baseline.context, context, verdicts)
    if starved and status is Status.PASS:
        status, text = Status.WARN, f"{text}; {starved}"
    if trap:
        text += f"; {trap}"
        status = Status.WARN if status is Status.PASS else status
    if any(c.card for c in changes):  # the baseline measured another card
        text += "; another GPU than the baseline's: record this one's with omni-host bench --baseline"
        status = Status.WARN if status is Status.PASS else status
    if unfit:
        text += f"; not used to learn the noise ({'; '.join(unfit)})"
    if outcome.disturbances and status is Status.PASS:  # it measured the host and something else
        status = Status.WARN
    if first and first.disturbed and status is Status.PASS:
        status = Status.WARN
        text += f"; the first of two runs was disturbed ({first.disturbed})"
    return result(status, text, outcome, expected=f"within the noise of baseline {baseline.audit}")
