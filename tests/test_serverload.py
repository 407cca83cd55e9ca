"""``plan --prove`` loads each placement it proves as a real llama-server first (issue 66,
``remote/serverload.py``): the CPU llama-server of tests/llama_bench.sh, loaded and failing
for real; what a load found, read and judged (``perf.placement-proof``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest
from conftest import run_helper

from omni_host.remote.serverload import load_env, load_server, server_beside


def _servers() -> list[psutil.Process]:
    """This process's llama-server children (the suite's sshd is one of its children too)."""
    return [c for c in psutil.Process().children(recursive=True) if c.name() == "llama-server"]


def _server(llama: tuple[Path, Path]) -> str:
    found = server_beside(str(llama[0]))
    assert found is not None, "no llama-server beside llama-bench: run bash tests/llama_bench.sh"
    return found


@pytest.mark.system
def test_a_placement_loads_and_the_server_is_gone_after(llama) -> None:
    """Loaded: /health answered 200, the GPUs' memory read while it ran (``memory`` called
    once, here a stand-in: this VM has no GPU), then the server stopped: no child left. The
    bench's LLAMA_ARG_* and key variables never reach it: a thread count it cannot read
    fails a server that is not given -t (``error while handling environment variable
    "LLAMA_ARG_THREADS": stoi``)."""
    read: list[int] = []

    def memory() -> list[dict[str, int]]:
        read.append(1)
        return [{"index": 0, "memory_free_bytes": 5 * 2**30}]

    env = dict(os.environ, LLAMA_ARG_THREADS="not-a-number", LLAMA_API_KEY="sk-never-sent")
    done = load_server(_server(llama), str(llama[1]), ["-c", "512"], env, memory)
    assert done["loaded"] and not done["timed_out"] and done["exit_code"] is None, done
    assert 0 < done["seconds"] < 60
    assert read == [1] and done["free"] == [{"index": 0, "memory_free_bytes": 5 * 2**30}]
    assert _servers() == []
    assert not any("sk-never-sent" in line for line in done["stderr_tail"])
    assert set(load_env(env)) == set(env) - {"LLAMA_ARG_THREADS", "LLAMA_API_KEY"}


@pytest.mark.system
def test_a_placement_that_does_not_load_says_why(llama) -> None:
    """A placement the build cannot load (a buffer type a CPU build does not have): not
    loaded, the server's exit status, and the line that says why, read from its log."""
    from omni_host.probes.parsers.bench_run import _load

    done = load_server(_server(llama), str(llama[1]),
                       ["-c", "512", "--override-tensor", "blk=CUDA0"], dict(os.environ), list)
    assert not done["loaded"] and done["exit_code"] == 1 and done["free"] == []
    assert _servers() == []
    said = _load(done)
    assert not said.loaded
    assert said.error == ('llama-server exited 1: error while handling argument '
                          '"--override-tensor": unknown buffer type'), said


@pytest.mark.system
def test_the_proof_benches_only_what_loaded_and_warns_of_the_rest(llama) -> None:
    """The helper's A/B with loads: the arm whose server did not load is never benched, the
    other is, each round; the proof drops the one that did not load, says why and warns (the
    plan called it fitting); the one that loaded is judged."""
    from omni_host.evaluate.checks import catalog
    from omni_host.measure.plan import PlanRow, prove_result
    from omni_host.probes.parsers.bench_run import parse_bench_run

    binary, model = llama
    ab = {"pairs": 2, "arms": [{"name": "good", "args": ["-p", "0", "-n", "4", "-t", "1"]},
                               {"name": "bad", "args": ["-p", "0", "-n", "4", "-t", "1"]}],
          "loads": {"good": ["-c", "512", "-t", "1"],
                    "bad": ["-c", "512", "--override-tensor", "blk=CUDA0"]}}
    out = run_helper("run_ab", str(binary), str(model), {"repetitions": "1", "budget_s": "120"},
                     ab, None, dict(os.environ), {}, None)
    assert [r["arm"] for r in out["runs"]] == ["good", "good"]
    assert out["loads"]["good"]["loaded"] and not out["loads"]["bad"]["loaded"]
    doc = {"helper": 1, "refused": None, "gate": {}, "context": {}, "ab": out}
    parsed = parse_bench_run(json.dumps(doc)).ab
    assert parsed is not None
    proved = [PlanRow(k, f"placement {k}", "plan", "-t 1", "--threads 1", fits=True,
                      predicted_tg=10.0) for k in ("good", "bad")]
    result = prove_result(catalog()["perf.placement-proof"], proved, parsed,
                          {"workload": {"ctx": 512}})
    assert result.status.value == "warn", result.summary
    assert ("1 of 2 placement(s) the plan called fitting did not load as llama-server at -c 512, "
            "not benched: bad (llama-server exited 1: error while handling argument "
            '"--override-tensor": unknown buffer type)') in result.summary
    assert set(result.details["proof"]["tg4"]["arms"]) == {"good"}
    assert result.details["loads"]["bad"]["loaded"] is False


