"""perf.placement (issue 46), pure: the plan's table (``omni-host plan``) and its proof on the
host (``plan --prove``).

* **The plan** ranks the candidates of ``measure.placement`` by predicted generation among
  those that fit, and says the others' shortfall. A prediction is not a measurement: the
  plan's status is pass, its summary names the predicted leader, the current args' place and
  ``--prove``.
* **The proof** runs llama-bench for each proved candidate in rounds (each candidate once a
  round, the order reversed every other round, as ``bench --knob`` runs its arms). Per test,
  the leader is the candidate with the highest median over the rounds; every other one is
  judged against it by ``measure.knob.effect`` on the rounds' pairs (measurable only where
  every round agrees on the sign, past 3 standard errors and 2%, with 4 rounds or more). One
  run's noise is what is left of the arms x rounds table once each round's drift, shared by
  every arm, is taken out (``knob.block_noise``, from three arms up): a drift that slows
  every candidate of a round does not hide a 40% difference that every round shows. A
  difference within that is "no measurable difference", never a winner. The current args
  warn only where the leader measurably beats them; predicted and measured generation are set
  side by side with their rank correlation (Spearman).
"""

from __future__ import annotations

import math
import shlex
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from omni_host import codec
from omni_host.measure.knob import (
    MIN_PAIRS,
    against_leader,
    disturbed,
    left_out_words,
    round_centres,
)
from omni_host.measure.placement import (
    MIB,
    Assessed,
    Candidate,
    PlanItem,
    candidate_of,
    upper_bound,
)
from omni_host.model import CheckResult, Evidence, Status

if TYPE_CHECKING:
    from omni_host.evaluate.meta import CheckMeta
    from omni_host.probes.parsers.bench_run import KnobAB, ServerLoad

CHECK_ID = "perf.placement"
PROOF_ID = "perf.placement-proof"


def _mib(value: float) -> int:
    return round(value / MIB)


@dataclass(frozen=True)
class PlanRow:
    """One candidate as the report keeps it (``perf.placement``'s ``details.plan``, and the
    proof's ``proved``): bytes in MiB, flags shell-quoted (an -ot pattern holds ( | ) that a
    pasted line must keep). A candidate that could not be assessed has ``why_not`` alone."""

    key: str
    placement: str
    origin: str  # plan, current or fit
    llama_bench: str
    llama_server: str
    why_not: str | None = None
    memory_mib: dict[str, dict[str, int]] | None = None  # device -> weights, kv, compute, margin
    fits: bool | None = None
    short_mib: dict[str, int] | None = None  # device -> shortfall, where it does not fit
    predicted_tg: float | None = None
    limit: str | None = None
    gb_per_token: dict[str, float] | None = None
    # where the measured rate is expected: the stated error (measure.placement's Host.ratio)
    predicted_range: tuple[float, ...] | None = None
    # the range holds the model's error alone: a rate it used has one stored run (or two)
    wander_unknown: bool | None = None

    @property
    def ranked(self) -> bool:
        """It fits and has a prediction: a contender."""
        return bool(self.fits) and self.predicted_tg is not None


def row(item: PlanItem) -> PlanRow:
    """One candidate as the report keeps it."""
    cand = candidate_of(item)
    head = PlanRow(cand.key, cand.words, cand.origin, shlex.join(cand.bench_flags()),
                   shlex.join(cand.server_flags()))
    if not isinstance(item, Assessed):
        return replace(head, why_not=item[1])
    return replace(head, memory_mib={d: {k: _mib(v) for k, v in parts.items()}
                                     for d, parts in sorted(item.need.items())},
                   fits=item.fits,
                   short_mib={d: _mib(v) for d, v in item.short.items()} or None,
                   predicted_tg=None if item.tg is None else round(item.tg, 2),
                   limit=item.limit,
                   gb_per_token={d: round(b / 1e9, 3) for d, b in sorted(item.read.items())},
                   predicted_range=None if item.tg_range is None else
                   tuple(round(v, 2) for v in item.tg_range),
                   wander_unknown=True if item.tg_range and not item.wander_known else None)


