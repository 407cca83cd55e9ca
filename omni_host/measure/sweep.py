"""The split sweep (issue 38, rebuilt on the plan's proof in issue 46), pure: which
``--tensor-split`` and ``--split-mode`` to run around the advised one, how many fit the bench's
budget, and which is fastest, judged as ``plan --prove`` judges its candidates.

* **Planned** from the GPUs the policy states (``omni_gpus``: model and VRAM): the split
  ``gpu.topology`` advises (layer split proportional to VRAM: 75/25 for 96+32 GB, S-003), the
  even split, and for two GPUs the advised share of the first GPU +-10 and +-20 points; each
  under ``-sm layer`` and ``-sm row``, and every layer on the main GPU (``-sm none``) once.
  Each configuration is one arm of an A/B in ``ROUNDS``
  rounds (five: one round disturbed by other processes can be left out and four still judge;
  every configuration once a round, the order reversed every other round: the
  helper's ``bench --knob`` machinery). The candidates farthest from the advice are dropped
  first until the sweep's expected time (each configuration as long as the baseline's tests
  took: their tokens over their tokens/s, every repetition, once a round) fits 80% of
  ``omni_bench.budget_s``.
* **Why rounds**: llama-bench given lists runs every split of one mode, then every split of
  the next. A load that came or went between the two blocks (a busy loop on this 2-vCPU VM,
  in one full run of the suite) made every ``-sm layer`` configuration "measurably slower"
  (39-43%) than every ``-sm row`` one, on a CPU where the two run the same work; and on two
  H100s a prompt-processing verdict flipped between two sweeps five minutes apart. In rounds,
  what moved every configuration of a round alike is the host's drift and is taken out of
  the noise (``knob.block_noise``), and a round whose runs other processes disturbed unevenly
  is left out (``knob.disturbed``).
* **A negative control**: the advised split runs twice a round (its second arm ``... again``,
  at the other end of the round's order). Two runs of one configuration that differ
  measurably say the runs are not steady enough for any call (one full run of the suite under
  a busy core called two CPU configurations 54-70% faster than an advice whose runs were all
  slow: this host's runs fall in two clusters); otherwise the two are one reference, their
  geometric mean a round, so one unlucky run of the advice no longer moves every comparison.
* **Judged** per test against the advised split (``-sm layer`` at the advised shares): each
  other configuration on the rounds both ran (``knob.effect``: measurable only where every
  round agrees on the sign, with 4 rounds or more, past 2% and past the standard errors that
  keep eleven comparisons' chance of a false call that of one at 3: ``knob.family_sigmas``).
  Within that is "no measurable difference", never a winner. The advised split passes when
  nothing is measurably faster, and warns, naming what is, when something is. A split mode
  whose every run failed (``-sm row`` does not load in recent CUDA builds; ``-sm none`` where
  the model does not fit one GPU) is named and dropped, not a warn.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_host.measure.knob import (
    MIN_PAIRS,
    against,
    block_noise,
    disturbed,
    family_sigmas,
    left_out_words,
    round_centres,
)
from omni_host.measure.rules import tensor_split
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.knobs import Arm, without_options

if TYPE_CHECKING:
    from omni_host.evaluate.meta import CheckMeta
    from omni_host.plan.policy import BenchSpec
    from omni_host.probes.parsers.bench_run import KnobAB

CHECK_ID = "perf.split-sweep"
SPLIT_OPTIONS = frozenset({"-ts", "--tensor-split", "-sm", "--split-mode"})
SHIFTS = (10, 20)  # points of the first GPU's share around the advice (two GPUs)
MODES = ("layer", "row")
ROUNDS = MIN_PAIRS + 1  # a round disturbed by other processes can be left out, four still judge
AGAIN = " again"  # the advised split's second arm: the sweep's negative control
BUDGET_SHARE = 0.8
_TOKENS = re.compile(r"(?:pp|tg)(\d+)")


@dataclass(frozen=True)
class SweepPlan:
    arms: tuple[Arm, ...]  # one per configuration: the bench's args with its -sm and -ts
    splits: tuple[tuple[int, ...], ...]  # percentages, the advised first
    rounds: int
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


def shares(split: tuple[int, ...]) -> str:
    """A split as llama-bench's ``-ts`` takes it for one configuration: ``75/25``."""
    return "/".join(str(p) for p in split)