def test_free_memory_after_loading_against_the_plans_figure() -> None:
    """Each GPU's free memory with the server loaded (NVML, by its index: llama-bench saw
    NVML's GPU 1 first) beside the plan's figure: the free memory it fitted to less what it
    said the placement takes there (its margin is what should stay free). Within 256 MiB is
    said as such; further off, named with both figures."""
    from omni_host.evaluate.checks import catalog
    from omni_host.measure.plan import PlanRow, prove_result
    from omni_host.probes.parsers.bench_run import ArmRun, KnobAB, ServerLoad

    need = {"GPU0": {"weights": 14000, "kv": 600, "compute": 700, "margin": 1024}}
    rows = [PlanRow(k, f"placement {k}", "plan", "-t 1", "--threads 1", fits=True,
                    predicted_tg=10.0, memory_mib=need) for k in ("near", "far")]
    free_bytes = {"near": (16300 - 15300 - 200) * 2**20, "far": (16300 - 15300 - 532) * 2**20}
    loads = {k: ServerLoad(True, 9.5, ((0, 40 * 2**30), (1, b))) for k, b in free_bytes.items()}
    ab = KnobAB(("near", "far"), tuple(ArmRun(k, 0, "exit 1", None) for k in ("near", "far")),
                {}, {}, None, loads)
    context = {"workload": {"ctx": 8192}, "gpus_free_mib": [16300], "gpus_nvml_index": [1]}
    result = prove_result(catalog()["perf.placement-proof"], rows, ab, context)
    assert result.details["loads"]["near"]["planned_free_after_mib"] == {"GPU0": 1000}
    assert result.details["loads"]["near"]["free_after_mib"] == {"GPU0": 800}
    assert result.details["loads"]["far"]["free_after_mib"] == {"GPU0": 468}
    assert ("free GPU memory with the server loaded within 256 MiB of the plan's figure for 1 "
            "of 2 placement(s) (far GPU0 468 MiB free against the plan's 1,000)"
            ) in result.summary, result.summary


@pytest.mark.system
def test_a_build_without_llama_server_is_benched_and_said(llama, tmp_path: Path) -> None:
    """llama-bench with no llama-server beside it (here a link to it in a folder of its own):
    every arm benched as before, the proof says the placements were not loaded, no warning
    of a placement that did not load."""
    from omni_host.evaluate.checks import catalog
    from omni_host.measure.plan import PlanRow, prove_result
    from omni_host.probes.parsers.bench_run import parse_bench_run

    binary, model = llama
    alone = tmp_path / "llama-bench"
    alone.symlink_to(binary)
    ab = {"pairs": 1, "arms": [{"name": "only", "args": ["-p", "0", "-n", "4", "-t", "1"]}],
          "loads": {"only": ["-c", "512", "-t", "1"]}}
    out = run_helper("run_ab", str(alone), str(model), {"repetitions": "1", "budget_s": "120"},
                     ab, None, dict(os.environ), {}, None)
    assert [r["arm"] for r in out["runs"]] == ["only"]
    assert out["loads"] == {"only": {"error": f"no llama-server beside {alone}"}}
    parsed = parse_bench_run(json.dumps({"helper": 1, "refused": None, "gate": {},
                                         "context": {}, "ab": out})).ab
    assert parsed is not None
    result = prove_result(catalog()["perf.placement-proof"],
                          [PlanRow("only", "only", "plan", "-t 1", "--threads 1", fits=True)],
                          parsed, {"workload": {"ctx": 512}})
    assert result.status.value == "pass", result.summary
    assert (f"; the placements were not loaded as llama-server: no llama-server beside {alone};"
            in result.summary)
    assert "did not load" not in result.summary and "loads" not in result.details


# --- the lent H200's cells (tests/fixtures/captures/prove-h200, -b: 2026-12-03, 2026-12-04) -----

CAPTURES = Path(__file__).parent / "fixtures" / "captures"
CELLS = sorted([*CAPTURES.glob("prove-h200/plan-*-prove.json"),
                *CAPTURES.glob("prove-h200-b/plan-*-prove.json")])  # 2026-12-03, 2026-12-04


def _proof(path: Path) -> tuple[dict, dict]:
    host = json.loads(path.read_text())["hosts"][0]
    return host, next(r for r in host["results"] if r["id"] == "perf.placement-proof")