def rows_of(stored: Any) -> list[PlanRow]:
    """A stored list of rows, typed (a row that does not read is left out: a hand-edited or
    damaged report)."""
    found = []
    for r in stored if isinstance(stored, list) else ():
        try:
            found.append(codec.from_dict(PlanRow, r))
        except codec.FormatError:
            continue
    return found


def stored_rows(rows: list[PlanRow]) -> list[dict[str, Any]]:
    """The rows as the report keeps them (a field without a value left out)."""
    return [{k: v for k, v in codec.document(r).items() if v is not None} for r in rows]


def memory_words(r: PlanRow) -> str:
    """A row's memory per device in GiB (weights, KV cache, compute and margin together)."""
    return ", ".join(f"{device} {sum(slot.values()) / 1024:.1f} GiB"
                     for device, slot in (r.memory_mib or {}).items())


def fit_words(r: PlanRow) -> str:
    """Whether a row fits, or by how much it does not, on which device."""
    return "fits" if r.fits else "does NOT fit (" + ", ".join(
        f"{d} short by {v / 1024:.1f} GiB" + (" of the host's available memory; swap not counted: "
                                              "a model in swap freezes the host, F-022"
                                              if d == "CPU" else "")
        for d, v in (r.short_mib or {}).items()) + ")"


def range_words(r: PlanRow, *, brief: bool = False) -> str:
    """A prediction with its stated error: "12.5 t/s (10.0-14.0)", or "-". ``brief``: where
    the table's head says already how far the rates wander (the range of a row whose wander is
    unknown says only "the model's error only")."""
    if r.predicted_tg is None:
        return "-"
    low_high = r.predicted_range
    if not low_high or len(low_high) != 2:
        return f"{r.predicted_tg:g} t/s"
    caveat = "" if not r.wander_unknown else ", the model's error only" if brief else \
        ", the model's error only: how far its rate wanders between runs is not known yet"
    return f"{r.predicted_tg:g} t/s ({low_high[0]:g}-{low_high[1]:g}{caveat})"


def _line(r: PlanRow) -> str:
    head = f"[{r.origin}] {r.placement}: "
    if r.why_not is not None:
        return head + f"not assessed: {r.why_not}"
    predicted = f"tg {range_words(r)} predicted" if r.predicted_tg is not None \
        else "no prediction"
    return (head + f"{predicted}, limited by {r.limit}; {fit_words(r)}: {memory_words(r)}; "
            f"llama-server {r.llama_server}")


def plan_result(meta: CheckMeta, ranked: list[PlanItem],
                context: dict[str, Any]) -> CheckResult:
    """The plan's table: ``context`` holds the workload, the rates used and their basis."""
    rows = [row(item) for item in ranked]
    fitting = [r for r in rows if r.ranked]
    current = next((r for r in rows if r.origin == "current"), None)
    evidence = (Evidence("bench.llama", "omni-host plan: candidates, predicted",
                         tuple(_line(r) for r in rows)),)
    details = {"plan": stored_rows(rows), **context}
    if not fitting:
        no_rate = any("no read rate known for CPU" in str(r.limit) for r in rows)
        return meta.result(Status.WARN, "no candidate both fits and has a prediction" + (
            ": the rate the CPU reads weights at is unknown (omni-host bench with -ngl 0 in "
            "omni_bench.args measures it; omni-host plan --prove measures the candidates)"
            if no_rate else ""), evidence=evidence, details=details)
    best = fitting[0]
    summary = (f"predicted fastest: {best.placement} at tg {range_words(best)} "
               f"(llama-server {best.llama_server})")
    if current is not None and current is not best:
        if current.predicted_tg and current.fits and best.predicted_tg:
            summary += (f"; the current args are predicted at {current.predicted_tg:g} t/s "
                        f"({best.predicted_tg / current.predicted_tg - 1:+.0%} for the "
                        "fastest)")
        elif current.fits is False:
            summary += "; the current args do not fit at this context"
    summary += "; a prediction, not a measurement: omni-host plan --prove measures them here"
    return meta.result(Status.PASS, summary, evidence=evidence, details=details)


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Rank correlation (average ranks for ties); None under 3 pairs or without spread."""
    if len(xs) < 3 or len(xs) != len(ys):
        return None

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sx = sum((a - mx) ** 2 for a in rx) ** 0.5
    sy = sum((b - my) ** 2 for b in ry) ** 0.5
    if not sx or not sy:
        return None
    return float(sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True)) / (sx * sy))


def _judge_test(test: str, arms: dict[str, dict[int, float]],
                by_key: dict[str, PlanRow]) -> dict[str, Any]:
    """One test of the proof: its leader (the highest median over the rounds), every other
    candidate against it on the rounds' pairs, with the rounds' drift taken out of the noise,
    and (generation) Spearman of predicted against measured."""
    leader, table, noise = against_leader(arms)
    entry: dict[str, Any] = {"leader": leader, "arms": table,
                             "run_noise": None if noise is None else round(math.expm1(noise), 4)}
    if test.startswith("tg"):
        known = [(p, v["median_ts"]) for a, v in table.items()
                 if a in by_key and (p := by_key[a].predicted_tg) is not None]
        rho = spearman([p for p, _ in known], [m for _, m in known])
        entry["spearman"] = None if rho is None else round(rho, 3)
        entry["within_stated_error"] = {
            a: bool(r[0] <= v["median_ts"] <= r[1]) for a, v in table.items()
            if a in by_key and len(r := by_key[a].predicted_range or ()) == 2}
    return entry


def _error_words(entry: dict[str, Any], by_key: dict[str, PlanRow]) -> str:
    """Whether each proved prediction's measured median fell within its stated error."""
    within = entry.get("within_stated_error") or {}
    if not within:
        return ""
    out = [a for a, ok in within.items() if not ok]
    words = f"; {len(within) - len(out)} of {len(within)} measured within the plan's stated error"
    return words + ("" if not out else " (outside it: " + ", ".join(
        f"{a} {entry['arms'][a]['median_ts']:.2f} against {range_words(by_key[a], brief=True)}"
        for a in out) + ")")


