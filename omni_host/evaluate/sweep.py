"""The split sweep (issue 38), pure: which ``--tensor-split`` and ``--split-mode`` to run
around the advised one, how many fit the bench's budget, and which is fastest, judged with the
tokens/s verdict's own noise rule.

* **Planned** from the GPUs the policy states (``omni_gpus``: model and VRAM): the split
  ``gpu.topology`` advises (layer split proportional to VRAM: 75/25 for 96+32 GB, S-003), the
  even split, and for two GPUs the advised share of the first GPU +-10 and +-20 points; each
  under ``-sm layer`` and ``-sm row`` (llama-bench runs every combination in one process), and
  the advised split once more, last: the same configuration twice measures how much the host
  drifts between configurations (on this 2-vCPU VM, 11% between the two; more than the
  repetitions show, as between benches: docs/bench.md). The candidates farthest from the
  advice are dropped first until the sweep's expected time (each configuration as long as the
  baseline's tests took: their tokens over their tokens/s, every repetition) fits 80% of
  ``omni_bench.budget_s``.
* **Judged** per kind (prompt processing, generation): the fastest configuration's median and
  every other one's against it by ``judge_test`` (the bench verdict's rule: the drop must pass
  max(tolerance, 3 x the measured noise)), the line raised to 3 x the drift the repeat
  measured; without the repeat (a sweep cut short) no configuration is called slower. A
  configuration within that line is "no measurable difference", never a loser; when every
  configuration is within it there is no winner. The advised split passes when it is the
  fastest or within the noise of it, and warns, naming the faster one, when it is measurably
  slower.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from omni_host.evaluate.bench import SIGMAS, judge_test
from omni_host.evaluate.checks.gpu import tensor_split
from omni_host.evaluate.meta import CheckMeta
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.knobs import without_options
from omni_host.plan.policy import BenchSpec
from omni_host.probes.parsers.bench import BenchRun, BenchTest, split_values

CHECK_ID = "perf.split-sweep"
SPLIT_OPTIONS = frozenset({"-ts", "--tensor-split", "-sm", "--split-mode"})
SHIFTS = (10, 20)  # points of the first GPU's share around the advice (two GPUs)
MODES = ("layer", "row")
BUDGET_SHARE = 0.8
_TOKENS = re.compile(r"(?:pp|tg)(\d+)")


@dataclass(frozen=True)
class SweepPlan:
    args: tuple[str, ...]  # the bench's args with the sweep's -sm and -ts lists
    splits: tuple[tuple[int, ...], ...]  # percentages, the advised first
    modes: tuple[str, ...]
    expected_s: float | None  # from the baseline's tests; None without one
    dropped: tuple[tuple[int, ...], ...] = ()  # candidates the budget left out


def candidates(vram_gib: list[float]) -> list[tuple[int, ...]]:
    """The advised split first, then the even one, then (two GPUs) the shifted ones, nearest
    first."""
    advised = tuple(tensor_split([round(v * 1024) for v in vram_gib]))
    found = [advised, tuple(tensor_split([1] * len(vram_gib)))]
    if len(vram_gib) == 2:
        for shift in SHIFTS:
            for sign in (1, -1):
                first = advised[0] + sign * shift
                if 5 <= first <= 95:
                    found.append((first, 100 - first))
    return list(dict.fromkeys(found))


def seconds_per_config(baseline_tests: dict[str, list[float]]) -> float | None:
    """How long one configuration took at the baseline: each test's tokens over its tokens/s,
    every repetition."""
    total = 0.0
    for name, samples in baseline_tests.items():
        tokens = sum(int(n) for n in _TOKENS.findall(name.split()[0]))
        if not tokens or not samples:
            return None
        total += sum(tokens / s for s in samples if s > 0)
    return total or None


def plan_sweep(spec: BenchSpec, vram_gib: list[float],
               baseline_tests: dict[str, list[float]] | None) -> SweepPlan | str:
    """The sweep for a host, or why it cannot run."""
    if len(vram_gib) < 2:
        return "the policy's omni_gpus names fewer than two GPUs: there is no split to sweep"
    if not baseline_tests:
        return "no baseline to size the sweep from: run omni-host bench first"
    per_config = seconds_per_config(baseline_tests)
    if per_config is None:
        return "the baseline's tests do not say their token counts: run omni-host bench again"
    splits = candidates(vram_gib)
    dropped: list[tuple[int, ...]] = []
    while len(splits) > 1 and \
            per_config * (len(splits) + 1) * len(MODES) > BUDGET_SHARE * spec.budget_s:
        dropped.append(splits.pop())
    expected = per_config * (len(splits) + 1) * len(MODES)
    if expected > BUDGET_SHARE * spec.budget_s:
        return (f"even the advised split, measured twice, takes about {expected:.0f} s, past 80% of "
                f"omni_bench.budget_s ({spec.budget_s:g} s): raise it or lower the repetitions")
    # the advised split again, last: the same configuration measured twice is the sweep's own
    # drift between configurations (the noise a difference between splits must pass)
    ts = ",".join("/".join(str(p) for p in s) for s in (*splits, splits[0]))
    args = (*without_options(spec.args, SPLIT_OPTIONS), "-sm", ",".join(MODES), "-ts", ts)
    return SweepPlan(args, tuple(splits), MODES, expected, tuple(dropped))


def _config(test: BenchTest) -> str:
    ts = str(test.params.get("tensor_split") or "")
    return f"sm={test.params.get('split_mode')} ts={ts or 'default'}"


def _shares(test: BenchTest) -> tuple[float, ...]:
    values = split_values(test.params)
    total = sum(values) or 1.0
    return tuple(round(v / total, 2) for v in values)


def _drift(tests: list[BenchTest]) -> float | None:
    """The sweep's own noise between configurations: one configuration measured twice, first
    and last (the advised split, repeated), differs by d; one run's standard deviation between
    configurations is then about |d| / sqrt(2). The largest over the pairs; None without one."""
    seen: dict[str, BenchTest] = {}
    found = None
    for t in tests:
        key = _config(t)
        if key in seen:
            a, b = seen[key].estimate.center_ts, t.estimate.center_ts
            d = abs(a - b) / ((a + b) / 2) / math.sqrt(2)
            found = d if found is None else max(found, d)
        else:
            seen[key] = t
    return found


def _merged(tests: list[BenchTest]) -> list[BenchTest]:
    """One test per configuration, a repeated one with every repetition of both runs."""
    by: dict[str, BenchTest] = {}
    for t in tests:
        key = _config(t)
        by[key] = dataclasses.replace(by[key], samples_ts=by[key].samples_ts + t.samples_ts) \
            if key in by else t
    return list(by.values())


def _unfinished_modes(run: BenchRun) -> list[str]:
    """The split modes the run's argv asked for that no finished test ran, in its order."""
    asked: list[str] = []
    for i, arg in enumerate(run.argv[:-1]):
        if arg in ("-sm", "--split-mode"):
            asked += [m.strip() for m in run.argv[i + 1].split(",") if m.strip()]
    ran = {str(t.params.get("split_mode")) for t in (run.result.tests if run.result else ())}
    return [m for m in dict.fromkeys(asked) if m not in ran]


