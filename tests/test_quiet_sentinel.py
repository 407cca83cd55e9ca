"""A Sentinel that speaks only when it should (issue 44): quiet on an unchanged host, the cause
first when something changed, every test judged at the resolution its baseline has.

Replayed from a lent H100 (tests/fixtures/captures/bench-h100-quiet, see PROVENANCE.md): the
stored bundles of ``omni-host bench`` run as an operator runs it (benchmarks/quiet_gpu.sh), 31
unchanged runs of the documented config, 6 of partial offload, and 20 under a competing GPU
load that starts after the idle gate. Each is judged again by the bench use case against a
fresh store in the order it ran; a run whose verdict does not pass takes the next stored run
as its second run, as ``omni-host bench`` now measures once more before it warns.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import statistics
import tarfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_host.app.audit import Hosts, finish, judge_plan, keep
from omni_host.app.bench import first_of, judge_bench
from omni_host.collect.bundle import read_bundles
from omni_host.measure.bench import comma_split
from omni_host.measure.series import judge_test, modes, slide
from omni_host.measure.settle import settle, worst_first
from omni_host.measure.twins import gpu_twins, twins
from omni_host.model import Bundle, CheckResult, Status
from omni_host.outcome import BenchOutcome, FirstRun, JudgedTest
from omni_host.plan.policy import policy_from_vars
from omni_host.report.history import load_history

QUIET = Path(__file__).parent / "fixtures" / "captures" / "bench-h100-quiet"


def _bundles(name: str, tmp_path: Path) -> list[Bundle]:
    with tarfile.open(QUIET / f"{name}.stores.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return [read_bundles(audit / "bundles")[0]
            for audit in sorted(p for p in (tmp_path / name).iterdir() if p.is_dir())]


def _replay(bundles: list[Bundle], store: Path, *, second: bool = True
            ) -> tuple[list[CheckResult], int]:
    """Each bench of the series as ``omni-host bench`` judges it, stored in turn; (the verdicts
    after the baseline, how many second runs were taken)."""
    verdicts, seconds, i = [], 0, 0
    while i < len(bundles):
        plan = judge_plan(bundles[i], None, "replay")
        done = judge_bench(bundles[i], plan, load_history(store), record=False)
        first = first_of(done) if second else None
        if first is not None and i + 1 < len(bundles):
            i, seconds = i + 1, seconds + 1
            done = judge_bench(bundles[i], plan, load_history(store), record=False, first=first)
        keep(finish(Hosts([done.report], "bench", time.time()), inventory=None, waivers=(),
                    history=None), store)
        verdicts.append(next(r for r in done.report.results if r.id == "perf.tokens-per-s"))
        i += 1
    assert verdicts[0].details["recorded_baseline"] is True
    return verdicts[1:], seconds


def _tally(verdicts: list[CheckResult]) -> collections.Counter[str]:
    return collections.Counter(v.status.value for v in verdicts)


def test_thirty_unchanged_h100_runs_are_quiet(tmp_path: Path) -> None:
    """The documented config on one H100, nothing changed: pp512's centers spread ±7% between
    runs (61k to 87k t/s), so it is judged at that resolution and says so; a run that
    scattered is measured once more. Judged one run at a time, 5 of 30 warned (4 "this run
    scattered", one tg128 6% below its runs' median): the second run settles each. Since a slowed
    run's spread counts at its own level (stop 69), one of them fails alone: its pp512
    repetitions fell to 19k-52k t/s (median 61% below its runs', 4.6 standard errors): that
    run really ran slow, and one run cannot tell a passing disturbance from the host, so a
    second run is measured before anything is said, and it passes."""
    bundles = _bundles("unchanged", tmp_path)
    assert len(bundles) == 31
    alone, _ = _replay(bundles, tmp_path / "alone", second=False)
    fails = [v for v in alone if v.status is Status.FAIL]
    assert len(fails) == 1 and fails[0].details["verdicts"]["pp512"]["drop"] > 0.5
    assert 1 <= _tally(alone)["warn"] <= 4
    verdicts, seconds = _replay(bundles, tmp_path / "store")
    tally = _tally(verdicts)
    assert tally["fail"] == 0 and tally["warn"] <= 1, [v.summary for v in verdicts]
    assert seconds <= 4  # the cost: a second run for a run in eight, at most
    pp = [v.details["verdicts"]["pp512"] for v in verdicts]
    assert all(p["detectable"] > 0.05 for p in pp[-10:])  # said: judged at its resolution
    assert all("judged at its resolution" in v.summary for v in verdicts[-10:])
    assert not any("a step:" in v.summary for v in alone + verdicts)  # issue 67: none named


def test_thirty_unchanged_h100_runs_watched_through_nvml_are_quiet(tmp_path: Path) -> None:
    """The same 30 unchanged runs on another lent H100 a day later, each run watched through
    the helper's NVML session (every 0.25 s, the PCIe link sampled): live, every one passed.
    Replayed, they stay quiet: the link the samples saw is the same in every run (no change to
    name), and tg128's two clusters are judged as modes."""
    bundles = _bundles("unchanged-nvml", tmp_path)
    assert len(bundles) == 31
    docs = [json.loads(b.results["bench.llama"].stdout) for b in bundles]
    assert {d["during"]["sampled_with"] for d in docs} == {"NVML"}
    verdicts, seconds = _replay(bundles, tmp_path / "store")
    tally = _tally(verdicts)
    assert tally["fail"] == 0 and tally["warn"] <= 1, [v.summary for v in verdicts]
    assert seconds <= 4
    assert {v.details["context"]["gpu.0.pcie"] for v in verdicts} == {"gen5 x16"}
    assert all(v.details["changed"] == [] for v in verdicts if v.status is Status.PASS)


def test_partial_offload_runs_are_quiet(tmp_path: Path) -> None:
    verdicts, _ = _replay(_bundles("offload", tmp_path), tmp_path / "store")
    tally = _tally(verdicts)
    assert tally["fail"] == 0 and tally["warn"] <= 1, [v.summary for v in verdicts]


def test_a_gpu_co_tenant_is_named_first_in_every_run(tmp_path: Path) -> None:
    """A duty-cycled load on the GPU, its CUDA context started after the idle gate (it cost
    tg128 5.3% by hand at duty 0.1 and pp512 16% at 0.45: calibration-duty-cycled-load.json):
    every run's verdict opens with the process, by the pid the helper sampled, never a pass."""
    bundles = _bundles("drops", tmp_path)
    assert len(bundles) == 21
    verdicts, _ = _replay(bundles, tmp_path / "store", second=False)
    for bundle, verdict in zip(bundles[1:], verdicts, strict=True):
        doc = json.loads(bundle.results["bench.llama"].stdout)
        (process,) = doc["during"]["other_gpu_processes"]  # the load, as sampled during the run
        assert verdict.summary.startswith(f"since the baseline: other processes on the GPUs: "
                                          f"none -> {process}"), verdict.summary
        assert verdict.status is not Status.PASS
    calibration = json.loads((QUIET / "calibration-duty-cycled-load.json").read_text())
    alone = sum(calibration["tg128"]["alone"]) / 2
    assert 0.05 <= 1 - calibration["tg128"]["0.1"] / alone <= 0.06  # the 5-6% tg load


def _reps(center: float) -> list[float]:
    """Five repetitions around ``center``, the first at half speed (llama-bench's warm-up)."""
    return [center * 0.5] + [center * x for x in (1.0, 1.002, 0.998, 1.001)]


def test_a_run_is_judged_from_the_nearest_of_its_modes() -> None:
    """pp512 of two H100s clustered near 77k and 86k t/s between unchanged runs (issue 44):
    alternating runs form two modes; a run in either passes, one below the lowest is the drop."""
    runs = [77.0, 86.0, 77.5, 85.5, 86.2, 76.8, 85.9, 77.2]
    assert [sorted(g) for g in modes(runs)] == [[0, 2, 5, 7], [1, 3, 4, 6]]
    for center in (77.3, 86.1, 81.0):
        verdict = judge_test("pp512", _reps(77.0), _reps(center), 5, runs)
        assert verdict.status is Status.PASS and len(verdict.modes) == 2, verdict.line()
    low = judge_test("pp512", _reps(77.0), _reps(70.0), 5, runs)
    assert low.status is Status.WARN and low.drop == pytest.approx(1 - 70 / 77.1, abs=0.005)
    assert "cluster in 2 modes (77.1, 86.0 t/s)" in low.line()
    assert modes([72.3, 71.7, 74.6, 74.5, 76.0]) == [[1, 0, 3, 2, 4]]  # too few runs: one


def test_a_step_down_or_a_slide_is_a_drift_never_a_mode_nor_noise() -> None:
    step = [100.0, 100.5, 99.5, 100.2, 100.1, 90.0, 90.5, 89.8]
    stepped = judge_test("tg", _reps(100), _reps(90), 5, step)
    assert stepped.status is not Status.PASS and stepped.modes == ()
    assert stepped.drift == pytest.approx(0.10, abs=0.005) and "never learned" in stepped.line()
    assert slide([100.0, 98, 96, 94, 92]) == pytest.approx(0.08)
    assert slide([100.0, 98, 101, 99, 100]) is None
    slid = judge_test("tg", _reps(100), _reps(91), 5, [100.0, 98, 96, 94, 92])
    assert slid.status is not Status.PASS  # the slide did not widen its own line


def test_a_drop_must_show_in_both_runs_and_a_scattered_run_is_settled_by_a_steadier() -> None:
    def v(status: str, drop: float, dropped: bool) -> JudgedTest:
        return JudgedTest(Status(status), drop, line=f"{status} {drop}", dropped=dropped)

    first = FirstRun({"pp512": v("warn", 0.02, False), "tg128": v("warn", 0.08, True)})
    now = {"pp512": v("pass", 0.01, False), "tg128": v("warn", 0.07, True)}
    settled = settle(now, first)
    assert [v.status for v in worst_first(settled)] == [Status.WARN, Status.PASS]
    assert settled["tg128"].line == "warn 0.07 (the second of two runs)"
    assert settled["pp512"].line == "pass 0.01 (the second of two runs)"
    assert settled["pp512"].run == settled["tg128"].run == "second"
    # the better of two decides, and the stored verdict is that one (issue 63: the plot drew
    # the second run failing while the summary quoted the first)
    kept = settle({"tg128": v("fail", 0.3, True)}, FirstRun({"tg128": v("warn", 0.1, True)}))
    assert kept["tg128"].status is Status.WARN and kept["tg128"].run == "first"
    assert kept["tg128"].line == "warn 0.1 (the first of two runs)"
    assert settle({"tg128": v("pass", 0.0, False)}, None)["tg128"].run is None


def test_tolerance_by_test_kind() -> None:
    spec = policy_from_vars({"omni_bench": {"llama_bench": "/b", "model": "/m",
                                            "tolerance_pct": {"pp": 12, "tg": 4}}}, "t").bench
    assert (spec.tolerance_for("pp"), spec.tolerance_for("tg"), spec.tolerance_for("pg")) == \
        (12.0, 4.0, 5.0)
    base, now = _reps(100.0), _reps(94.0)
    assert judge_test("pp512", base, now, spec.tolerance_for("pp")).status is Status.PASS
    assert judge_test("tg128", base, now, spec.tolerance_for("tg")).status is Status.WARN
    with pytest.raises(Exception, match="'px' is not a test kind"):
        policy_from_vars({"omni_bench": {"llama_bench": "/b", "model": "/m",
                                         "tolerance_pct": {"px": 3}}}, "t")


def test_a_comma_split_is_named_as_two_configurations() -> None:
    said = comma_split(["/bin/llama-bench", "-m", "/m", "-ts", "75,25", "-ngl", "99"])
    assert said is not None and "-ts 75,25 made llama-bench measure 2 configurations" in said
    assert "(-ts 75/25)" in said and "llama-server with ','" in said
    assert comma_split(["-ts", "75/25"]) is None and comma_split(["-ts", "1/0,0/1"]) is None
    assert "--tensor-split 3,1 made" in comma_split(["--tensor-split=3,1"])


def test_another_gpu_than_the_baselines_is_named(tmp_path: Path) -> None:
    """A baseline of one lent H100 (bench-h100-trust, 2026-11-24) and a run of the same
    config on another (bench-h100-quiet, 2026-11-26): the card is named before anything else."""
    (base,) = read_bundles(QUIET.parent / "bench-h100-trust" / "baseline.bundle.tar.gz")
    other = _bundles("unchanged", tmp_path)[1]
    was, now = (json.loads(b.results["bench.llama"].stdout)["context"]["gpus"]["rows"][0]["uuid"]
                for b in (base, other))
    assert was != now
    store = tmp_path / "store"
    first, _ = _replay([base, other], store, second=False)
    (verdict,) = first
    assert f"GPU0 UUID: {was} -> {now}" in verdict.summary
    assert verdict.status is not Status.PASS


def test_thirty_unchanged_runs_on_two_h100s_are_quiet_and_each_change_is_named(
        tmp_path: Path) -> None:
    """The documented config over two lent H100s (a layer split by free memory), where 28 of
    30 unchanged runs warned before this issue; then GGML_CUDA_DISABLE_GRAPHS=1,
    CUDA_VISIBLE_DEVICES=0 and -ts 75,25, one run each, as omni-host bench judged them."""
    bundles = _bundles("two", tmp_path)
    assert len(bundles) == 34
    store = tmp_path / "store"
    plan = judge_plan(bundles[0], None, "replay")
    base = judge_bench(bundles[0], plan, load_history(store), record=True).report
    perf = next(r for r in base.results if r.id == "perf.tokens-per-s")
    # the resolution is said once, when the baseline is recorded: pp512's repetitions ±5.1%
    assert "its repetitions' spread resolves pp512 to drops past 15%" in perf.summary
    verdicts, seconds = _replay(bundles[:31], store)
    tally = _tally(verdicts)
    assert tally["fail"] == 0 and tally["warn"] <= 1, [v.summary for v in verdicts]
    assert seconds <= 5
    said = [next(r for r in judge_bench(b, plan, load_history(store), record=False)
                 .report.results if r.id == "perf.tokens-per-s") for b in bundles[31:]]
    graphs, visible, comma = said
    assert graphs.summary.startswith("since the baseline: env GGML_CUDA_DISABLE_GRAPHS: unset -> 1")
    assert graphs.status is not Status.PASS
    assert visible.summary.startswith("since the baseline: env CUDA_VISIBLE_DEVICES: unset -> 0")
    assert list(visible.details["ceiling"]["tg128"]["devices"]) == ["GPU0"]  # the one it saw
    assert sorted(said[0].details["ceiling"]["tg128"]["devices"]) == ["GPU0", "GPU1"]
    assert comma.status is Status.WARN and comma.summary.startswith("not comparable")
    assert "-ts 75,25 made llama-bench measure 2 configurations" in comma.summary


def test_a_steady_co_tenant_drop_is_called_with_its_cause_first(tmp_path: Path) -> None:
    """The calibrated tg128 load already running through each bench (started 6 s before,
    forced past the gate: a job that was there first), 10 runs at duty 0.08 (7.1% by hand)
    and 10 at 0.065 (3.8% and 6.2% by hand: calibration-steady.json). Every run names the
    process first and calls tg128 below its baseline past what the baseline resolves; none
    passes."""
    bundles = _bundles("steady", tmp_path)
    assert len(bundles) == 21
    verdicts, _ = _replay(bundles, tmp_path / "store", second=False)
    called = 0
    for bundle, verdict in zip(bundles[1:], verdicts, strict=True):
        doc = json.loads(bundle.results["bench.llama"].stdout)
        (process,) = doc["during"]["other_gpu_processes"]
        assert verdict.summary.startswith(f"since the baseline: other processes on the GPUs: "
                                          f"none -> {process}"), verdict.summary
        assert verdict.status is not Status.PASS
        tg = verdict.details["verdicts"]["tg128"]
        called += 0.05 <= tg["drop"] <= 0.08 and tg["drop"] > tg["detectable"]
    assert called == 20
    calibration = json.loads((QUIET / "calibration-steady.json").read_text())
    alone = sum(calibration["tg128"]["alone"]) / 2
    assert 0.065 <= 1 - calibration["tg128"]["0.08"] / alone <= 0.075


def test_the_html_plots_the_rate_the_verdict_judged(tmp_path: Path) -> None:
    """Issue 63: a host page plotted the second llama-bench run (8.77 t/s, marked failing)
    while its verdict quoted the first (17.7 t/s, warn). Two runs of the lent H100: the first
    (run 12: tg128 warned, pp512 passed at 72781 t/s), the second (run 15: pp512 fell to 30679
    t/s). pp512 is decided by the first, and the page's latest pp512 point, parsed from its
    SVG, is the verdict's figure, unmarked as failing."""
    import re

    from conftest import run_cli

    bundles = _bundles("unchanged", tmp_path)
    store = tmp_path / "store"
    _replay(bundles[:1], store)  # the baseline
    plan = judge_plan(bundles[12], None, "replay")
    first = first_of(judge_bench(bundles[12], plan, load_history(store), record=False))
    assert first is not None
    done = judge_bench(bundles[15], plan, load_history(store), record=False, first=first)
    keep(finish(Hosts([done.report], "bench", time.time()), inventory=None, waivers=(),
                history=None), store)
    verdict = next(r for r in done.report.results if r.id == "perf.tokens-per-s")
    pp = verdict.details["verdicts"]["pp512"]
    assert pp["run"] == "first" and pp["status"] == "pass" and pp["measured_ts"] == 72781.4
    assert "pp512 5% below baseline (72781.4 vs" in verdict.summary  # the figure it says
    page = run_cli("report", "show", "latest", "--report-dir", str(store), "--format", "html")
    assert page.code == 0, page.stderr
    plot = next(s for s in re.findall(r"<svg.*?</svg>", page.stdout, re.S)
                if 'aria-label="pp512:' in s)
    points = re.findall(r"<title>pp512 [^:]+:\d\d: ([0-9,.]+) t/s \(([^)]*)\)</title>", plot)
    assert len(points) == 2, plot  # the baseline and the judged run
    assert points[-1] == (f"{pp['measured_ts']:,.0f}", "judged")  # not run 15's 30,679


def _levels(history: list[float], tolerance_pct: float = 5) -> list[str]:
    """Each run of ``history`` (run centers, the baseline's first) judged in turn with the runs
    before it, as the Sentinel stores them: the statuses."""
    out = []
    for i in range(1, len(history)):
        out.append(judge_test("tg128", _reps(history[0]), _reps(history[i]), tolerance_pct,
                              history[:i]).status.value)
    return out


def test_a_staircase_of_steps_under_the_tolerance_is_never_learned_as_modes() -> None:
    """Issue 67: generation falling 3% every three runs (100 -> 97 -> 94 -> 91 -> 88 t/s),
    nothing else changed. Each step stayed under the 5% tolerance and each new level was
    learned as a mode: 6%, 9% and 12% below the baseline passed. It warns or fails from the
    first run 6% below, and every run after."""
    stairs = [100.0, 100.1, 99.9, 96.9, 97.0, 97.1, 93.9, 94.0, 94.1, 90.9, 91.0, 91.1,
              87.9, 88.0, 88.1]
    assert _levels(stairs) == ["pass"] * 5 + ["warn"] * 6 + ["fail"] * 3


@settings(max_examples=60, deadline=None)
@given(noise=st.floats(0.0005, 0.012), runs=st.integers(3, 20), fall=st.floats(0.08, 0.4),
       mode=st.floats(0.0, 0.02), seed=st.integers(0, 2**16), sustained=st.integers(2, 4))
def test_a_sustained_fall_below_the_baseline_is_never_a_pass(
        noise: float, runs: int, fall: float, mode: float, seed: int, sustained: int) -> None:
    """The invariant (issue 67), over random histories: unchanged runs with noise and,
    alternating at random, a second level up to 2% away (a mode), then a fall of 8-40% held
    for 2-4 runs: never a pass once the fall has held two runs, whatever came before."""
    import random

    rng = random.Random(seed)
    history = [100.0] + [100 * (1 - (mode if rng.random() < 0.5 else 0.0)) *
                         (1 + rng.gauss(0, noise)) for _ in range(runs)]
    history += [100 * (1 - fall) * (1 + rng.gauss(0, noise)) for _ in range(sustained)]
    statuses = _levels(history)
    assert "pass" not in statuses[runs + 1:], (statuses, history)


def _steps(history: list[float], tolerance_pct: float = 5) -> list[float | None]:
    return [judge_test("tg128", _reps(history[0]), _reps(history[i]), tolerance_pct,
                       history[:i]).step for i in range(1, len(history))]


def test_a_step_under_the_tolerance_is_named_within_three_runs_and_not_before() -> None:
    """Issue 67: ten unchanged runs (±0.5%), then generation 3% lower for good, under the 5%
    tolerance: each run passed and the series was never read. The step is named by the third
    run after it (a warn saying so), nothing is claimed before it."""
    import random

    rng = random.Random(7)
    unchanged = [100 * (1 + rng.gauss(0, 0.005)) for _ in range(11)]
    stepped = [97 * (1 + rng.gauss(0, 0.005)) for _ in range(4)]
    found = _steps(unchanged + stepped)
    assert found[:10] == [None] * 10  # the unchanged runs: nothing claimed
    assert found[10] is None and found[11] is None  # one and two runs after: not yet
    assert found[12] == pytest.approx(0.03, abs=0.01)  # the third: named
    verdict = judge_test("tg128", _reps(unchanged[0]), _reps(stepped[2]), 5,
                         unchanged + stepped[:2])
    assert verdict.status is Status.WARN and "a step: this run and the 2 before it sit" in \
        verdict.line()


def test_the_steps_false_alarms_and_its_power_are_what_it_states() -> None:
    """The step's false alarms over 1,000 generated unchanged histories (normal noise of
    0.1-2% between runs, 7-30 runs each, every run judged): at the stated rate, about one in
    10,000 runs judged (Student's t at one-sided 1e-4). It was not: the robust spread of 18
    runs of ±1.6% read ±0.64%, and a history of seed 962 named a 3.5% step that was not there
    (found by hypothesis). Its power: 3% under 10 unchanged runs of ±0.5%, named by the third
    run after it in at least 85 of 100 histories (measured 91)."""
    import random

    judged = false = 0
    for seed in range(1000):
        rng = random.Random(seed)
        noise, runs = rng.uniform(0.001, 0.02), rng.randint(7, 30)
        history = [100 * (1 + rng.gauss(0, noise)) for _ in range(runs)]
        steps = _steps(history)
        judged += len(steps)
        false += sum(step is not None for step in steps)
    assert judged > 15_000
    assert false <= 5, f"{false} false steps in {judged} runs judged"  # 1 in 17,710; 1.8 expected
    rng = random.Random(962)
    assert not any(_steps([100 * (1 + rng.gauss(0, 0.015625)) for _ in range(21)]))
    named = 0
    for seed in range(100):
        rng = random.Random(10_000 + seed)
        history = [100 * (1 + rng.gauss(0, 0.005)) for _ in range(11)] + \
            [97 * (1 + rng.gauss(0, 0.005)) for _ in range(3)]
        named += _steps(history)[-1] is not None
    assert named >= 85, named


def test_a_drop_before_the_runs_wander_is_known_is_not_claimed() -> None:
    """Issue 67: the first bench after a baseline warned on an unchanged H200 (its baseline's
    noise within one run, ±0.1-0.3%; tg128 moved 941-1000 t/s between runs). Until three runs
    tell how far runs wander, a fall under twice the tolerance says so and is not claimed; a
    fall past it still is; once known, the same fall is judged as it is."""
    early = judge_test("tg128", _reps(1000), _reps(941), 5, [1000.0])
    assert early.status is Status.WARN and "is not known yet (1 run(s) of the 3 that tell it)" \
        in early.line() and "not claimed as a drop" in early.line()
    far = judge_test("tg128", _reps(1000), _reps(850), 5, [1000.0])
    assert far.status is Status.FAIL and "not known yet" not in far.line()
    known = judge_test("tg128", _reps(1000), _reps(941), 5, [1000.0, 1001.0, 999.0])
    assert known.wander_unknown is None and "not known yet" not in known.line()


def _lab(tmp_path: Path) -> list[tuple[str, BenchOutcome]]:
    """Three lab hosts: three unchanged runs of the lent H100 that each passed their host's
    Sentinel (runs 5, 6 and 7 of the 30), each judged against the same baseline and the four
    runs before them (the noise of its runs)."""
    bundles = _bundles("unchanged", tmp_path)
    store = tmp_path / "store"
    _replay(bundles[:5], store, second=False)  # the baseline and four runs: how far runs wander
    out = []
    for name, i in (("lab1", 5), ("lab2", 6), ("lab3", 7)):
        done = judge_bench(bundles[i], judge_plan(bundles[i], None, name), load_history(store),
                           record=False)
        assert done.report.bench is not None
        assert done.report.bench.verdicts["tg128"].status is Status.PASS
        out.append((name, done.report.bench))
    return out


def _slower(bench: BenchOutcome, factor: float) -> BenchOutcome:
    """``bench`` with every repetition scaled by ``factor`` and its GPU's power limit at 450 W
    (700 W captured): a derived variant, one replacement each, as the GPU-fault fixtures are."""
    tests = {n: dataclasses.replace(t, samples_ts=tuple(x * factor for x in t.samples_ts),
                                    center_ts=t.rate * factor) for n, t in bench.tests.items()}
    return dataclasses.replace(bench, tests=tests,
                               context={**bench.context, "gpu.0.power_limit_w": 450.0})


def test_a_host_slower_than_two_identical_twins_is_named_with_what_differs(tmp_path) -> None:
    """Issue 67: the fleet had no peers. Three identical lab hosts: as captured, none named;
    two hosts, none (which one is slow cannot be told). One 8% slower: named, with the
    ratio of medians and what differs. Their runs wander ±1.65% (tg128, their own verdicts'
    noise), so the line is 3 x that x sqrt(1 + 1/2) = 6.1%: one 5% slower is under what these
    runs can tell and is not named (the issue's 5% needs runs that wander under 1.4%)."""
    lab = _lab(tmp_path)
    assert twins(lab) == [] and twins(lab[:2]) == []
    name, bench = lab[2]
    assert twins([*lab[:2], (name, _slower(bench, 0.95))]) == []
    slow = _slower(bench, 0.92)
    (found,) = twins([*lab[:2], (name, slow)])
    assert found.startswith("lab3 runs slower than its 2 twins (lab1, lab2: the same GPUs")
    level = statistics.median(b.tests["tg128"].rate for _, b in lab[:2])
    assert f"tg128 {1 - slow.tests['tg128'].rate / level:.1%} below its twins' median" in found
    assert "past 6.1%" in found
    assert "what differs from lab1: " in found and "700 -> 450" in found, found


def _one_box(lab: list[tuple[str, BenchOutcome]]) -> BenchOutcome:
    """The three lab runs as one box's GPUs 0, 1 and 2 of one model, each benched alone
    (``-sm none -mg 0,1,2``: llama-bench names the tests ``tg128 mg=N``), each test with its
    run's own verdict; a derived variant of recorded captures, as the issue asks (no part of
    it needs a machine with several GPUs)."""
    tests, verdicts = {}, {}
    context = dict(lab[0][1].context)
    for index, (_, bench) in enumerate(lab):
        for name, test in bench.tests.items():
            tests[f"{name} mg={index}"] = dataclasses.replace(
                test, params={**test.params, "split_mode": "none", "main_gpu": index},
                key={**test.key, "split_mode": '"none"', "main_gpu": str(index)})
            verdicts[f"{name} mg={index}"] = bench.verdicts[name]
        for key, value in lab[0][1].context.items():  # GPU0's fields, its uuid its own
            if key.startswith("gpu.0."):
                field = key.removeprefix("gpu.0.")
                context[f"gpu.{index}.{field}"] = f"GPU-{index}" if field == "uuid" else value
    return dataclasses.replace(lab[0][1], tests=tests, verdicts=verdicts, context=context)


def test_a_gpu_slower_than_two_identical_gpus_in_its_box_is_named_with_what_differs(
        tmp_path) -> None:
    """Issue 67: on one box, GPUs of one model benched each alone are twins by the fleet's
    rule. The three lab runs as GPUs 0-2: none named; GPU2 8% slower with a 450 W limit:
    named, with the ratio of medians and the field that differs; 5% slower is under the line
    these runs tell (6.1%). A mask (CUDA_VISIBLE_DEVICES) renumbers the GPUs: none named."""
    box = _one_box(_lab(tmp_path))
    assert gpu_twins("gpu", box) == []
    slow = dataclasses.replace(box, tests={**box.tests, "tg128 mg=2": dataclasses.replace(
        box.tests["tg128 mg=2"], samples_ts=tuple(x * 0.92 for x in box.tests["tg128 mg=2"].samples_ts),
        center_ts=box.tests["tg128 mg=2"].rate * 0.92)},
        context={**box.context, "gpu.2.power_limit_w": 450.0})
    (found,) = gpu_twins("gpu", slow)
    assert found.startswith("gpu: GPU2 (NVIDIA H100 80GB HBM3) runs slower than its 2 twins "
                            "in the box (GPU0, GPU1"), found
    level = statistics.median(box.tests[f"tg128 mg={i}"].rate for i in (0, 1))
    assert f"tg128 {1 - slow.tests['tg128 mg=2'].rate / level:.1%} below its twins' median" \
        in found and "past 6.1%" in found
    assert found.endswith("what differs from GPU0: power_limit_w: 700.0 on GPU0, 450.0 here"), found
    mild = dataclasses.replace(box, tests={**box.tests, "tg128 mg=2": dataclasses.replace(
        box.tests["tg128 mg=2"], center_ts=box.tests["tg128 mg=2"].rate * 0.95)})
    assert gpu_twins("gpu", mild) == []
    masked = dataclasses.replace(slow, context={**slow.context, "env.CUDA_VISIBLE_DEVICES": "2,0,1"})
    assert gpu_twins("gpu", masked) == []


def test_a_drift_and_a_step_are_marked_in_the_plot_and_named_by_the_diff() -> None:
    """Issue 67: the HTML plot marks the runs read as falling (a slide, a step down that
    stayed, a step under the tolerance) and `report diff` names them."""
    from omni_host.outcome import MeasuredTest
    from omni_host.report.history import _mark, series_words
    from omni_host.report.plots import Point, Series, svg

    bench = BenchOutcome({"tg128": MeasuredTest("tg", (90.0, 91.0))}, verdicts={
        "tg128": JudgedTest(Status.WARN, 0.09, drift=0.09),
        "pp512": JudgedTest(Status.WARN, 0.03, step=0.031)})
    assert _mark(bench, "tg128") == "drift" and _mark(bench, "pp512") == "drift"
    assert series_words(bench) == (
        "tg128: its runs since the baseline fell 9% and stayed down",
        "pp512: a step, its last runs 3.1% below the runs before them")
    plot = svg(Series("tg128", (Point(0.0, 100.0, "baseline"), Point(60.0, 91.0, "drift"))))
    assert "\u25bc slide or step" in plot and "(drift)</title></path>" in plot


def _h200_tg128_centers(tmp_path: Path) -> list[float]:
    """tg128's judged rate (the median after the warm-up repetition) of each stored bench of
    the lent H200's step phase, in the order they ran: a baseline, 30 unchanged runs, then 5
    with a duty-cycled GPU load already running (benchmarks/step_gpu.sh)."""
    from omni_host.probes.parsers.bench import parse_llama_bench_json

    with tarfile.open(QUIET.parent / "step-h200" / "step.stores.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    store = tmp_path / "store-step"
    out = []
    for audit in sorted(p for p in store.iterdir() if p.is_dir()):
        doc = json.loads((audit / "bundles" / "gpu" / "probes" / "bench.llama.stdout").read_text())
        bench = parse_llama_bench_json(doc["run"]["stdout"])
        out.append(next(t.estimate.center_ts for t in bench.tests if t.name == "tg128"))
    return out


def test_thirty_unchanged_h200_runs_claim_no_step_and_a_step_under_their_wander_is_not_named(
        tmp_path: Path) -> None:
    """Issue 67 on a lent H200 (2026-12-03): 30 unchanged runs of the documented config after
    a minute's warm-up wandered ±1.2% between runs (1000-1039 t/s): no step is claimed in any
    of them. The load calibrated by hand at 3.5% measured 1.0% by hand after the runs; under
    it the five runs sat 2.4% below the unchanged runs' median. That is under what three runs
    can tell at the step's stated false-alarm rate (Student's t, one-sided 1e-4) when runs
    wander ±1.2%: the line lies at 4.0%. After 30 unchanged runs it is not named; after 10 it
    is named once, at the second loaded run, because the last unchanged run was itself low.
    The issue's 3% needs runs that wander under about 0.9%."""
    from omni_host.measure.series import STEP_RUNS, _t_quantile, step_of

    centers = _h200_tg128_centers(tmp_path)
    assert len(centers) == 36
    unchanged, stepped = centers[:31], centers[31:]
    wander = statistics.stdev(unchanged) / statistics.fmean(unchanged)
    assert 0.008 < wander < 0.016, wander
    assert [step_of(unchanged[:i], unchanged[i], 0.05) for i in range(1, 31)] == [None] * 30
    level = statistics.median(unchanged)
    fell = 1 - statistics.fmean(stepped) / level
    assert 0.015 < fell < 0.035, fell
    line = _t_quantile(len(unchanged) - 1) * wander * math.sqrt(1 / STEP_RUNS + 1 / 31)
    assert line > 0.035 and fell < line  # 4.0%
    series = unchanged[:11] + stepped
    found = [step_of(series[:i], series[i], 0.05) for i in range(11, 16)]
    # after 10: named at the second loaded run, but its window holds the last unchanged run,
    # itself low (1001.4 t/s): the step is named within 3 runs here by the luck of that run
    assert found[0] is None and found[1] == pytest.approx(0.047, abs=0.002) and \
        found[2:] == [None] * 3, found
    assert [step_of(centers[:i], centers[i], 0.05) for i in range(31, 36)] == [None] * 5


def test_a_step_is_read_over_every_run_judged_and_names_where_it_began_and_what_changed(
        tmp_path: Path) -> None:
    """Issue 67: a job that starts and stays leaves each of its runs changed, and the step
    was read over the unchanged runs only, so it was never named as a step. The step's window
    is the latest runs judged against the baseline whatever their state; the level stays the
    unchanged runs'. Read from the lent H200's store: its 5 loaded runs (a co-tenant, forced)
    join the window, never the level."""
    from omni_host.app.baseline import find_baseline
    from omni_host.measure.series import step_window

    _h200_tg128_centers(tmp_path)  # the store, unpacked
    baseline = find_baseline(load_history(tmp_path / "store-step"), "gpu")
    assert baseline is not None and len(baseline.since) == 35
    assert all(r.level and not r.changed for r in baseline.since[:30])
    assert all(not r.level and r.changed for r in baseline.since[30:])
    series, window = step_window(baseline, "tg128")
    assert window == baseline.since[-2:]
    assert series[-2:] == [r.centers["tg128"] for r in window]
    level = series[:-2]  # the baseline's and the 30 unchanged runs' centres (first runs too)
    assert level == baseline.run_centers["tg128"] and len(level) >= 31
    assert "other processes on the GPUs: none -> 9175 python3" in window[-1].changed


def test_a_co_tenant_that_stays_is_named_as_a_step_with_the_run_where_it_began() -> None:
    """Ten unchanged runs (±0.5%), then a job that stays costs 3% (under the 5% tolerance):
    its runs are changed, out of the level. The third run under it names the step, where it
    began and what had changed there; read over the unchanged runs alone (as before), it was
    never named."""
    import random

    from omni_host.measure.series import step_began, step_window
    from omni_host.model import Baseline, JudgedSince

    rng = random.Random(7)
    unchanged = [100 * (1 + rng.gauss(0, 0.005)) for _ in range(11)]
    loaded = [97 * (1 + rng.gauss(0, 0.005)) for _ in range(3)]
    job = ("other processes on the GPUs: none -> 4242 python3",)
    since = tuple(JudgedSince(f"run{i}", 1_796_292_000.0 + 60 * i, {"tg128": c}, {"tg128": (c,)},
                              ()) for i, c in enumerate(unchanged[1:]))
    since += tuple(JudgedSince(f"job{i}", 1_796_293_000.0 + 60 * i, {"tg128": c}, {}, job)
                   for i, c in enumerate(loaded[:2]))
    baseline = Baseline("base", 0.0, {"tg128": _reps(unchanged[0])}, {},
                        {"tg128": unchanged}, {}, since)
    series, window = step_window(baseline, "tg128")
    verdict = judge_test("tg128", _reps(unchanged[0]), _reps(loaded[2]), 5, unchanged, series)
    assert verdict.step == pytest.approx(0.03, abs=0.01)
    named = dataclasses.replace(verdict, step_began=step_began(window)).line()
    assert "a step: this run and the 2 before it sit" in named and \
        "it began by the run of 2026-12-03 10:16 UTC (job0); what had changed since the " \
        "baseline in its runs: other processes on the GPUs: none -> 4242 python3" in named, named
    assert judge_test("tg128", _reps(unchanged[0]), _reps(loaded[2]), 5, unchanged).step is None