def _gain(table: dict[str, Any], leader: str, other: str | None) -> dict[str, Any] | None:
    """What the leader gains over ``other`` (the current args, --fit's answer) on the rounds'
    pairs: ``gain`` (the leader's rate over the other's, less one), its uncertainty and
    whether it is beyond the noise; None where ``other`` was not measured."""
    if other is None or other not in table:
        return None
    if other == leader:
        return {"leader": True}
    beat = table[other]["against_leader"]
    if "effect" not in beat:
        return {"pairs": beat.get("pairs", 0), "measurable": False}
    return {"gain": round(1 / (1 + beat["effect"]) - 1, 4), "uncertainty": beat["uncertainty"],
            "pairs": beat["pairs"], "measurable": bool(beat.get("measurable"))}


def _gain_words(gain: dict[str, Any] | None, what: str, verb: str) -> str:
    if gain is None:
        return ""
    if gain.get("leader"):
        return f"; {what} {verb} the fastest measured"
    if "gain" not in gain:
        return f"; {what} shared no round with it"
    if gain["pairs"] < MIN_PAIRS:  # one or two ratios: no noise to judge them by
        return (f"; it ran {gain['gain']:+.0%} against {what} in {gain['pairs']} round(s), "
                f"too few to call")
    if gain["measurable"] and gain["gain"] > 0:
        return (f"; it beats {what} by {gain['gain']:.0%} (±{gain['uncertainty']:.0%}, "
                f"{gain['pairs']} rounds)")
    if gain["measurable"]:  # the higher median, yet slower round by round
        return (f"; {what} {verb} faster than it round by round ({-gain['gain']:.0%} "
                f"±{gain['uncertainty']:.0%}, {gain['pairs']} rounds)")
    return (f"; {what} {verb} within the noise of it ({gain['gain']:+.1%} "
            f"±{gain['uncertainty']:.1%}, {gain['pairs']} rounds)")


TOO_FEW = "too few rounds to tell"


def verdict(against: dict[str, Any]) -> str:
    """A candidate against the proof's leader on the rounds both ran: "measurable", "within
    the noise", or (fewer than MIN_PAIRS rounds: no noise to judge them by) TOO_FEW."""
    if against.get("measurable"):
        return "measurable"
    return TOO_FEW if against.get("pairs", 0) < MIN_PAIRS else "within the noise"