def judge_sweep(meta: CheckMeta, spec: BenchSpec, run: BenchRun,
                advised: tuple[int, ...]) -> CheckResult:
    """The sweep's verdict: per kind, the fastest configuration and each other one against
    it with the bench's noise rule, widened by the drift the repeated advised split measured;
    the advised split's standing decides the status. Without that repeat no configuration
    is called slower: the drift between configurations (9% on a 2-vCPU VM, more than the
    repetitions show) would be called a winner."""
    if run.result is None:
        return meta.result(Status.ERROR, f"llama-bench failed: {run.error}",
                           evidence=(Evidence("bench.llama", " ".join(run.argv) or "llama-bench",
                                              tuple(run.stderr_tail[-5:])),))
    want = tuple(round(p / sum(advised), 2) for p in advised)
    kinds: dict[str, list[BenchTest]] = {}
    for t in run.result.tests:
        kinds.setdefault(t.kind, []).append(t)
    lines: list[str] = []
    table: dict[str, Any] = {}
    status = Status.PASS
    for kind, everyone in kinds.items():
        drift = _drift(everyone)
        tests = _merged(everyone)
        best = max(tests, key=lambda t: t.estimate.center_ts)
        rows: list[dict[str, Any]] = []
        for t in sorted(tests, key=lambda t: -t.estimate.center_ts):
            verdict = judge_test(t.name, list(best.samples_ts), list(t.samples_ts),
                                 spec.tolerance_pct)
            line = max(verdict.threshold, SIGMAS * drift) if drift is not None else None
            measurable = t is not best and line is not None and verdict.drop > line
            rows.append({"config": _config(t), "center_ts": round(t.estimate.center_ts, 2),
                         "spread": round(t.estimate.spread, 4), "runs": len(t.samples_ts),
                         "slower": round(verdict.drop, 4),
                         "threshold": None if line is None else round(line, 4),
                         "measurably_slower": measurable,
                         "advised": t.params.get("split_mode") == "layer" and _shares(t) == want})
        table[kind] = {"rows": rows, "drift": None if drift is None else round(drift, 4)}
        tied = [r for r in rows if not r["measurably_slower"]]
        advised_row = next((r for r in rows if r["advised"]), None)
        noise = (f"drift between configurations ±{drift:.1%}, measured by the advised split run "
                 "twice" if drift is not None else
                 "the drift between configurations was not measured (the advised split's repeat "
                 "did not run): no configuration is called slower")
        head = f"{kind}: " + (f"fastest {rows[0]['config']} at {rows[0]['center_ts']:g} t/s"
                              if len(tied) < len(rows) else
                              f"no measurable difference between the {len(rows)} splits "
                              f"(fastest median {rows[0]['center_ts']:g} t/s)")
        if len(tied) > 1 and len(tied) < len(rows):
            head += f" (within its noise: {', '.join(r['config'] for r in tied[1:])})"
        slower = [f"{r['config']} {r['slower']:.0%} slower" for r in rows if r["measurably_slower"]]
        if slower:
            head += "; measurably slower: " + ", ".join(slower)
        head += f"; {noise}"
        if drift is None:
            status = Status.WARN
        if advised_row is not None and advised_row["measurably_slower"]:
            status = Status.WARN
            head += f"; the advised split ({advised_row['config']}) is measurably slower"
        lines.append(head)
    summary = "; ".join(lines)
    if run.error:  # the configurations it finished are judged; the rest never ran
        status = Status.WARN
        failed = _unfinished_modes(run)
        named = (f"-sm {failed[0]} failed (the first split mode that did not finish; a mode the "
                 "build cannot load: leave it out)" + (f", {', '.join(failed[1:])} never ran"
                                                      if failed[1:] else "") + "; "
                 if failed else "")
        summary = (f"{named}llama-bench failed after {len(run.result.tests)} tests "
                   f"({run.error}): the configurations after them were not measured; {summary}")
    evidence = (Evidence("bench.llama", " ".join(run.argv) or "llama-bench",
                         tuple(f"{k} {r['config']}: {r['center_ts']:g} t/s ±{r['spread']:.1%}"
                               for k, part in table.items() for r in part["rows"])
                         + tuple(run.stderr_tail[-3:] if run.error else ())),)
    return meta.result(status, summary, expected=f"advised split {'/'.join(map(str, advised))} "
                       "(-sm layer) fastest or within the noise of the fastest",
                       actual=summary, evidence=evidence, details={"sweep": table})