def config_name(mode: str, split: tuple[int, ...] = ()) -> str:
    """A configuration as the sweep names it (its arm): ``sm=layer ts=75/25``, ``sm=none``."""
    return f"sm={mode}" + (f" ts={shares(split)}" if split else "")


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

    def expected() -> float:  # every split under every mode, -sm none, the advice again
        return per_config * (len(splits) * len(MODES) + 2) * ROUNDS

    while len(splits) > 1 and expected() > BUDGET_SHARE * spec.budget_s:
        dropped.append(splits.pop())
    if expected() > BUDGET_SHARE * spec.budget_s:
        return (f"even the advised split, under {len(MODES)} split modes (and again) and -sm "
                f"none, in {ROUNDS} rounds, takes about {expected():.0f} s, past 80% of "
                f"omni_bench.budget_s ({spec.budget_s:g} s): raise it or lower the repetitions")
    rest = without_options(spec.args, SPLIT_OPTIONS)
    arms = tuple(Arm(config_name(mode, split), (),
                     (*rest, "-sm", mode, "-ts", shares(split)))
                 for mode in MODES for split in splits)
    arms += (Arm(config_name("none"), (), (*rest, "-sm", "none")),
             Arm(arms[0].name + AGAIN, (), arms[0].args))
    return SweepPlan(arms, tuple(splits), ROUNDS, expected(), tuple(dropped))


def _failed_modes(ab: KnobAB) -> dict[str, str]:
    """The split modes whose every run failed (a mode the build cannot load) -> the first
    run's error."""
    by_mode: dict[str, list[str | None]] = {}
    for r in ab.runs:
        by_mode.setdefault(r.arm.split()[0].removeprefix("sm="), []).append(r.error)
    return {mode: str(errors[0]) for mode, errors in by_mode.items()
            if errors and all(errors)}


def _rows(arms: dict[str, dict[int, float]], medians: dict[str, float],
          effects: dict[str, dict[str, Any]], judged: bool, advised: str) -> list[dict[str, Any]]:
    """The sweep's table, fastest median first: each configuration's effect against the
    reference and whether it is measurably faster or slower (never, where ``judged`` is False:
    the noise was not measured or the advice's twin disagreed with it)."""
    rows = []
    for name in sorted(arms, key=lambda a: -medians[a]):
        found = effects[name]
        measurable = judged and bool(found.get("measurable"))
        rows.append({"config": name, "median_ts": medians[name],
                     "rounds": len(arms[name]), "effect": found.get("effect"),
                     "uncertainty": found.get("uncertainty"),
                     "measurably_faster": measurable and found["effect"] > 0,
                     "measurably_slower": measurable and found["effect"] < 0,
                     "advised": name == advised})
    return rows


def _judged(test: str, arms: dict[str, dict[int, float]],
            advised: str) -> tuple[str, dict[str, Any], bool, bool]:
    """One test's verdict in words, its table, whether a configuration is measurably faster
    than the advised one, and whether the advice's twin (``AGAIN``) agreed with it (True
    where the sweep ran none). Each configuration is judged against the advised split (the
    highest median where it never ran) on the rounds both ran, never against the fastest: the
    fastest of twelve is partly the luckiest, and its luck is not in the noise (12% of
    simulated sweeps of twelve equal configurations called one slower that way, 4% against a
    fixed reference). The line is raised for the comparisons made at once
    (``knob.family_sigmas``: 3.67 standard errors for eleven)."""
    noise = block_noise(arms)
    compared = len(arms) - 1  # the advice's twin against it is one comparison more
    sigmas = family_sigmas(compared)
    twin, control = advised + AGAIN, None
    if twin in arms and advised in arms:
        control = against({advised: arms[advised], twin: arms[twin]}, advised, noise,
                          sigmas)[twin]
        both = set(arms[advised]) & set(arms[twin])
        arms = {name: rounds for name, rounds in arms.items() if name != twin} | {
            advised: {i: math.sqrt(arms[advised][i] * arms[twin][i]) for i in sorted(both)}}
    steady = not (noise is not None and control is not None and control.get("measurable"))
    medians = {name: round(statistics.median(v.values()), 2) for name, v in arms.items()}
    ref = advised if advised in arms else max(medians, key=lambda a: medians[a])
    effects = against(arms, ref, noise, sigmas)
    rows = _rows(arms, medians, effects, steady and noise is not None, advised)
    faster = [r for r in rows if r["measurably_faster"]]
    slower = [r for r in rows if r["measurably_slower"]]
    said = "the advised split" if ref == advised else "the fastest median"
    if not steady:
        assert control is not None
        line = (f"{test}: the advised split, run twice a round, differed from itself by "
                f"{control['effect']:+.0%} (±{control['uncertainty']:.0%}): runs this unsteady "
                "cannot call a configuration faster or slower")
    elif faster:
        line = f"{test}: measurably faster than {said} ({ref}, {medians[ref]:g} t/s): " + \
            ", ".join(f"{r['config']} {r['effect']:+.0%} (±{r['uncertainty']:.0%})"
                      for r in faster)
    else:
        line = (f"{test}: no configuration measurably faster than {said} ({ref} at "
                f"{medians[ref]:g} t/s; {len(rows) - 1 - len(slower)} of {len(rows) - 1} "
                "others within the noise")
        line += f", fastest median {rows[0]['config']} {rows[0]['median_ts']:g} t/s)" \
            if rows[0]["config"] != ref else ")"
    if slower:
        line += "; measurably slower: " + ", ".join(
            f"{r['config']} {r['effect']:+.0%} (±{r['uncertainty']:.0%})" for r in slower)
    most = max(len(v) for v in arms.values())
    line += (f"; one run's noise ±{noise:.1%} with the rounds' drift taken out, {most} rounds, "
             f"{sigmas:.2f} standard errors for {compared} comparisons"
             if noise is not None else
             f"; one run's noise was not measured ({most} round(s) of every configuration): "
             "no configuration is called faster or slower")
    if control is not None and steady and noise is not None:
        line += "; the advised split ran twice a round, within the noise of itself"
    table = {"reference": ref, "rows": rows, "sigmas": round(sigmas, 2),
             "run_noise": None if noise is None else round(noise, 4)}
    if control is not None:
        table["control"] = {k: control.get(k) for k in ("pairs", "effect", "uncertainty",
                                                        "measurable")}
    return line, table, bool(faster), steady