def _test_line(test: str, entry: dict[str, Any], by_key: dict[str, PlanRow],
               current: str | None, fit: str | None = None) -> tuple[str, bool]:
    """A test's verdict in words, and whether the leader measurably beats the current args;
    the leader's gain over the current args and over --fit's answer kept in ``entry``."""
    leader, table = entry["leader"], entry["arms"]
    said = {a: verdict(v["against_leader"]) for a, v in table.items() if a != leader}
    few = [a for a, v in said.items() if v == TOO_FEW]
    tied = [a for a, v in said.items() if v == "within the noise"]
    line = f"{test}: fastest {by_key[leader].placement if leader in by_key else leader} at " \
           f"{table[leader]['median_ts']:.2f} t/s"
    if tied or few:
        line += " (" + "; ".join(
            ([f"no measurable difference from {', '.join(tied)}"] if tied else [])
            + ([f"too few rounds beside it to tell: {', '.join(few)}"] if few else [])) + ")"
    gains = {k: g for k, g in (("over_current", _gain(table, leader, current)),
                               ("over_fit", _gain(table, leader, fit))) if g is not None}
    if gains:
        entry["gain"] = gains
    over = gains.get("over_current") or {}
    beaten = bool(over.get("measurable")) and over.get("gain", 0) > 0
    line += _gain_words(gains.get("over_current"), "the current args", "are")
    line += _gain_words(gains.get("over_fit"), "--fit's answer", "is")
    if entry.get("spearman") is not None:
        line += f"; predicted and measured order agree at Spearman {entry['spearman']:.2f}"
    return line + _error_words(entry, by_key), beaten


LOAD_WITHIN_MIB = 256  # how near the plan's figure free memory after loading is said to be


def _free_after(r: PlanRow, load: ServerLoad, context: dict[str, Any]
                ) -> dict[str, tuple[int, int]]:
    """GPU<n> -> (the plan's figure of its free memory once ``r`` is loaded, what NVML read
    with the server loaded), MiB: the free memory the plan fitted to less what it said the
    placement takes there (weights, KV cache, compute; its margin is what stays free)."""
    free = context.get("gpus_free_mib") or []
    index = context.get("gpus_nvml_index") or []
    read = dict(load.free)
    out = {}
    for i, before in enumerate(free):
        need = (r.memory_mib or {}).get(f"GPU{i}") or {}
        nvml = index[i] if i < len(index) else None
        if isinstance(before, int) and isinstance(nvml, int) and nvml in read:
            planned = before - sum(v for k, v in need.items() if k != "margin")
            out[f"GPU{i}"] = (planned, round(read[nvml] / 2**20))
    return out


def _loads(proved: list[PlanRow], ab: KnobAB, context: dict[str, Any]
           ) -> tuple[list[str], dict[str, Any], bool]:
    """Each proved placement as a real llama-server loaded it: the words, the details, and
    whether one the plan called fitting did not load."""
    untried = next((load.error for load in ab.loads.values() if not load.tried), None)
    if untried is not None:
        return [f"the placements were not loaded as llama-server: {untried}"], {}, False
    loads = {r.key: (r, ab.loads[r.key]) for r in proved if r.key in ab.loads}
    if not loads:
        return [], {}, False
    ctx = (context.get("workload") or {}).get("ctx")
    details: dict[str, Any] = {}
    dropped: list[str] = []
    unfit: list[str] = []
    near, far = 0, []
    for key, (r, load) in loads.items():
        gpus = _free_after(r, load, context) if load.loaded else {}
        details[key] = {"loaded": load.loaded, "seconds": load.seconds, "error": load.error,
                        "planned_free_after_mib": {g: p for g, (p, _) in gpus.items()},
                        "free_after_mib": {g: m for g, (_, m) in gpus.items()}}
        if not load.loaded:
            (dropped if r.fits else unfit).append(f"{key} ({load.error})")
            continue
        worst = max(gpus.items(), key=lambda g: abs(g[1][1] - g[1][0]), default=None)
        if worst is None:
            continue
        gpu, (planned, measured) = worst
        if abs(measured - planned) <= LOAD_WITHIN_MIB:
            near += 1
        else:
            far.append(f"{key} {gpu} {measured:,} MiB free against the plan's {planned:,}")
    words = []
    if dropped:
        words.append(f"{len(dropped)} of {sum(r.fits is True for r, _ in loads.values())} "
                     f"placement(s) the plan called fitting did not load as llama-server at "
                     f"-c {ctx}, not benched: " + "; ".join(dropped))
    if unfit:
        words.append("not loaded, as the plan's margin said: " + "; ".join(unfit))
    measured_any = near + len(far)
    if measured_any:
        words.append(f"free GPU memory with the server loaded within {LOAD_WITHIN_MIB} MiB of "
                     f"the plan's figure for {near} of {measured_any} placement(s)"
                     + (" (" + "; ".join(far) + ")" if far else ""))
    elif len(dropped) + len(unfit) < len(loads):
        words.append(f"{len(loads) - len(dropped) - len(unfit)} placement(s) loaded as "
                     f"llama-server at -c {ctx} (no GPU memory read to set beside the plan's)")
    return words, details, bool(dropped)


