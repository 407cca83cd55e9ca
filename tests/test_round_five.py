"""Reliability round five (issue 43): numbers are validated where they enter."""

from __future__ import annotations

import json

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
