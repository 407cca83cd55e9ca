"""perf.knob: what a knob costs on this host, measured (``omni-host bench --knob NAME=VALUE``,
issue 48). The A/B's runs come in pairs (each arm once, the order alternating); per test, each
pair gives the log ratio of the knob's arm to the host as it is. The effect is the mean of those
ratios, judged by a paired t test on them (``effect``: their spread over the root of their
number, against Student's t line for so few values, the line raised for the tests judged at
once). A pair whose runs other processes disturbed unevenly (their CPU use moved by more than
half a CPU between its runs: ``disturbed``) is left out and said. An effect is measurable only
where every pair agrees on its sign, it passes that line, and it passes the floor below which
this bench's runs do not resolve (``FLOOR``): two arms that are the same value give "no
measurable difference". A recommendation (the knob's value beats the host's) is made only where
measurable.
"""

from __future__ import annotations

import functools
import math
import statistics
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from omni_host.model import CheckResult, Evidence, Status

if TYPE_CHECKING:
    from omni_host.evaluate.meta import CheckMeta
    from omni_host.plan.knobs import Knob
    from omni_host.probes.parsers.bench_run import KnobAB

CHECK_ID = "perf.knob"
MIN_PAIRS = 4  # fewer cannot agree on a sign by more than chance (2 x 1/2^3 = 25%)
SIGMAS = 3.0
FLOOR = 0.02  # 2%: below it, a difference between arms is not told from the runs' drift
DISTURBED_CPUS = 0.5  # other processes' CPU use that moved this much between a pair's runs


def disturbed(ab: KnobAB) -> dict[int, str]:
    """The pairs (or rounds) whose runs other processes disturbed unevenly: the CPUs they used
    during one run and another of the pair differ by more than ``DISTURBED_CPUS`` (a load
    that came or went between them, not one that weighed on every run alike). Pair -> how."""
    loads: dict[int, dict[str, float]] = {}
    for r in ab.runs:
        if r.other_cpu_load is not None:
            loads.setdefault(r.pair, {})[r.arm] = r.other_cpu_load
    return {pair: ", ".join(f"{arm} {load:.2f}" for arm, load in by_arm.items())
            for pair, by_arm in loads.items()
            if len(by_arm) > 1 and max(by_arm.values()) - min(by_arm.values()) > DISTURBED_CPUS}


def left_out_words(left_out: dict[int, str], unit: str) -> str:
    """``disturbed``'s pairs (``unit``: pair, or the proof's round) said once: "2 round(s)
    left out: other processes' CPU use moved between their runs (round 0: ...; ...)"."""
    return (f"{len(left_out)} {unit}(s) left out: other processes' CPU use moved between their "
            "runs (" + "; ".join(f"{unit} {p}: {how} CPUs" for p, how in left_out.items()) + ")")


def _spread(values: list[float]) -> float:
    """Robust standard deviation (1.4826 x the median absolute deviation)."""
    if len(values) < 2:
        return 0.0
    centre = statistics.median(values)
    return statistics.median(abs(x - centre) for x in values) * 1.4826


def family_sigmas(comparisons: int) -> float:
    """The standard errors a difference must pass when ``comparisons`` are made at once, so
    that the chance of any false call stays that of one comparison at ``SIGMAS`` (Bonferroni):
    3.0 for one, 3.67 for eleven."""
    alpha = 2 * (1 - NormalDist().cdf(SIGMAS)) / max(1, comparisons)
    return NormalDist().inv_cdf(1 - alpha / 2)