def prove_result(meta: CheckMeta, proved: list[PlanRow], ab: KnobAB,
                 context: dict[str, Any]) -> CheckResult:
    """The proof: ``proved`` the plan's rows that ran (their ``key`` is the arm's name); each
    loaded once as a real llama-server first, where the helper could (``ab.loads``)."""
    failed = [f"{r.arm} (round {r.pair}): {r.error}" for r in ab.runs if r.error]
    by_key = {r.key: r for r in proved}
    load_words, load_details, not_loaded = _loads(proved, ab, context)
    evidence_lines = [f"{r.arm} round {r.pair}: " + (
        ", ".join(f"{t.name} {t.estimate.center_ts:.2f} t/s" for t in r.result.tests)
        if r.result else f"failed: {r.error}") for r in ab.runs]
    loaded = [f"{key}: " + (f"loaded as llama-server in {load.seconds} s" if load.loaded
                            else f"did not load: {load.error}") for key, load in ab.loads.items()]
    evidence = (Evidence("bench.llama", "omni-host plan --prove: llama-bench per candidate, "
                         "in rounds", tuple(evidence_lines[-60:])),
                *((Evidence("bench.llama", "omni-host plan --prove: each candidate loaded "
                            "once as llama-server, before the rounds", tuple(loaded[:20])),)
                  if loaded else ()))
    left_out = disturbed(ab)
    centres = round_centres(ab, left_out)
    current = next((r.key for r in proved if r.origin == "current"), None)
    fit = next((r.key for r in proved if r.origin == "fit"), None)
    tests = {test: _judge_test(test, arms, by_key) for test, arms in centres.items()}
    lines = [_test_line(test, entry, by_key, current, fit) for test, entry in tests.items()]
    if not tests:
        why = load_words + failed[:3] + ([left_out_words(left_out, "round")] if left_out else [])
        return meta.result(Status.ERROR, "the proof measured nothing: " + "; ".join(why)
                           if why else "the proof measured nothing", evidence=evidence,
                           details={"proof": {}, **context,
                                    **({"loads": load_details} if load_details else {})})
    status = Status.WARN if any(beaten for _, beaten in lines) or failed or ab.error \
        or not_loaded else Status.PASS
    summary = "; ".join([line for line, _ in lines] + load_words)
    if failed:
        summary += f"; {len(failed)} run(s) failed: {failed[0]}"
    if ab.error:
        summary += f"; the proof stopped: {ab.error}"
    if left_out:
        summary += "; " + left_out_words(left_out, "round")
    summary += _budget_words(ab)
    most = max((len(v) for t in centres.values() for v in t.values()), default=0)
    if most < MIN_PAIRS:
        summary += f"; {most} round(s): under {MIN_PAIRS}, no difference is called measurable"
    return meta.result(status, summary, evidence=evidence,
                       details={"proof": tests, "proved": stored_rows(proved), **context,
                                **({"loads": load_details} if load_details else {}),
                                **({"disturbed_rounds": {str(p): h for p, h in left_out.items()}}
                                   if left_out else {})})


