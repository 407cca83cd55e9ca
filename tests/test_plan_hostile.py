"""The plan answers hostile inputs in bounded time and says why (issue 61), for real: the CPU
llama-bench and llama-fit-params over the loopback sshd. Fourteen ``.*`` in a row in
omni_bench.args hung ``omni-host plan`` (killed at 60 s); a FIFO as the model gave no answer in
200 s; ``--ctx 2**63`` was accepted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LLAMA_CACHE, run_cli, until_unlocked
from test_bench import _inventory
from test_plan import moe_model  # noqa: F401  (the fixture)

STARS = ".*" * 14 + "Z"


def _plan(sshd, inv: Path, store: Path, *extra: str) -> tuple[int, dict | None, str, float]:
    started = time.monotonic()
    done = until_unlocked(lambda: run_cli(
        "plan", "-i", str(inv), "loop", "--report-dir", str(store), "--format", "json",
        "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(store.parent / "none"),
        *extra, timeout=120))
    took = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)["hosts"][0] if done.stdout.strip() else None
    return done.code, doc, done.stderr, took


def _placement(host: dict) -> dict:
    return next(r for r in host["results"] if r["id"] == "perf.placement")


@pytest.mark.system
@pytest.mark.parametrize("command", ["plan", "bench"])
def test_a_pattern_of_fourteen_stars_is_refused_in_seconds_before_the_host_runs_it(
        sshd, llama, moe_model: Path, tmp_path: Path, command: str) -> None:  # noqa: F811
    """llama.cpp's own std::regex backtracks through it on the host (the plan's llama-fit-params
    hung): the policy refuses it by name; omni-host's own matching is RE2 (test_bounded_reader)."""
    inv = _inventory(sshd, tmp_path / "inv", llama[0], moe_model,
                     args=["-p", "16", "-n", "16", "-t", "1", "-ot", f"{STARS}=CPU"])
    started = time.monotonic()
    done = run_cli(command, "-i", str(inv), "loop", "--report-dir", str(tmp_path / "store"),
                   "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"),
                   timeout=60)
    assert time.monotonic() - started < 5
    assert "Traceback" not in done.stderr and done.code != 0
    assert "omni_bench.args: -ot pattern" in done.stderr and "14 unbounded repetitions (at most 2" \
        in done.stderr, done.stderr


@pytest.mark.system
def test_a_fifo_as_the_model_is_refused_in_seconds(sshd, llama, tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    inv = _inventory(sshd, tmp_path / "inv", llama[0], fifo)
    code, host, err, took = _plan(sshd, inv, tmp_path / "store")
    assert took < 5, took  # the loopback SSH round trip and the audit's probes included
    text = json.dumps(host) + err
    assert "not a regular file" in text, text[:2000]


@pytest.mark.system
def test_a_context_past_the_models_trained_one_is_refused_naming_it(
        sshd, llama, moe_model: Path, tmp_path: Path) -> None:  # noqa: F811
    inv = _inventory(sshd, tmp_path / "inv", llama[0], moe_model)
    code, host, err, _ = _plan(sshd, inv, tmp_path / "store", "--ctx", "100000000")
    assert host is not None, err
    assert "past the model's trained context (4096 tokens)" in _placement(host)["summary"]
    # a model trained for that context: planned, and no placement fits this host's memory
    long = tmp_path / "long.gguf"
    subprocess.run([sys.executable, str(Path(__file__).parent / "random_llama.py"),
                    str(LLAMA_CACHE / "vocab.gguf"), str(long), "--embd", "256", "--layers", "4",
                    "--ff", "512", "--heads", "4", "--context", str(2**27)],
                   check=True, capture_output=True)
    inv = _inventory(sshd, tmp_path / "inv-long", llama[0], long)
    code, host, err, took = _plan(sshd, inv, tmp_path / "store", "--ctx", "100000000")
    assert host is not None, err
    rows = _placement(host)["details"]["plan"]
    assert rows and not any(r.get("fits") for r in rows), rows
    assert all((r.get("short_mib") or {}).get("CPU", 0) > 100 * 1024 for r in rows
               if not r.get("why_not")), rows  # the CPU's memory, by some hundred GiB
    assert took < 60, took
    code, host, err, _ = _plan(sshd, inv, tmp_path / "store", "--ctx", str(2**63))
    assert code == 2 and host is None and "--ctx 1 to 134,217,728" in err


@pytest.mark.system
def test_a_plan_that_only_predicts_needs_no_bench_lock(sshd, llama, moe_model: Path,  # noqa: F811
                                                       tmp_path: Path) -> None:
    """Issue 62: a prediction-only plan exited 2 while any bench held the host's lock; it runs
    no llama-bench, so it takes none. --prove still does (and --wait waits for it)."""
    from omni_host.remote import bench as helper

    held, why = helper.take_lock(wait_s=900)  # as another bench of this host holds it
    assert held is not None, why
    try:
        inv = _inventory(sshd, tmp_path / "inv", llama[0], moe_model)
        common = ("plan", "-i", str(inv), "loop", "--report-dir", str(tmp_path / "store"),
                  "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"))
        predicted = run_cli(*common, "--format", "json", timeout=120)  # never until_unlocked
        assert "another bench is running" not in predicted.stderr, predicted.stderr
        host = json.loads(predicted.stdout)["hosts"][0]
        assert _placement(host)["details"]["plan"], _placement(host)
        proof = run_cli(*common, "--prove", "--wait", "1s", timeout=120)
        assert proof.code == 2 and "another bench is running on this host: pid " in proof.stderr
        assert "(waited 1s; --wait waits longer)" in proof.stderr, proof.stderr
    finally:
        os.close(held)