def judge_sweep(meta: CheckMeta, ab: KnobAB, advised: tuple[int, ...],
                dropped: tuple[tuple[int, ...], ...] = ()) -> CheckResult:
    """The sweep's verdict from its rounds: per test, every configuration against the advised
    split (``-sm layer`` at the advised shares); one measurably faster, a run that failed
    (a split mode that never loaded apart: named and dropped) or a sweep that stopped warn;
    under ``MIN_PAIRS`` rounds left to judge, nothing is judged (skip). ``dropped``: the
    candidate splits the budget left out (``SweepPlan.dropped``), said so."""
    name = config_name("layer", advised)
    lines = [f"{r.arm} round {r.pair}: " + (
        ", ".join(f"{t.name} {t.estimate.center_ts:.2f} t/s" for t in r.result.tests)
        if r.result else f"failed: {r.error}") for r in ab.runs]
    evidence = (Evidence("bench.llama", "omni-host bench --sweep-split: llama-bench per split "
                         "configuration, in rounds", tuple(lines)),)
    left_out = disturbed(ab)
    failed_modes = _failed_modes(ab)
    failed = [r for r in ab.runs if r.error
              and r.arm.split()[0].removeprefix("sm=") not in failed_modes]
    said: list[str] = [f"-sm {mode} failed in every run, dropped (a split mode this build or "
                       f"these GPUs cannot load: serve without it): {error}"
                       for mode, error in failed_modes.items()]
    table: dict[str, Any] = {}
    beaten = False  # a configuration measurably faster than the advice
    unsteady = False  # the advice's two arms differed: nothing is called
    for test, arms in round_centres(ab, left_out).items():
        line, table[test], faster, steady = _judged(test, arms, name)
        said.append(line)
        beaten, unsteady = beaten or faster, unsteady or not steady
    if not table:
        said.append("nothing measured to judge")
    if failed:
        said.append(f"{len(failed)} run(s) failed: {failed[0].arm} round {failed[0].pair}: "
                    f"{failed[0].error}")
    if ab.error:
        said.append(f"the sweep stopped: {ab.error}")
    if left_out:
        said.append(left_out_words(left_out, "round"))
    not_run = [shares(split) for split in dropped]
    if not_run:
        said.append(f"{len(not_run)} candidate split(s) not run, to fit omni_bench.budget_s: "
                    + ", ".join(not_run))
    measured = any(r["rounds"] >= MIN_PAIRS for t in table.values() for r in t["rows"])
    if table and not measured:
        said.append(f"under {MIN_PAIRS} rounds: no difference is called measurable")
    status = Status.WARN if beaten or failed or ab.error else \
        Status.PASS if measured and not unsteady else Status.SKIP
    summary = "; ".join(said)
    if status is Status.SKIP:
        summary += ": not judged, run it again when the host is quiet"
    details: dict[str, Any] = {"sweep": table, "rounds": 1 + max((r.pair for r in ab.runs),
                                                                 default=-1)}
    if left_out:
        details["disturbed_rounds"] = {str(p): h for p, h in left_out.items()}
    if not_run:
        details["dropped"] = not_run
    return meta.result(status, summary, expected=f"advised split {shares(advised)} "
                       "(-sm layer): no configuration measurably faster",
                       actual=summary, evidence=evidence, details=details)