def _budget_words(ab: KnobAB) -> str:
    """What the proof's time budget cut: the candidates that left the rounds, the rounds
    the kept ones ran, and (where it left fewer than the rounds that call a difference) the
    budget those rounds need at the pace the runs went."""
    words = ""
    if ab.shed:
        words += "; to keep the budget, " + ", ".join(
            f"{arm} ran {n} round(s)" for arm, n in ab.shed.items())
    if ab.stopped_after is not None:
        words += (f"; the budget ({ab.budget_s:g} s) held {ab.stopped_after} round(s)"
                  if ab.budget_s is not None else
                  f"; the budget held {ab.stopped_after} round(s)")
    need = budget_needed(ab)
    if need is not None and (ab.shed or ab.stopped_after is not None):
        words += (f"; {MIN_PAIRS} rounds of {', '.join(need[1])} need about "
                  f"{math.ceil(need[0] / 60)}m at this pace (--budget)")
    return words


def budget_needed(ab: KnobAB, rounds: int = MIN_PAIRS) -> tuple[float, list[str]] | None:
    """The seconds a proof of ``rounds`` rounds needs at the pace its runs went (each
    candidate's last run): every candidate in the first round, those the budget did not shed
    in every round after it, the loads before; and those candidates. None where no run said
    how long it took."""
    timed = [r for r in ab.runs if r.seconds is not None]
    if not timed:
        return None
    kept = [a for a in dict.fromkeys(r.arm for r in timed) if a not in ab.shed]
    first = sum(r.seconds or 0.0 for r in timed if r.pair == 0)
    pace = {r.arm: r.seconds or 0.0 for r in timed}  # each arm's last run
    loads = sum(load.seconds or 0.0 for load in ab.loads.values())
    return loads + first + (rounds - 1) * sum(pace[a] for a in kept), kept


def _words(flags: str) -> tuple[str, ...]:
    """A stored flags line as argv: shell-quoted since issue 46's first plans, split on spaces
    before (their -ot patterns were printed bare)."""
    try:
        return tuple(shlex.split(flags))
    except ValueError:
        return tuple(flags.split())