def _t_within(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` (a whole number) degrees of freedom, in closed
    form (Abramowitz and Stegun 26.7.3, 26.7.4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...))
        for k in range(1, (df - 1) // 2):
            term *= c2 * 2 * k / (2 * k + 1)
            total += term
        extra = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        return 2 / math.pi * (theta + extra)
    for k in range(1, df // 2):  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


@functools.lru_cache(maxsize=256)
def t_line(pairs: int, sigmas: float = SIGMAS) -> float:
    """How many standard errors a mean of ``pairs`` values must pass when its noise is
    estimated from those same values: Student's t with pairs - 1 degrees of freedom, at the
    two-sided chance of ``sigmas`` normal standard errors (9.22 for four pairs, 6.62 for five,
    5.51 for six at 3.0). A spread of four values is often small by chance; read as known, it
    called same-value arms different in 0.9% of this VM's comparisons (a 3-sigma line's
    chance is 0.135% one-sided), 0.16% with this line (tests/test_knobs.py)."""
    within = 1 - 2 * (1 - NormalDist().cdf(sigmas))
    low, high = 0.0, 1e4
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_within(mid, pairs - 1) < within else (low, mid)
    return high


def effect(pairs: list[tuple[float, float]], run_noise: float | None = None,
           sigmas: float = SIGMAS) -> dict[str, Any]:
    """(reference, arm) centres per pair -> the effect and whether it is measurable.

    Where the caller measured what one run's centre scatters by with the rounds' drift taken
    out (``run_noise``, a log standard deviation: ``block_noise``, many residuals), a pair's
    ratio scatters by that times the root of 2, read as known: the effect is the ratios'
    median, measurable past ``sigmas`` standard errors. Else the noise comes from the pairs'
    own log ratios (the drift cancels in each ratio), and so few values estimate it loosely:
    the effect is their mean, measurable past Student's t line (``t_line``: a paired t test).
    Either way every pair must agree on the sign and the effect must pass ``FLOOR``."""
    logs = [math.log(b / a) for a, b in pairs if a > 0 and b > 0]
    if not logs:
        return {"pairs": 0, "measurable": False}
    n = len(logs)
    if run_noise is not None:
        centre = statistics.median(logs)
        se = max(_spread(logs), run_noise * math.sqrt(2)) / math.sqrt(n)
        line = sigmas
    else:
        centre = statistics.fmean(logs)
        se = (statistics.stdev(logs) if n > 1 else 0.0) / math.sqrt(n)
        line = t_line(n, sigmas) if n > 1 else math.inf
    agree = all(x > 0 for x in logs) or all(x < 0 for x in logs)
    measurable = n >= MIN_PAIRS and agree and abs(centre) > max(line * se, math.log1p(FLOOR))
    return {"pairs": n, "effect": round(math.expm1(centre), 4),
            "uncertainty": round(math.expm1(2 * se), 4), "measurable": measurable,
            "ratios": [round(math.exp(x), 4) for x in logs]}


def block_noise(table: dict[str, dict[int, float]]) -> float | None:
    """The scatter of one run's centre (log standard deviation) in an arms x rounds table of
    tokens/s, with what moved every arm of a round alike (the host's drift) taken out: the
    residual of the additive model log(t) = arm + round, over the arms measured in every
    round. None with fewer than three such arms or two rounds (too few residuals)."""
    rounds = sorted(set.intersection(*(set(v) for v in table.values()))) if table else []
    arms = [a for a, v in table.items() if all(v.get(i, 0) > 0 for i in rounds)]
    if len(arms) < 3 or len(rounds) < 2:
        return None
    logs = {a: {i: math.log(table[a][i]) for i in rounds} for a in arms}
    arm_mean = {a: statistics.fmean(logs[a].values()) for a in arms}
    round_mean = {i: statistics.fmean(logs[a][i] for a in arms) for i in rounds}
    grand = statistics.fmean(arm_mean.values())
    squares = sum((logs[a][i] - arm_mean[a] - round_mean[i] + grand) ** 2
                  for a in arms for i in rounds)
    return math.sqrt(squares / ((len(arms) - 1) * (len(rounds) - 1)))


def round_centres(ab: KnobAB, left_out: dict[int, str]) -> dict[str, dict[str, dict[int, float]]]:
    """Arms run in rounds (a proof's candidates, a sweep's configurations): test -> arm ->
    round -> the run's centre (tokens/s), the rounds ``left_out`` (``disturbed``) apart."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for run in ab.runs:
        for t in run.result.tests if run.result and run.pair not in left_out else ():
            out.setdefault(t.name.split()[0], {}).setdefault(run.arm, {})[run.pair] = \
                t.estimate.center_ts
    return out


def against(arms: dict[str, dict[int, float]], reference: str, noise: float | None,
            sigmas: float = SIGMAS) -> dict[str, dict[str, Any]]:
    """Each arm (arm -> round -> tokens/s) against ``reference`` on the rounds both ran
    (``effect``, one run's noise ``noise``); the reference itself: its rounds only."""
    return {arm: effect([(arms[reference][i], c) for i, c in rounds.items()
                         if i in arms[reference]], noise, sigmas)
            if arm != reference else {"pairs": len(rounds)} for arm, rounds in arms.items()}


def against_leader(arms: dict[str, dict[int, float]]) -> tuple[str, dict[str, dict[str, Any]],
                                                          float | None]:
    """Configurations measured in rounds (arm -> round -> tokens/s): the leader (the highest
    median over its rounds) and every arm against it (``against``, one run's noise the arms
    x rounds residual: ``block_noise``). The line is raised for the comparisons made at once
    (``family_sigmas``): the leader is the luckiest of equals as often as the fastest, and
    each other arm is compared with it. Returns the leader, each arm's median, rounds and
    effect, and that noise (a log standard deviation; None unmeasured)."""
    medians = {arm: statistics.median(rounds.values()) for arm, rounds in arms.items()}
    leader = max(medians, key=lambda a: medians[a])
    noise = block_noise(arms)
    effects = against(arms, leader, noise, family_sigmas(len(arms) - 1))
    return leader, {arm: {"median_ts": round(medians[arm], 2), "rounds": len(rounds),
                          "against_leader": effects[arm]}
                    for arm, rounds in arms.items()}, noise


def _paired(centres: dict[str, dict[int, dict[str, float]]], value: str
            ) -> tuple[list[str], list[str], dict[str, dict[str, Any]]]:
    """Each test's paired effect of ``value`` against "now" (test -> pair -> arm -> t/s), the
    line raised for the comparisons made at once: what each says, the tests it made faster,
    and each test's figures."""
    said, better, tests = [], [], {}
    for test, by_pair in centres.items():
        pairs = [(arms["now"], arms[value]) for arms in by_pair.values()
                 if "now" in arms and value in arms]
        found = tests[test] = effect(pairs, sigmas=family_sigmas(len(centres)))
        if not found["pairs"]:
            said.append(f"{test}: no complete pair")
        elif found["measurable"]:
            said.append(f"{test} {found['effect']:+.1%} \u00b1{found['uncertainty']:.1%} "
                        f"({found['pairs']} pairs)")
            if found["effect"] > 0:
                better.append(test)
        else:
            said.append(f"{test} no measurable difference (\u00b1{found['uncertainty']:.1%}, "
                        f"{found['pairs']} pairs)")
    return said, better, tests


def judge_knob(meta: CheckMeta, knob: Knob, value: str, ab: KnobAB,
               now_value: str | None = None) -> CheckResult:
    """``now_value``: an option knob's value in the host's own args (None: llama-bench's
    default); a file knob's comes from the host (what the helper read before)."""
    before = sorted(set(ab.before.values()))
    now = f"{knob.name} {'/'.join(before)}" if before else \
        f"{knob.name} {now_value}" if now_value else f"{knob.name} at llama-bench's default"
    lines = [f"{r.arm} (pair {r.pair}): " + (", ".join(f"{t.name} {t.estimate.center_ts:.1f} t/s"
                                                     for t in r.result.tests)
                                             if r.result else f"failed: {r.error}")
             + "".join(f" ({name} held at {held})" for name, held in r.limits)
             for r in ab.runs]
    restored = {p: s for p, s in ab.restored.items() if s != "ok"}
    evidence = (Evidence("bench.llama", f"llama-bench, A/B: {now} against {knob.name}={value}",
                         tuple(lines[-20:])),)
    details: dict[str, Any] = {"knob": knob.name, "value": value, "before": ab.before,
                               "restored": ab.restored, "tests": {}}
    if restored:
        return meta.result(Status.FAIL, f"{knob.name} NOT restored: "
                           + "; ".join(f"{p}: {s}" for p, s in restored.items())
                           + f" (it was {', '.join(before)})", evidence=evidence,
                           details=details)
    if ab.error:
        return meta.result(Status.ERROR, f"A/B of {knob.name}={value} stopped: {ab.error} "
                           f"(restored: {len(ab.restored)} file(s))", evidence=evidence,
                           details=details)
    left_out = disturbed(ab)
    centres: dict[str, dict[int, dict[str, float]]] = {}
    for r in ab.runs:
        for t in r.result.tests if r.result and r.pair not in left_out else ():
            centres.setdefault(t.name, {}).setdefault(r.pair, {})[r.arm] = t.estimate.center_ts
    if left_out:
        details["disturbed_pairs"] = {str(p): how for p, how in left_out.items()}
    said, better, details["tests"] = _paired(centres, value)
    failed = [r.error for r in ab.runs if r.arm == value and r.error]
    if failed and not any(found["pairs"] for found in details["tests"].values()):
        return meta.result(Status.ERROR, f"A/B of {knob.name}={value}: its runs failed: "
                           f"{failed[0]}", evidence=evidence, details=details)
    if left_out:
        said.append(left_out_words(left_out, "pair"))
    if not centres:
        said.append("no pair left to judge")
    head = f"{knob.name}={value} against {now}: " + "; ".join(said)
    if better:
        details["recommend"] = f"{knob.name}={value}"
        put_back = "; the knob was restored" if ab.restored else ""
        return meta.result(Status.WARN, f"{head}: {knob.name}={value} is faster here "
                           f"({', '.join(better)}){put_back}", evidence=evidence,
                           details=details)
    tail = "; the knob was restored" if ab.restored else ""
    if not centres:  # nothing measured to judge: not a pass (run it again on a quieter host)
        return meta.result(Status.SKIP, f"{head}: not judged, run it again when the host is "
                           f"quiet{tail}", evidence=evidence, details=details)
    return meta.result(Status.PASS, head + tail, evidence=evidence, details=details)
