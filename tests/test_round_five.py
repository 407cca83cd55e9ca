"""Reliability round five (issue 43): numbers are validated where they enter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_host.errors import InventoryError, ParseError
from omni_host.plan.policy import policy_from_vars
from omni_host.probes.parsers.bench import parse_llama_bench_json


@pytest.mark.parametrize("vram", [float("nan"), float("inf"), 1e-300, -1.0, 0.0, 1e9])
def test_a_gpu_memory_that_is_no_size_is_refused_where_it_enters(vram: float) -> None:
    with pytest.raises(InventoryError, match=r"omni_gpus\[0\]\.vram_gib: must be a GPU's memory"):
        policy_from_vars({"omni_gpus": [{"model": "H100", "vram_gib": vram}]}, "t")
    assert policy_from_vars({"omni_gpus": [{"model": "H100", "vram_gib": 80}]}, "t").gpus


@pytest.mark.parametrize("samples", ["75210", {"a": 1}, 7])
def test_samples_that_are_not_a_list_are_a_parse_error_never_a_quiet_baseline(samples) -> None:
    """It fell back to avg_ts: one sample, a ±0% spread, a baseline that called every later
    run a drop."""
    record = {"n_prompt": 512, "n_gen": 0, "avg_ts": 75000.0, "samples_ts": samples}
    with pytest.raises(ParseError, match="samples_ts is not a list"):
        parse_llama_bench_json(json.dumps([record]))


@pytest.mark.system  # the real CPU llama-bench on a real tiny model
def test_a_tiny_real_model_is_benched_and_stored_without_a_ceiling(llama, tmp_path) -> None:
    """A model whose token reads under 1 MiB (here 8-wide, one layer: ~0.6 MB) ended every
    bench with a ZeroDivisionError traceback in the ceiling, nothing stored (issue 43)."""
    import subprocess
    import sys

    from conftest import LLAMA_CACHE, run_cli, until_unlocked

    binary, _ = llama
    model = tmp_path / "tiny.gguf"
    subprocess.run([sys.executable, str(Path(__file__).parent / "random_llama.py"),
                    str(LLAMA_CACHE / "vocab.gguf"), str(model), "--embd", "8", "--layers", "1",
                    "--ff", "16", "--heads", "1"], check=True, capture_output=True)
    inv = tmp_path / "hosts.json"
    inv.write_text(json.dumps({"all": {"hosts": {"box": {
        "ansible_connection": "local", "omni_build_packages": [],
        "omni_bench": {"llama_bench": str(binary), "model": str(model), "repetitions": 2,
                       "args": ["-p", "16", "-n", "16", "-t", "1"], "max_other_cpus": 4,
                       "max_spread_pct": 10000}}}}}))
    store = tmp_path / "store"
    result = until_unlocked(lambda: run_cli("bench", "-i", str(inv), "box", "--report-dir",
                                            str(store), "--format", "json", timeout=300))
    assert "Traceback" not in result.stderr and result.code in (0, 1), result.stderr
    perf = next(r for r in json.loads(result.stdout)["hosts"][0]["results"]
                if r["id"] == "perf.tokens-per-s")
    assert perf["status"] != "error", perf["summary"]
    assert "too small for a memory-bandwidth ceiling" in perf["details"]["no_ceiling"]["tg16"]
    assert any(store.iterdir())  # stored
