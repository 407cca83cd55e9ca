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
from dataclasses import dataclass
from typing import Any, TypeGuard

from omni_host.evaluate.ceiling import CCD_LINKS, CPU_BANDWIDTH, run_ceilings
from omni_host.evaluate.checks import CheckMeta
from omni_host.model import CheckResult, Evidence, FactSummary, Status
from omni_host.plan.policy import BenchSpec
from omni_host.probes.parsers import na
from omni_host.probes.parsers.bench import (
    SHORT,
    BenchRun,
    BenchTest,
    Estimate,
    estimate,
    rate,
    robust_spread,
)

CHECK_ID = "perf.tokens-per-s"
NUMBER_TOLERANCE = 0.05
LOAD_TOLERANCE_CPUS = 0.25
# The CPU llama-bench got scales its rate: a one-thread bench that went from 0.66 to 0.41 of a
# CPU beside more busy loops ran 41% slower, within the absolute 0.25 (seen beside
# ordinary-machine's loops on both CPUs: "no change in the recorded host state").
OWN_CPU_TOLERANCE = 0.20
OWN_CPU = "CPU llama-bench got during the run (CPUs)"
RANK = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}


@dataclass(frozen=True)
class Baseline:
    """A host's recorded baseline, as stored in the details of its perf.tokens-per-s result."""

    audit: str  # the stored bench that recorded it
    recorded_at: float
    tests: dict[str, list[float]]  # test name -> every repetition's tokens/s
    context: dict[str, Any]
    # test name -> the center of the baseline and of each fit, comparable run since whose host
    # state did not change: their spread is the noise between runs
    run_centers: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    # test name -> what it measured (llama-bench's record less the results): the
    # comparability key; empty for a baseline stored before keys were recorded
    keys: dict[str, tuple[tuple[str, str], ...]] = dataclasses.field(default_factory=dict)


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
            out[f"GPU{i} PCIe link (max trained)"] = f"gen{gen} x{width}"
        limit = _num(row.get("power.limit [W]"))
        if limit is not None:
            out[f"GPU{i} power limit W"] = limit
        for field, label in (("clocks.max.sm [MHz]", "max SM clock MHz"),
                             ("clocks.max.memory [MHz]", "max memory clock MHz")):
            value = _num(row.get(field))
            if value is not None:
                out[f"GPU{i} {label}"] = value
        out[f"GPU{i} name"] = row.get("name")
    during = run.during or {}
    if rows:
        out["GPU clock event reasons during the run"] = event_reasons(
            during.get("event_reasons") or [])
        apps = [f"{a.get('pid')} {a.get('process_name')}"
                for a in run.gate.get("compute_apps") or []]
        out["other processes on the GPUs"] = ", ".join(
            sorted(set(apps + list(during.get("other_gpu_processes") or [])))) or "none"
        medians = _sm_medians(during.get("samples") or [])
        for i, mhz in medians.items():
            out[f"GPU{i} SM clock MHz (median during the run)"] = mhz
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
    """The host state a bench ran under, by name: what a drop is explained by (the audit's
    fact summary of the same bundle: it is evaluated once)."""
    ctx: dict[str, Any] = {}
    if summary.numa_nodes and summary.sockets:
        ctx["NUMA nodes per socket"] = summary.numa_nodes / summary.sockets
    ctx["NVIDIA driver"] = summary.driver_version
    ctx["CUDA (driver)"] = summary.cuda_version
    ctx["kernel"] = summary.kernel
    memory = summary.memory
    if memory is not None:
        if memory.channels:
            ctx["CPU memory channels with DIMMs"] = f"{memory.channels_populated} of {memory.channels}"
        ctx["CPU memory speed (MT/s)"] = memory.mts
        ctx[CPU_BANDWIDTH] = memory.bandwidth_gbs
        ctx[CCD_LINKS] = memory.ccd_links_gbs
    quota = run.context.get("cpu_quota")
    ctx["CPU quota (cgroup)"] = (f"{quota['cpus']:g} CPUs ({quota['cgroup']})"
                                 if isinstance(quota, dict) else "none")
    ctx["CPUs allowed"] = run.context.get("cpus_allowed")
    binary = run.context.get("binary") or {}
    ctx["llama-bench sha256"] = str(binary.get("sha256", ""))[:16] or None
    for lib, digest in sorted((binary.get("libs") or {}).items()):
        ctx[f"{lib} sha256"] = str(digest)[:16]
    if run.result is not None:
        ctx["llama.cpp build"] = f"{run.result.build_commit} ({run.result.build_number})"
        ctx["backends"] = run.result.backends
    model = run.context.get("model") or {}
    ctx["model bytes"] = model.get("size_bytes")
    ctx["model fingerprint"] = model.get("fingerprint")
    for name, value in sorted((run.context.get("env") or {}).items()):
        ctx[f"env {name}"] = value
    load = (run.during or {}).get("other_cpu_load")
    if load is not None:
        ctx["other CPU load during the run (CPUs)"] = load
    own = (run.during or {}).get("own_cpu_s")
    if _measured(own) and run.duration_s:
        # the other side of CPU contention: where the CPUs were busy before and after (a busy
        # loop beside both runs), other work cannot show as more load, only as less of it here
        ctx[OWN_CPU] = round(own / run.duration_s, 3)
    ctx.update(_gpu_context(run))
    return {k: v for k, v in ctx.items() if v is not None}