def _worst(loads: dict) -> int:
    return max((v["free_after_mib"]["GPU0"] - v["planned_free_after_mib"]["GPU0"]
                for v in loads.values()), key=abs)


@pytest.mark.parametrize("path", CELLS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_h200_loads_hold_the_plans_memory(path: Path) -> None:
    """Every placement the proof kept loaded as llama-server on the H200; the plan's figure of
    the free memory left is the free memory it fitted to (the engine's, below NVML's by its
    CUDA context) less what it said the placement takes there; NVML's reading with the server
    loaded within 256 MiB of it; the summary says so in the capture's own words."""
    _, proof = _proof(path)
    details = proof["details"]
    rows = {r["key"]: r for r in details["proved"]}
    assert sorted(details["loads"]) == sorted(rows)
    free = details["gpus_free_mib"][0]
    assert free == details["gpus_free_engine_mib"]["CUDA0"] < details["gpus_free_nvml_mib"][0]
    for key, load in details["loads"].items():
        need = rows[key]["memory_mib"]["GPU0"]
        assert load["loaded"] and 0 < load["seconds"] < 30, load
        assert load["planned_free_after_mib"]["GPU0"] == free - need["weights"] - need["kv"] - \
            need["compute"]
        assert abs(load["free_after_mib"]["GPU0"] - load["planned_free_after_mib"]["GPU0"]) <= 256
    n = len(details["loads"])
    assert (f"free GPU memory with the server loaded within 256 MiB of the plan's figure for {n} "
            f"of {n} placement(s)") in proof["summary"]


def test_the_h200_table_in_the_docs_is_the_captures_own() -> None:
    """docs/plan.md's table of the H200 cells: each row's loads, worst free-memory error,
    leader with its measured rate and measured / predicted, --fit's rate, Spearman and the
    proof's time, from the capture's own reports."""
    import re

    text = (Path(__file__).parent.parent / "docs" / "plan.md").read_text()
    rows = re.findall(r"^\| (\d+) GiB, (\d+), (\d+) \| (\d+) of (\d+) \| ([+-]\d+) MiB \| "
                      r"([\w-]+), ([\d.]+) t/s, ([\d.]+)x \| ([^|]+) \| ([\d.]+) \| (\d+) s \|$",
                      text, re.M)
    assert len(rows) == len(CELLS) == 8
    cells = {path.name: path for path in CELLS}
    for budget, depth, ctx, loaded, kept, worst, leader, rate, ratio, fit, rho, took in rows:
        path = cells.pop(f"plan-{budget}-{depth}-prove.json")
        host, proof = _proof(path)
        details = proof["details"]
        (entry,) = details["proof"].values()
        arms = entry["arms"]
        predicted = {r["key"]: r.get("predicted_tg") for r in details["proved"]}
        assert details["workload"]["ctx"] == int(ctx) and details["workload"]["depth"] == int(depth)
        assert int(loaded) == int(kept) == sum(v["loaded"] for v in details["loads"].values())
        assert int(worst) == _worst(details["loads"])
        assert (leader, float(rate)) == (entry["leader"], arms[leader]["median_ts"])
        assert float(ratio) == round(arms[leader]["median_ts"] / predicted[leader], 3)
        if "fit" not in arms:
            assert fit.startswith("short by 0.1 GiB")
            row = next(r for r in json.loads(path.read_text())["hosts"][0]["results"]
                       if r["id"] == "perf.placement")
            assert next(r for r in row["details"]["plan"] if r["origin"] == "fit")[
                "short_mib"]["GPU0"] in range(52, 154)
        elif leader == "fit":
            assert fit == "the leader"
        elif (pairs := arms["fit"]["against_leader"]["pairs"]) < 4:
            assert fit == f"{arms['fit']['median_ts']} t/s, {pairs} round(s): too few to call"
        else:
            assert fit == f"{arms['fit']['median_ts']} t/s, within the noise"
            assert not arms["fit"]["against_leader"]["measurable"]
        assert float(rho) == round(entry["spearman"], 2)
        assert int(took) == round(host["duration_s"])


def test_fits_answer_short_only_of_the_margin_is_proved_and_its_failure_is_no_warning() -> None:
    """--fit's answer short of the plan's 1 GiB margin only (the H200's depth-16384 cell: 0.1
    GiB) is proved beside the plan's leaders, the placement an operator would otherwise
    serve; one short past the margin, or a plan row short of it, is not. Where it then does not
    load, the proof says the margin said so, and does not warn of the plan's memory."""
    from omni_host.app.plan import _to_prove
    from omni_host.evaluate.checks import catalog
    from omni_host.measure.plan import PlanRow, prove_result
    from omni_host.probes.parsers.bench_run import ArmRun, KnobAB, ServerLoad

    need = {"GPU0": {"weights": 14000, "kv": 600, "compute": 700, "margin": 1024}}

    def row(key: str, origin: str, short: int | None) -> PlanRow:
        return PlanRow(key, key, origin, f"-t {len(key)}", "--threads 1", fits=short is None,
                       predicted_tg=10.0, memory_mib=need,
                       short_mib=None if short is None else {"GPU0": short})

    rows = [row("lead", "plan", None), row("near", "plan", 100), row("fit", "fit", 100),
            row("current", "current", 2000)]
    assert [r.key for r in _to_prove(rows, 4)] == ["lead", "fit"]
    assert [r.key for r in _to_prove([rows[0], row("fit", "fit", 1025)], 4)] == ["lead"]
    proved = _to_prove(rows, 4)
    loads = {"lead": ServerLoad(True, 2.0), "fit": ServerLoad(
        False, 3.0, error="llama-server exited 1: cudaMalloc failed: out of memory")}
    ab = KnobAB(("lead",), tuple(ArmRun("lead", 0, "exit 1", None) for _ in range(1)), {}, {},
                None, loads)
    result = prove_result(catalog()["perf.placement-proof"], proved, ab,
                          {"workload": {"ctx": 32768}})
    assert ("not loaded, as the plan's margin said: fit (llama-server exited 1: cudaMalloc "
            "failed: out of memory)") in result.summary
    assert "called fitting" not in result.summary
    assert "1 placement(s) loaded as llama-server at -c 32768" in result.summary


def test_the_thread_lever_is_the_leader_at_half_the_cores_and_is_proved() -> None:
    """Replayed from the H200's 16 GiB cell (16 physical cores): the plan offers its predicted
    fastest placement that reads weights on the CPU again at 8 threads, with no prediction of
    its own (no bench measured the CPU at -t 8: at most the channels' ceiling, else none), and
    --prove runs it beside the leaders whatever --top is."""
    import dataclasses

    from test_plan import _h100_model, _replay

    from omni_host.app.plan import _to_prove
    from omni_host.measure.candidates import HALF_THREADS, candidates
    from omni_host.measure.placement import Assessed, candidate_of
    from omni_host.measure.plan import row

    host_doc, _ = _proof(CAPTURES / "prove-h200" / "plan-16-0-prove.json")
    plan = next(r for r in host_doc["results"] if r["id"] == "perf.placement")["details"]
    _, host, work, current = _replay(plan)  # the same model as the H100's (random_moe)
    host = dataclasses.replace(host, cpu_threads=plan["rates"]["cpu_threads"])
    assert host.physical_cores == host.cpu_threads == 16
    ranked = candidates(_h100_model(), host, work, current, None)
    best = next(i for i in ranked if isinstance(i, Assessed) and i.fits and
                i.candidate.origin == "plan" and i.need["CPU"]["weights"] > 0)
    half = next(i for i in ranked if candidate_of(i).key == HALF_THREADS)
    assert isinstance(half, Assessed) and half.fits and half.tg is None
    assert candidate_of(half).bench_flags() == (*best.candidate.bench_flags()[:-2], "-t", "8")
    assert "no stored bench measured the CPU" in half.limit
    rows = [row(i) for i in ranked]
    assert HALF_THREADS in [r.key for r in _to_prove(rows, 1)]


@pytest.mark.system
def test_a_port_another_server_took_first_is_not_its_load(llama, monkeypatch) -> None:
    """The loopback port chosen is taken by another llama-server before ours binds it (an
    operator's box runs one; forced here by handing ours that server's port): its /health
    answers 200 while ours, unable to bind, exits. Not loaded, and the server's own line
    says why."""
    import subprocess
    import time

    from omni_host.probes.parsers.bench_run import _load
    from omni_host.remote import serverload

    server = _server(llama)
    port = serverload._free_port()
    other = subprocess.Popen([server, "-m", str(llama[1]), "-c", "256", "-t", "1", "--host",
                              "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while serverload.health(port) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert serverload.health(port) == 200
        monkeypatch.setattr(serverload, "_free_port", lambda: port)
        done = load_server(server, str(llama[1]), ["-c", "256", "-t", "1"], dict(os.environ),
                           list)
    finally:
        other.terminate()
        other.wait(15)
    assert not done["loaded"] and done["exit_code"] == 1, done
    assert "couldn't bind HTTP server socket" in (_load(done).error or "")
