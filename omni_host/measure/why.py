"""perf.why (issue 65), pure: what each change since the baseline costs, measured on the host
(``omni-host bench --why``). A suspicion (the context diff names what changed, causes first)
becomes a proof:

* **Factors** (``factors``): what differs between the baseline and the latest bench judged
  against it. A llama-bench option its record echoes (``-t``, ``-ngl``, ``-ub``, ``-b``,
  ``-fa``, ``-ctk``, ``-ctv``, ``-ncmoe``), a variable of the bench's environment or a knob
  the bench reads (THP, its defrag, NUMA balancing, the governor, zone reclaim: written for
  its arm's runs and restored whatever happens, as ``--knob`` does; root on the host) or the
  CPUs allowed (its arm's llama-bench run on the baseline's, where the baseline recorded
  which) can be set back for one run; the rest (another GPU process, the driver, the kernel,
  the binary, the CPU quota...) cannot, and each is said with what would prove it.
* **Rounds** (``plan_why``): one A/B of interleaved rounds (the knob A/B's helper machinery:
  each arm once a round, the order reversed every other round): the host as it is (``now``),
  each factor set back alone, and every factor set back at once (``all back``, where two or
  more). Factors are taken in the context diff's order until the rounds' expected time (the
  baseline's pace) fits the budget (default 10 minutes).
* **Judged** (``judge_why``) per test against ``now`` on the rounds both ran, with the knob
  A/B's rule (``knob.against``: measurable only where every round agrees on the sign, past 2%
  and past the family's standard errors). A factor whose setting back is measurably faster is
  costly, with its effect and interval and what it costs of the rate; the factors' effects
  compounded (multiplied) are held against ``all back`` (the drop the factors explain
  together): where the two differ by more than their noise, the interaction is said.
  Passes when no factor is measured costly; warns naming each that is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_host.measure.asked import Factor
from omni_host.measure.context import CPU_LIST, ENV, KNOB, Kind, diff, fact, label
from omni_host.measure.knob import (
    FLOOR,
    MIN_PAIRS,
    against,
    block_noise,
    disturbed,
    family_sigmas,
    left_out_words,
    round_centres,
)
from omni_host.measure.sweep import seconds_per_config
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.knobs import KNOBS, Arm, without_options
from omni_host.probes.parsers.bench import SHORT
from omni_host.remote.procfacts import env_kept

if TYPE_CHECKING:
    from omni_host.evaluate.meta import CheckMeta
    from omni_host.probes.parsers.bench_run import KnobAB

CHECK_ID = "perf.why"
ROUNDS = 5  # one disturbed round can be left out and four still judge
BUDGET_S = 600.0  # --why's default budget: 10 minutes of runs
NOW, ALL = "now", "all back"
# llama-bench's record fields that name an option it can be run with, and that option (the
# parser's short names for the parameters that tell records apart)
OPTIONS = {k: f"-{SHORT[k]}" for k in ("n_threads", "n_gpu_layers", "n_ubatch", "n_batch",
                                        "flash_attn", "type_k", "type_v", "n_cpu_moe")}
SPELLINGS = {"-t": ("-t", "--threads"), "-ngl": ("-ngl", "--n-gpu-layers"),
             "-ub": ("-ub", "--ubatch-size"), "-b": ("-b", "--batch-size"),
             "-fa": ("-fa", "--flash-attn"), "-ctk": ("-ctk", "--cache-type-k"),
             "-ctv": ("-ctv", "--cache-type-v"), "-ncmoe": ("-ncmoe", "--n-cpu-moe")}
# what would prove a factor that cannot be set back for one run
PROOF = {"gpu_processes": "the bench again once the other GPU process has gone",
         "driver": "a bench on the baseline's driver (a reboot into it)",
         "kernel": "a bench on the baseline's kernel (a reboot into it)",
         "llama_bench_sha256": "the baseline's binary, were it kept: bench --knob cannot run it",
         "build": "the baseline's build, were it kept",
         "cpus_allowed": "the bench from a shell with the baseline's CPUs allowed (the "
                         "baseline did not record which)",
         "cpu_quota": "the bench outside the cgroup's quota"}
TRUNCATED = 200  # an environment value stored at this length may be cut: not set back
CPUS = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?){0,63}")  # a kernel's CPU list
OPTION_VALUE = re.compile(r"[A-Za-z0-9_.]{1,32}")  # a number or a cache type: what is set back


def _text(value: Any) -> str | None:
    """A stored context value as a factor holds it (None: it was not there)."""
    return None if value is None else str(value)


def _value(json_text: str) -> str:
    """A key field's JSON value as llama-bench's option takes it (true/false as 1/0)."""
    value = json.loads(json_text)
    return str(int(value)) if isinstance(value, bool) else str(value)


def factors(then_keys: dict[str, str], now_keys: dict[str, str], then: dict[str, Any],
            now: dict[str, Any]) -> list[Factor]:
    """What differs between the baseline (its test's key, its context) and the latest bench,
    in the order the context diff names causes: options first (the operator set them), then
    the environment, then what cannot be set back."""
    out = []
    for k in OPTIONS:
        if k in then_keys and k in now_keys and then_keys[k] != now_keys[k]:
            old, new = _value(then_keys[k]), _value(now_keys[k])
            plain = OPTION_VALUE.fullmatch(old) is not None  # a stored file may be edited
            out.append(Factor(f"llama-bench {OPTIONS[k]}", old, new,
                              option=OPTIONS[k] if plain else None,
                              cannot=None if plain else "its stored value is not an option's"))
    was, cpus = then.get(CPU_LIST), now.get(CPU_LIST)
    which = was is not None and cpus is not None and was != cpus  # the CPUs, not their count
    if which:
        plain = CPUS.fullmatch(str(was)) is not None
        out.append(Factor("CPUs allowed", str(was), str(cpus), cpus=str(was) if plain else None,
                          cannot=None if plain else "the baseline's CPUs are not a list"))
    changes, _ = diff(then, now)
    for c in changes:
        if c.key in ("cpus_allowed", CPU_LIST) and which:
            continue
        if c.key.startswith(KNOB) and c.key[len(KNOB):] in KNOBS:
            knob = KNOBS[c.key[len(KNOB):]]
            # written as root: only a value of the knob's own (an edited store writes nothing)
            known = c.before in knob.values if knob.values else str(c.before).isdigit()
            out.append(Factor(knob.what, _text(c.before),
                              _text(c.after),
                              path=knob.path if known else None,
                              cannot=None if known else "the baseline's value is not one of "
                              "its values (its files differed, or it was not read)"))
        elif c.key.startswith(ENV):
            name = c.key.removeprefix(ENV)
            cut = any(isinstance(v, str) and len(v) >= TRUNCATED for v in (c.before, c.after))
            # the one rule for what of an environment may be stored or sent (an edited store
            # naming a secret's variable sends nothing)
            why_not = "its value is stored cut short" if cut else None if env_kept(name) \
                else "not a variable omni-host keeps or sends"
            out.append(Factor(f"env {name}", _text(c.before), _text(c.after),
                              variable=None if why_not else name, cannot=why_not))
        elif fact(c.key).kind is Kind.SETTING or c.key == "gpu_processes":
            proof = PROOF.get(c.key, "a bench with it as the baseline had it")
            out.append(Factor(label(c.key), _text(c.before),
                              _text(c.after),
                              cannot=f"cannot be set back for one run: proved by {proof}"))
    return out


def _back(arm: Arm, f: Factor) -> Arm:
    """``arm`` with factor ``f`` as the baseline had it."""
    if f.option is not None:
        rest = tuple(without_options(arm.args, SPELLINGS[f.option]))
        return dataclasses.replace(arm, args=(*rest, f.option, f.then) if f.then is not None
                                   else rest)
    if f.path is not None and f.then is not None:
        return dataclasses.replace(arm, writes=(*arm.writes, (f.path, f.then)))
    if f.cpus is not None:
        return dataclasses.replace(arm, cpus=f.cpus)
    assert f.variable is not None
    return dataclasses.replace(arm, env=(*arm.env, (f.variable, f.then)))


@dataclass(frozen=True)
class WhyPlan:
    arms: tuple[Arm, ...]
    measured: tuple[Factor, ...]  # set back, one arm each
    left: tuple[Factor, ...]  # not set back: cannot, or past the budget
    rounds: int
    expected_s: float


def pace(baseline: dict[str, list[float]], latest: dict[str, list[float]]) -> float | None:
    """Seconds one run of the config takes, to plan the rounds by: the host as it is runs at
    the latest bench's pace, a drop's slower one, the arms set back near the baseline's; the
    slower of the two (CPUs 0-3 of 16 ran the lent H200's config 2.3x slower)."""
    return max((p for p in (seconds_per_config(baseline), seconds_per_config(latest)) if p),
               default=None)


def plan_why(args: tuple[str, ...], found: list[Factor], per_run_s: float,
             budget_s: float = BUDGET_S) -> WhyPlan | str:
    """The rounds that measure ``found`` (the factors), or why none can run."""
    settable = [f for f in found if f.cannot is None]
    if not found:
        return "nothing differs from the baseline in what the bench records: nothing to prove"
    if not settable:
        return "nothing that changed can be set back for one run: " + \
            "; ".join(f"{f.line()} ({f.cannot})" for f in found)
    left = [f for f in found if f.cannot is not None]

    def expected(n: int) -> float:
        return per_run_s * (1 + n + (n > 1)) * ROUNDS

    while len(settable) > 1 and expected(len(settable)) > budget_s:
        left.append(settable.pop())
    if expected(len(settable)) > budget_s:
        return (f"even one factor in {ROUNDS} rounds takes about {expected(1):.0f} s, past the "
                f"budget ({budget_s:g} s): raise --why-budget or lower the repetitions")
    now = Arm(NOW, (), args)
    arms, every = [now], dataclasses.replace(now, name=ALL)
    for f in settable:
        arms.append(_back(dataclasses.replace(now, name=f.arm), f))
        every = _back(every, f)
    if len(settable) > 1:
        arms.append(every)
    return WhyPlan(tuple(arms), tuple(settable), tuple(left), ROUNDS, expected(len(settable)))


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def _test_effects(test: str, arms: dict[str, dict[int, float]], measured: tuple[Factor, ...],
                  names: list[str], sigmas: float, costly: list[str], lines: list[str]
                  ) -> dict[str, dict[str, Any]]:
    """One test's arms against ``now`` (their effects, returned); what each factor costs and
    the factors compounded against all set back, said into ``costly`` and ``lines``."""
    noise = block_noise(arms)
    effects = {n: against({NOW: arms[NOW], n: arms[n]}, NOW, noise, sigmas)[n]
               for n in names if n in arms}
    for f in measured:
        e = effects.get(f.arm) or {}
        if e.get("effect") is None:
            continue
        what = (f"{test}: setting {f.name} back ({f.shown(f.now)} -> {f.shown(f.then)}) "
                f"{_pct(e['effect'])} ±{e.get('uncertainty') or 0:.1%}")
        if e.get("measurable") and e["effect"] > 0:
            cost = 1 - 1 / (1 + e["effect"])  # of the rate the baseline's value gives
            costly.append(f"{f.line()} costs {test} {cost:.1%} (set back: {_pct(e['effect'])})")
            what += " (measurably faster: it costs)"
        elif not e.get("measurable"):
            what += " (no measurable difference)"
        lines.append(what)
    total = effects.get(ALL) or {}
    if total.get("effect") is not None:
        # the factors compound: their effects multiply (add as logs), each with its standard
        # error (a half of its two-standard-error interval, as logs)
        parts = [effects.get(n) or {} for n in names]
        together = math.fsum(math.log1p(p.get("effect") or 0.0) for p in parts[:-1])
        se = math.hypot(*(math.log1p(p.get("uncertainty") or 0.0) / 2 for p in parts))
        agree = abs(together - math.log1p(total["effect"])) <= max(sigmas * se,
                                                                   math.log1p(FLOOR))
        lines.append(f"{test}: all set back {_pct(total['effect'])}, the factors one by one "
                     f"{_pct(math.expm1(together))} together" + (
                         "" if agree else ": they interact (the whole is not the factors' "
                         "product: measure the pair)"))
    return effects


def judge_why(meta: CheckMeta, ab: KnobAB, measured: tuple[Factor, ...],
              left: tuple[Factor, ...]) -> CheckResult:
    """Each factor's effect, the sum against all set back, what could not be measured."""
    not_back = {p: s for p, s in ab.restored.items() if s != "ok"}
    if not_back:
        return meta.result(Status.FAIL, "a knob --why wrote was NOT restored: " + "; ".join(
            f"{p}: {s} (it was {ab.before.get(p)})" for p, s in not_back.items()),
                           details={"restored": ab.restored, "before": ab.before})
    put_back = (f"; every knob file written is restored ({len(ab.restored)})" if ab.restored
                else "; nothing on the host was written (each factor was set for its own "
                     "llama-bench runs)")
    if ab.error:
        return meta.result(Status.ERROR, f"--why stopped: {ab.error}{put_back}",
                           details={"restored": ab.restored})
    # an arm that runs llama-bench on other CPUs moves other processes' share by itself: its
    # runs are not held to the others' load (a busy loop beside it got 0.5 CPUs, then 1.0)
    moved = {f.arm for f in measured if f.cpus} | ({ALL} if any(f.cpus for f in measured)
                                                   else set())
    left_out = disturbed(dataclasses.replace(ab, runs=tuple(r for r in ab.runs
                                                            if r.arm not in moved)))
    centres = round_centres(ab, left_out)
    failed = sorted({r.arm for r in ab.runs if r.error})
    if failed:
        return meta.result(Status.ERROR, f"llama-bench failed in the arm(s) {', '.join(failed)}"
                           f"{put_back}", details={"failed": failed})
    names = [f.arm for f in measured] + ([ALL] if len(measured) > 1 else [])
    sigmas = family_sigmas(len(names))
    costly: list[str] = []
    lines: list[str] = []
    per_test = {}
    for test, arms in centres.items():
        if NOW in arms and len(arms[NOW]) >= MIN_PAIRS:
            per_test[test] = _test_effects(test, arms, measured, names, sigmas, costly, lines)
    if not per_test:
        why_not = f"; {left_out_words(left_out, 'round')}" if left_out else ""
        return meta.result(Status.SKIP, f"fewer than {MIN_PAIRS} rounds judged: nothing called"
                           f"{why_not}{put_back}", details={"left_out": left_out})
    not_set = [f"{f.line()} ({f.cannot or 'past the budget: not measured'})" for f in left]
    summary = ("; ".join(costly) if costly else
               "no factor set back is measurably faster: none is shown to cost")
    if not_set:
        summary += "; not measured: " + "; ".join(not_set)
    if left_out:
        summary += "; " + left_out_words(left_out, "round")
    summary += put_back
    evidence = (Evidence(CHECK_ID, "omni-host bench --why (interleaved rounds)", tuple(lines)),)
    return meta.result(Status.WARN if costly else Status.PASS, summary, evidence=evidence,
                       details={"factors": [f.line() for f in measured],
                                "not_measured": not_set, "effects": per_test,
                                "costly": costly})