def _same(key: str, a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if key.endswith("(CPUs)"):  # CPU time measured: a quarter of a CPU is jitter
            relative = OWN_CPU_TOLERANCE * max(a, b) if key == OWN_CPU else math.inf
            return abs(a - b) <= min(LOAD_TOLERANCE_CPUS, relative)
        return abs(a - b) <= NUMBER_TOLERANCE * max(abs(a), abs(b), 1e-9)
    return bool(a == b)


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def context_diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(what changed, as "name: before -> after"; the names that did not)."""
    changed, same = [], []
    for key in [*before, *(k for k in after if k not in before)]:
        a, b = before.get(key), after.get(key)
        if key in before and key in after and _same(key, a, b):
            same.append(key)
        else:
            gone = "unset" if key.startswith("env ") else "not seen"
            changed.append(f"{key}: {_show(a) if key in before else gone} -> "
                           f"{_show(b) if key in after else gone}")
    return changed, same


@dataclass(frozen=True)
class TestVerdict:
    name: str
    status: Status
    baseline_ts: float
    now_ts: float
    drop: float  # fraction below the baseline (negative: faster)
    threshold: float  # the drop that warns (fraction)
    noise: float = 0.0  # one run's relative standard deviation, as measured
    detectable: float = 0.0  # the smallest drop this comparison can tell from noise
    tolerance: float = 0.0  # the operator's (omni_bench.tolerance_pct), as a fraction

    @property
    def blind(self) -> bool:
        """The noise hides a drop of the operator's tolerance: no pass can be claimed."""
        return self.detectable > self.tolerance

    def line(self) -> str:
        where = (f"{abs(self.drop):.0%} {'below' if self.drop > 0 else 'above'} baseline"
                 if abs(self.drop) >= 0.005 else "at baseline")
        text = (f"{self.name} {where} ({self.now_ts:.1f} vs {self.baseline_ts:.1f} t/s, "
                f"noise ±{self.noise:.1%}, detects drops past {self.threshold:.0%})")
        if self.blind and self.drop <= self.threshold:
            text += (f": cannot judge drops below {self.detectable:.0%} (tolerance "
                     f"{self.tolerance:.0%}): record a quieter baseline or raise tolerance_pct")
        return text


MIN_RUNS_FOR_SPREAD = 3
MEDIAN_SE = 1.2533  # the standard error of a median, in standard deviations / sqrt(n) (normal)


SIGMAS = 3  # a drop past 3 standard deviations of one run is not noise
HALVED = 0.5  # a significant drop to half fails however noisy the runs (S-005)


def _standard_error(est: Estimate) -> float:
    return MEDIAN_SE * est.spread / math.sqrt(est.used) if est.used else 0.0


def judge_test(name: str, base: list[float], now: list[float], tolerance_pct: float,
               run_centers: list[float] | tuple[float, ...] = ()) -> TestVerdict:
    """``base`` and ``now``: each repetition's tokens/s; ``run_centers``: the centers of the
    fit, comparable runs of the host's unchanged state (the baseline's and later ones), whose
    robust spread is the noise between runs once there are at least three.

    The noise of the comparison: until the spread between runs is measured (three fit runs),
    the repetitions' pooled robust spread stands in for it (runs differ more from each other
    than repetitions do: measured, docs/bench.md); once measured, the larger of that spread
    between runs and the standard error of the two medians (1.2533 x spread / sqrt(n) each:
    a run whose repetitions scatter is judged by how well its median is known, not by its
    scatter alone). ``detectable`` = 3 x the noise. A drop past max(tolerance, detectable)
    warns; it fails past 1.5 x that line when it is also twice the tolerance, or when it
    halves tokens/s (S-005: NPS4). Where ``detectable`` exceeds the tolerance the comparison
    cannot see a drop the operator cares about: a warn that says so, never a pass."""
    b, n = estimate(base), estimate(now)
    if len(run_centers) >= MIN_RUNS_FOR_SPREAD:
        within = math.hypot(_standard_error(b), _standard_error(n))
        noise = max(within, robust_spread(list(run_centers)))
    else:
        noise = math.sqrt((b.spread ** 2 + n.spread ** 2) / 2)
    tolerance = tolerance_pct / 100
    detectable = SIGMAS * noise
    threshold = max(tolerance, detectable)
    drop = (b.center_ts - n.center_ts) / b.center_ts
    if drop > threshold:
        fails = drop > 1.5 * threshold and drop > 2 * tolerance or drop >= HALVED
        status = Status.FAIL if fails else Status.WARN
    else:
        status = Status.WARN if detectable > tolerance else Status.PASS
    return TestVerdict(name, status, b.center_ts, n.center_ts, drop, threshold, noise,
                       detectable, tolerance)


def _evidence(run: BenchRun) -> tuple[Evidence, ...]:
    lines = [f"{t.name}: {t.estimate.center_ts:.2f} t/s ±{t.estimate.spread:.1%} (median and "
             f"robust spread of {t.estimate.used} of {len(t.samples_ts)} repetitions: "
             f"{', '.join(f'{s:.2f}' for s in t.samples_ts)})" for t in run.result.tests] \
        if run.result else []
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
    """A stored bench's perf.tokens-per-s details, validated: what a later bench reads."""

    tests: dict[str, list[float]]
    keys: dict[str, tuple[tuple[str, str], ...]]
    context: dict[str, Any]
    recorded_baseline: bool
    fit: bool
    baseline: str | None  # the stored bench it was judged against
    changed: tuple[str, ...]

    def centers(self) -> dict[str, float]:
        return {name: estimate(samples).center_ts for name, samples in self.tests.items()}


def read_stored(details: Any) -> StoredRun:
    """The details of a stored perf.tokens-per-s result; ValueError naming what is wrong (a
    hand-edited or foreign report must cost its host one warning, never its bench)."""
    if not isinstance(details, dict) or not isinstance(details.get("tests"), dict):
        raise ValueError("no tests")
    tests, keys = {}, {}
    for name, test in details["tests"].items():
        samples = test.get("samples_ts") if isinstance(test, dict) else None
        values = [rate(v) for v in samples] if isinstance(samples, list) and samples else [None]
        if any(v is None for v in values):
            raise ValueError(f"{name}: samples_ts is not a list of positive numbers")
        tests[str(name)] = [float(v) for v in values if v is not None]
        key = test.get("key") or {}
        if not isinstance(key, dict):
            raise ValueError(f"{name}: key is not a mapping")
        keys[str(name)] = tuple(sorted((str(k), str(v)) for k, v in key.items()))
    if not tests:
        raise ValueError("no tests")
    context = details.get("context") or {}
    if not isinstance(context, dict):
        raise ValueError("context is not a mapping")
    base = details.get("baseline")
    audit = base.get("audit") if isinstance(base, dict) else None
    changed = details.get("changed") or []
    if not isinstance(changed, list):
        raise ValueError("changed is not a list")
    # a run stored before fitness was recorded: fit unless it was forced
    fit = details.get("fit", not details.get("forced")) is True
    return StoredRun(tests, keys, context, details.get("recorded_baseline") is True, fit,
                     audit if isinstance(audit, str) else None, tuple(map(str, changed)))


def _flag(field: str) -> str:
    return f"-{SHORT[field]}" if field in SHORT else field


def key_diff(before: tuple[tuple[str, str], ...], after: tuple[tuple[str, str], ...]) -> list[str]:
    """What a test measured differently ("-t 2 -> 1"), over the fields both records have."""
    a, b = dict(before), dict(after)
    return [f"{_flag(k)} {a[k]} -> {b[k]}" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]


# The order changes are named in: what takes tokens/s away (other work, limits, the binary,
# the environment, the platform) before what follows from it (clocks and their reasons).
CAUSE_ORDER = ("other processes on the GPUs", "CPU quota", "CPUs allowed", "env ",
               "llama-bench sha256", "lib", "llama.cpp build", "backends", "CPU memory",
               "CPU CCD", "NUMA", "NVIDIA driver",
               "CUDA", "kernel", "GPU", "other CPU load", "CPU llama-bench got", "model bytes")
SYMPTOMS = ("GPU clock event reasons", "SM clock MHz (median")


def _rank(change: str) -> tuple[int, int]:
    symptom = any(word in change for word in SYMPTOMS)
    place = next((i for i, word in enumerate(CAUSE_ORDER) if change.startswith(word)),
                 len(CAUSE_ORDER))
    return int(symptom), place


def _test_details(t: BenchTest) -> dict[str, Any]:
    est = t.estimate
    return {"kind": t.kind, "samples_ts": list(t.samples_ts), "mean_ts": round(t.mean_ts, 3),
            "cv": round(t.cv, 4), "center_ts": round(est.center_ts, 3),
            "spread": round(est.spread, 4), "params": t.params, "key": dict(t.key)}


def judge(meta: CheckMeta, spec: BenchSpec, run: BenchRun, context: dict[str, Any],
          baseline: Baseline | None, *, record: bool) -> CheckResult:
    """The verdict on one run. ``record``: this run is asked to become the baseline
    (--baseline); with no baseline the run becomes one if fit. A run that is not fit is never
    a baseline: it is judged (when there is a baseline) and kept as evidence, and says why."""
    if run.error or run.result is None:
        return meta.result(Status.ERROR, f"llama-bench failed: {run.error}", evidence=_evidence(run),
                           details={"error": run.error, "stderr_tail": list(run.stderr_tail)})
    tests = {t.name: t for t in run.result.tests}
    limits = run_ceilings(run, context)
    ceilings = {n: c for n, c in limits.items() if "ceiling_ts" in c}
    no_ceiling = {n: c["why_not"] for n, c in limits.items() if "why_not" in c}
    unfit = unfit_reasons(spec, run)
    details: dict[str, Any] = {
        "tests": {t.name: _test_details(t) for t in run.result.tests},
        "context": context, "ceiling": ceilings, "no_ceiling": no_ceiling,
        "recorded_baseline": False, "forced": bool(run.gate.get("forced")),
        "fit": not unfit, "unfit": unfit}
    ceiling_note = "; ".join(
        f"{n} at {c['fraction']:.0%} of " + (f"its {c['ceiling_ts']:g} t/s ceiling"
                                             if c.get("basis", "theoretical") == "theoretical"
                                             else f"the {c['ceiling_ts']:g} t/s predicted at "
                                             f"{c['basis']}") + f" ({c['limit']} limits it)"
        for n, c in ceilings.items())
    measured = ", ".join(f"{t.name} {t.estimate.center_ts:.1f} t/s ±{t.estimate.spread:.1%}"
                         for t in run.result.tests)
    if record or baseline is None:
        if unfit:
            ask = "--baseline refused" if record else "no baseline yet"
            return meta.result(Status.WARN, f"{ask}: this run is not fit to be one ("
                               f"{'; '.join(unfit)}); run omni-host bench again when the host is "
                               f"idle: {measured}", actual=measured, evidence=_evidence(run),
                               details=details)
        why = "recorded on purpose (--baseline)" if record else "the host's first bench"
        summary = f"baseline recorded ({why}): {measured}"
        details["recorded_baseline"] = True
        return meta.result(Status.PASS, summary + (f"; {ceiling_note}" if ceiling_note else ""),
                           actual=measured, evidence=_evidence(run), details=details)
    details["baseline"] = {"audit": baseline.audit, "recorded_at": baseline.recorded_at}
    other = [f"model fingerprint {baseline.context['model fingerprint']} -> "
             f"{context.get('model fingerprint')} (another file at {spec.model})"] \
        if baseline.context.get("model fingerprint") not in (None, context.get("model fingerprint")) \
        else []
    differ = {n: key_diff(baseline.keys.get(n, ()), t.key) for n, t in tests.items()}
    comparable = [n for n in tests if n in baseline.tests and not differ[n] and not other]
    details["not_comparable"] = sorted({*other, *(d for n in tests for d in differ[n])})
    if not comparable:
        why = "; ".join(details["not_comparable"]) or \
            f"the baseline measured other tests ({', '.join(baseline.tests)})"
        return meta.result(Status.WARN, f"not comparable with baseline {baseline.audit}: {why}; "
                           "record a new baseline: omni-host bench --baseline",
                           actual=measured, evidence=_evidence(run), details=details)
    verdicts = [judge_test(n, baseline.tests[n], list(tests[n].samples_ts), spec.tolerance_pct,
                           baseline.run_centers.get(n, ())) for n in comparable]
    changed, same = context_diff(baseline.context, context)
    changed.sort(key=_rank)
    details["verdicts"] = {v.name: {"status": v.status.value, "drop": round(v.drop, 4),
                                    "threshold": round(v.threshold, 4),
                                    "noise": round(v.noise, 4),
                                    "detectable": round(v.detectable, 4)} for v in verdicts}
    details["changed"], details["unchanged"] = changed, same
    worst = max(verdicts, key=lambda v: (RANK[v.status], v.drop))
    status = worst.status
    text = "; ".join(v.line() for v in sorted(verdicts, key=lambda v: -v.drop))
    dropped = any(v.drop > v.threshold for v in verdicts)
    if dropped:
        text += "; since the baseline: " + ("; ".join(changed) if changed else
                                            "no change in the recorded host state")
    elif status is Status.PASS and ceiling_note:
        text += f"; {ceiling_note}"
    if unfit:
        text += f"; not used to learn the noise ({'; '.join(unfit)})"
    if disturbances(spec, run) and status is Status.PASS:  # it measured the host and something else
        status = Status.WARN
    return meta.result(status, text, expected=f"within the noise of baseline {baseline.audit}",
                       actual=measured, evidence=_evidence(run), details=details)