def _tg_proof(proof: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored proof's generation test (its leader and arms), None without one."""
    tests = (proof or {}).get("proof") or {}
    return next((e for name, e in tests.items() if str(name).startswith("tg")
                 and isinstance(e, dict)), None) if isinstance(tests, dict) else None


def _placement_key(cand: Candidate, layers: int) -> tuple[Any, ...]:
    """What decides where tensors lie (threads apart): ``-ngl`` past the model's layers (the
    output layer counted) is every layer, ``-ncmoe`` past them every layer's experts."""
    return (min(cand.ngl, layers), min(cand.ncmoe, layers), cand.split, cand.mode, cand.main,
            cand.overrides)


def _fit_at_start(best: PlanRow, rows: list[PlanRow],
                  held: tuple[tuple[str, int], ...] | None) -> str:
    """The advice for a server llama.cpp's --fit placed at its start (no -ngl given): what it
    holds on each GPU beside what the plan's --fit answer needed."""
    fit = next((r for r in rows if r.origin == "fit"), None)
    holds = ", ".join(f"{mib / 1024:.1f} GiB on {gpu[:12]}" for gpu, mib in held or ())
    planned = ", ".join(f"{d} {sum(v.values()) / 1024:.1f}" for d, v in
                        (fit.memory_mib or {}).items() if d.startswith("GPU")) if fit else ""
    read = (f"it holds {holds}" if holds else "what it holds on the GPUs was not read") + \
        (f"; the plan's --fit answer needed {planned} GiB (its margin included)"
         if planned else "")
    return (f": serve with {best.llama_server} (this server was placed by llama.cpp's --fit "
            f"at its start, no -ngl given: {read})")


def served_against_plan(server_argv: tuple[str, ...], plan_id: str, plan: dict[str, Any],
                        proof: dict[str, Any] | None,
                        held: tuple[tuple[str, int], ...] | None = None
                        ) -> tuple[str, dict[str, Any]] | None:
    """A running server's placement (its argv) beside the host's stored plan for the same
    model: the plan's winner (the proof's measured leader, else the predicted leader), and the
    gain predicted for this server's placement where the plan assessed it. A server that
    ``--fit`` placed is read by what it holds on each GPU (``held``: GPU UUID, MiB), set
    beside the plan's ``--fit`` answer. None where the server's argv cannot be read as a
    placement."""
    from omni_host.measure.ceiling import ALL_LAYERS
    from omni_host.measure.placement import FIT_DECIDES, from_args

    own = from_args(server_argv, "server", "", "server", server=True)
    if isinstance(own, str):
        return None
    layers = int(plan.get("n_layers") or ALL_LAYERS)  # a plan stored before it said its layers
    rows = rows_of(plan.get("plan"))
    theirs: dict[tuple[Any, ...], PlanRow] = {}
    for r in rows:
        cand = from_args(_words(r.llama_server), "", "", "", server=True)
        if not isinstance(cand, str):
            theirs.setdefault(_placement_key(cand, layers), r)
    mine = theirs.get(_placement_key(own, layers))
    tg = _tg_proof(proof)
    leader_key = tg.get("leader") if tg else None
    measured = ((tg.get("arms") or {}).get(leader_key) or {}).get("median_ts") if tg else None
    best = next((r for r in rows if r.key == leader_key), None) if leader_key else \
        next((r for r in rows if r.ranked), None)
    if best is None:
        return None
    said = (f"the stored plan {plan_id} " + (f"measured {best.placement} fastest "
                                              f"({measured:g} t/s)" if measured is not None else
                                              f"predicts {best.placement} fastest "
                                              f"({best.predicted_tg} t/s)"))
    details: dict[str, Any] = {"plan": plan_id, "winner": best.llama_server,
                               "winner_measured_tg": measured,
                               "winner_predicted_tg": best.predicted_tg}
    if not any(a in FIT_DECIDES for a in server_argv):
        return said + _fit_at_start(best, rows, held), \
            details | {"fit_at_start": True, "held_mib": dict(held or ())}
    if mine is not None and mine is best:
        return said + "; this server runs that placement", details | {"same": True}
    if mine is not None and mine.predicted_tg and best.predicted_tg:
        gain = best.predicted_tg / mine.predicted_tg - 1
        details["predicted_gain"] = round(gain, 3)
        return (said + f"; it is predicted {gain:.0%} faster than this server's placement "
                f"({mine.placement}): serve with {best.llama_server}"
                if gain > 0 else said + "; this server's placement is predicted as fast"), details
    return (said + f": serve with {best.llama_server} (this server's placement is not among "
            "the plan's candidates: omni-host plan with its args in omni_bench.args predicts "
            "it)"), details


def measured_here(plan_id: str, plan: dict[str, Any], proof: dict[str, Any] | None) -> str | None:
    """The stored proof's generation verdict in one clause, for gpu.topology's advice on a
    host of several GPUs ("measured here (plan P): X fastest at N t/s, within the noise: Y");
    None without a proof or with one GPU."""
    tg = _tg_proof(proof)
    if tg is None or len(plan.get("gpus_free_mib") or ()) < 2:
        return None
    words = {r.key: r.placement for r in rows_of((proof or {}).get("proved"))}
    arms = tg.get("arms") or {}
    leader = str(tg.get("leader"))
    tied = [str(words.get(a, a)) for a, v in arms.items() if a != leader
            and not (v.get("against_leader") or {}).get("measurable")]
    line = (f"measured here (plan {plan_id}): {words.get(leader, leader)} fastest at "
            f"{(arms.get(leader) or {}).get('median_ts')} t/s")
    return line + (f", within the noise: {', '.join(tied)}" if tied else "")


def measured_over_predicted(proof: dict[str, Any] | None) -> list[float]:
    """A stored proof's generation ratios, measured median / predicted, one per proved
    placement that had a prediction, not an upper bound (the plan's stated error is learned
    from them)."""
    tg = _tg_proof(proof)
    predicted = {r.key: r.predicted_tg for r in rows_of((proof or {}).get("proved"))
                 if not upper_bound(r.limit)}
    out = []
    for arm, v in ((tg or {}).get("arms") or {}).items():
        p, m = predicted.get(arm), v.get("median_ts") if isinstance(v, dict) else None
        if isinstance(p, (int, float)) and p > 0 and isinstance(m, (int, float)) and m > 0:
            out.append(float(m) / float(p))
    return out
