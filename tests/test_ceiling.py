"""The hybrid ceiling's bytes per token, on real GGUF files written with the gguf package and
read by the host's own helper code: where llama.cpp puts each tensor for -ngl, -ot, -ncmoe,
-sm and -ts, and how much of a mixture of experts a token reads. The expected bytes are the
shapes' own arithmetic (F16: 2 bytes a weight, F32 norms: 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_host.measure.ceiling import CPU, bytes_per_token, ceiling, placement
from omni_host.probes.catalog import helper_code
from omni_host.probes.parsers.bench_run import TensorMap, tensor_map

EMBD, FF, LAYERS, VOCAB, EXPERTS, USED = 64, 128, 4, 1000, 8, 2
ATTN = 4 * EMBD * EMBD * 2 + 2 * EMBD * 4  # q, k, v, o in F16 and two F32 norms
DENSE_FFN = 3 * FF * EMBD * 2
ROUTER = EXPERTS * EMBD * 2
EXPERT_FFN = 3 * EXPERTS * FF * EMBD * 2  # gate, up, down of every expert
OUTPUT = VOCAB * EMBD * 2 + EMBD * 4  # output.weight and output_norm
ROW = EMBD * 2  # one row of token_embd


def _write(path: Path, experts: int = 0) -> Path:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(USED)

    def t(name: str, shape: tuple[int, ...], dtype: type = np.float16) -> None:
        writer.add_tensor(name, np.zeros(shape, dtype=dtype))

    t("token_embd.weight", (VOCAB, EMBD))
    t("output_norm.weight", (EMBD,), np.float32)
    t("output.weight", (VOCAB, EMBD))
    for i in range(LAYERS):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", (EMBD,), np.float32)
        t(p + "ffn_norm.weight", (EMBD,), np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t(p + name + ".weight", (EMBD, EMBD))
        if experts:
            t(p + "ffn_gate_inp.weight", (experts, EMBD))
            for name in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                t(p + name + ".weight", (experts, FF, EMBD))
        else:
            for name in ("ffn_gate", "ffn_up", "ffn_down"):
                t(p + name + ".weight", (FF, EMBD))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _read(path: Path) -> TensorMap:
    """The table as the bench helper reads it on a host: its own code, in its own namespace."""
    scope: dict[str, object] = {"__name__": "helper"}
    exec(compile(helper_code("gguf", ()), "gguf.py", "exec"), scope)  # noqa: S102
    found = tensor_map(scope["gguf_tensor_map"]([str(path)]))  # type: ignore[operator]
    assert isinstance(found, TensorMap), found
    return found


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> TensorMap:
    return _read(_write(tmp_path_factory.mktemp("g") / "dense.gguf"))


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> TensorMap:
    return _read(_write(tmp_path_factory.mktemp("g") / "moe.gguf", EXPERTS))


def test_the_table_matches_the_gguf_package(tmp_path: Path) -> None:
    import gguf

    path = _write(tmp_path / "m.gguf", EXPERTS)
    table = _read(path)
    theirs = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors}
    assert {n: b for n, b, _ in table.tensors} == theirs
    assert (table.block_count, table.expert_count, table.expert_used_count) == (4, 8, 2)
    assert dict((n, r) for n, _, r in table.tensors)["token_embd.weight"] == VOCAB


def _place(params: dict[str, object], gpus: int = 1) -> object:
    where = placement(params, [80 << 30] * gpus)
    assert not isinstance(where, str), where
    return where


def test_every_layer_on_one_gpu_reads_all_but_the_embedding(dense: TensorMap) -> None:
    read = bytes_per_token(dense, _place({"n_gpu_layers": 99}))  # type: ignore[arg-type]
    assert read == {CPU: ROW, "GPU0": LAYERS * (ATTN + DENSE_FFN) + OUTPUT}


def test_ngl_counts_the_output_layer_as_one(dense: TensorMap) -> None:
    """-ngl 3 of 4 layers: the output layer and the last two repeating layers on the GPU."""
    read = bytes_per_token(dense, _place({"n_gpu_layers": 3}))  # type: ignore[arg-type]
    assert read == {CPU: ROW + 2 * (ATTN + DENSE_FFN), "GPU0": 2 * (ATTN + DENSE_FFN) + OUTPUT}
    none = bytes_per_token(dense, _place({"n_gpu_layers": 0}))  # type: ignore[arg-type]
    assert none == {CPU: ROW + LAYERS * (ATTN + DENSE_FFN) + OUTPUT}


def test_a_token_reads_the_experts_it_uses(moe: TensorMap) -> None:
    read = bytes_per_token(moe, _place({"n_gpu_layers": 99}))  # type: ignore[arg-type]
    assert read["GPU0"] == LAYERS * (ATTN + ROUTER + EXPERT_FFN * USED / EXPERTS) + OUTPUT


def test_overrides_and_ncmoe_move_the_experts_to_the_cpu(moe: TensorMap) -> None:
    experts = EXPERT_FFN * USED / EXPERTS
    ot = bytes_per_token(moe, _place({"n_gpu_layers": 99,  # type: ignore[arg-type]
                                      "tensor_buft_overrides": "exps=CPU"}))
    assert ot == {CPU: ROW + LAYERS * experts, "GPU0": LAYERS * (ATTN + ROUTER) + OUTPUT}
    ncmoe = bytes_per_token(moe, _place({"n_gpu_layers": 99, "n_cpu_moe": 1}))  # type: ignore[arg-type]
    assert ncmoe[CPU] == ROW + experts  # layer 0's experts only


def test_splits_by_layer_and_by_row(dense: TensorMap) -> None:
    layer = bytes_per_token(dense, _place({"n_gpu_layers": 99, "tensor_split": "0.75/0.25"}, 2))  # type: ignore[arg-type]
    # five layers (four and the output) at 0.75/0.25: layers 0-3 on GPU0, the output on GPU1
    assert layer == {CPU: ROW, "GPU0": LAYERS * (ATTN + DENSE_FFN), "GPU1": OUTPUT}
    row = bytes_per_token(dense, _place({"n_gpu_layers": 99, "split_mode": "row",  # type: ignore[arg-type]
                                         "tensor_split": "3/1"}, 2))
    total = LAYERS * (ATTN + DENSE_FFN) + OUTPUT
    assert row["GPU0"] == pytest.approx(total * 0.75) and row["GPU1"] == pytest.approx(total / 4)
    c = ceiling(row, {CPU: 1e11, "GPU0": 1e12, "GPU1": 1e12}, row=True)
    assert c.tokens_per_s == pytest.approx(1 / (ROW / 1e11 + total * 0.75 / 1e12))  # side by side
    assert c.limit == "GPU0"


def test_a_hybrid_ceiling_adds_the_devices_in_turn(dense: TensorMap) -> None:
    read = bytes_per_token(dense, _place({"n_gpu_layers": 3}))  # type: ignore[arg-type]
    c = ceiling(read, {CPU: 100e9, "GPU0": 3350e9}, row=False)
    assert c.tokens_per_s == pytest.approx(1 / (read[CPU] / 100e9 + read["GPU0"] / 3350e9))
    assert c.limit == CPU


def test_unplaceable_arguments_say_why() -> None:
    assert "is not a CPU or a numbered GPU" in str(placement({"tensor_buft_overrides": "x=Vulkan"}, [1]))
    assert "does not compile here" in str(placement({"tensor_buft_overrides": "(=CPU"}, [1]))
    assert "malformed" in str(tensor_map({"tensors": [["a", "x", 1]]}))
    assert "could not be read" in str(tensor_map({"error": "truncated GGUF header"}))


# --- measured on the lent H100 (benchmarks/ceiling_gpu.sh): predicted against achieved ----

H100 = Path(__file__).resolve().parent / "fixtures" / "captures" / "ceiling-h100"


def _h100(name: str):  # type: ignore[no-untyped-def]
    from omni_host.collect.bundle import read_bundles
    from omni_host.probes.parsers.bench_run import parse_bench_run

    (bundle,) = read_bundles(H100 / f"{name}.bundle.tar.gz")
    return parse_bench_run(bundle.results["bench.llama"].stdout)


def _records(name: str) -> dict[str, dict[str, object]]:
    """The run's llama-bench records by -ngl, read from the capture's JSON here."""
    import json

    from omni_host.collect.bundle import read_bundles

    (bundle,) = read_bundles(H100 / f"{name}.bundle.tar.gz")
    doc = json.loads(bundle.results["bench.llama"].stdout)
    return {f"ngl={r['n_gpu_layers']}": r for r in json.loads(doc["run"]["stdout"])}


def test_partial_offload_is_predicted_from_the_cpu_rate_the_run_measured() -> None:
    """-ngl 11 and 7 of 14 layers, predicted at the CPU rate -ngl 0 reached in the same run,
    land within 10% of what llama-bench measured; -ngl 99 gets the GPU's theoretical
    ceiling (HBM3: 5120 bits x 2619 MHz x 2)."""
    from omni_host.measure.ceiling import run_ceilings

    run = _h100("dense-ngl")
    records = _records("dense-ngl")
    assert records["ngl=7"]["model_type"] and set(records) == {"ngl=99", "ngl=11", "ngl=7",
                                                               "ngl=0"}
    got = run_ceilings(run, {})
    full = got["tg128 ngl=99"]
    assert full["basis"] == "theoretical" and full["limit"] == "GPU0 memory"
    assert full["devices"]["GPU0"]["gbs"] == pytest.approx(5120 / 8 * 2619e6 * 2 / 1e9, abs=0.1)
    cpu = got["tg128 ngl=0"]
    assert "measures the CPU's rate" in cpu["why_not"]
    for ngl in ("11", "7"):
        c = got[f"tg128 ngl={ngl}"]
        assert c["basis"] == "the CPU rate tg128 ngl=0 reached" and c["limit"] == "CPU memory"
        assert 0.9 <= c["fraction"] <= 1.1, c
    # -ngl 7 of 14: the output layer and six layers on the GPU, eight on the CPU
    assert isinstance(run.tensors, TensorMap)
    sizes = {n: b for n, b, _ in run.tensors.tensors}
    layer = sum(b for n, b in sizes.items() if n.startswith("blk.0."))
    out = sizes["output.weight"] + sizes["output_norm.weight"]
    seven = got["tg128 ngl=7"]["devices"]
    assert seven["GPU0"]["gb_per_token"] == pytest.approx((out + 6 * layer) / 1e9, abs=1e-3)
    assert seven["CPU"]["gb_per_token"] == pytest.approx(8 * layer / 1e9, abs=1e-3)


def test_a_token_of_the_h100_moe_reads_two_of_sixteen_experts() -> None:
    """All on the CPU, the mixture of experts reached the same CPU rate as the dense model
    (same machine, minutes apart) only when a token counts 2 of 16 experts: counting every
    expert would make that CPU read 4x faster than the dense run measured."""
    from omni_host.measure.ceiling import run_ceilings

    dense = run_ceilings(_h100("dense-ngl"), {})["tg128 ngl=0"]["cpu_effective_gbs"]
    moe_run = _h100("moe")
    assert isinstance(moe_run.tensors, TensorMap)
    assert (moe_run.tensors.expert_count, moe_run.tensors.expert_used_count) == (16, 2)
    moe = run_ceilings(moe_run, {})["tg128 ngl=0"]["cpu_effective_gbs"]
    assert moe == pytest.approx(dense, rel=0.03)
    assert moe_run.result is not None
    rate = next(t for t in moe_run.result.tests if t.name == "tg128 ngl=0").estimate.center_ts
    every = sum(b for _, b, _ in moe_run.tensors.tensors) * rate / 1e9
    assert every > 3 * dense


def test_experts_on_the_cpu_are_placed_by_the_override_llama_bench_recorded() -> None:
    from omni_host.measure.ceiling import CPU as CPU_DEVICE
    from omni_host.measure.ceiling import test_ceiling

    run = _h100("moe-experts-on-cpu")
    assert _records("moe-experts-on-cpu")["ngl=99"]["tensor_buft_overrides"] == "exps=CPU"
    assert run.result is not None
    (test,) = run.result.tests
    assert "dmidecode" in test_ceiling(run, test, {})["why_not"]  # no CPU rate of its own
    dense = run_ceilings_rate("dense-ngl")
    c = test_ceiling(run, test, {}, ("dense-ngl's tg128 ngl=0", dense))
    assert isinstance(run.tensors, TensorMap)
    experts = sum(b for n, b, _ in run.tensors.tensors if "_exps." in n) * 2 / 16
    assert c["devices"][CPU_DEVICE]["gb_per_token"] == pytest.approx(experts / 1e9, abs=1e-3)
    assert 0.8 <= c["fraction"] <= 1.1 and c["limit"] == "CPU memory"


def run_ceilings_rate(name: str) -> float:
    from omni_host.measure.ceiling import run_ceilings

    return float(run_ceilings(_h100(name), {})["tg128 ngl=0"]["cpu_effective_gbs"]) * 1e9


def test_the_bench_verdict_says_prediction_and_what_limits_it(tmp_path: Path) -> None:
    """The dense run judged as omni-host bench judges a host's first run."""
    from omni_host.app.audit import judge_plan
    from omni_host.app.bench import judge_bench
    from omni_host.collect.bundle import read_bundles
    from omni_host.report.history import load_history

    (bundle,) = read_bundles(H100 / "dense-ngl.bundle.tar.gz")
    done = judge_bench(bundle, judge_plan(bundle, None, "dense"), load_history(tmp_path),
                       record=True)
    perf = next(r for r in done.report.results if r.id == "perf.tokens-per-s")
    assert "tg128 ngl=99 at 44% of its 2135.3 t/s ceiling (GPU0 memory limits it)" in perf.summary
    assert "tg128 ngl=7 at 98% of the 91.7 t/s predicted at the CPU rate tg128 ngl=0 reached " \
        "(CPU memory limits it)" in perf.summary
    assert perf.details["no_ceiling"]["tg128 ngl=0"].startswith("this test measures")


def test_the_documented_table_is_what_the_bundles_give(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "ceiling_gpu.py"
    spec = importlib.util.spec_from_file_location("ceiling_gpu", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.table(H100, ["dense-ngl", "moe", "moe-experts-on-cpu"])
    table = capsys.readouterr().out
    assert table == (H100 / "ceiling.md").read_text()
    docs = (Path(__file__).resolve().parent.parent / "docs" / "bench.md").read_text()
    assert table.strip() in docs


def test_the_ceiling_places_on_the_gpus_llama_bench_saw() -> None:
    """CUDA_VISIBLE_DEVICES in omni_bench.env narrows and renumbers the GPUs llama-bench sees:
    the ceiling placed layers on GPUs it did not see (issue 44). Indices and UUID prefixes,
    as CUDA reads them: the list ends at the first entry that names no GPU."""
    from omni_host.measure.ceiling import visible_gpus
    from omni_host.probes.parsers.bench_run import BenchRun

    nvml = [{"index": 0, "bus_width_bits": 5120, "max_mem_clock_mhz": 2619},
            {"index": 1, "bus_width_bits": 6144, "max_mem_clock_mhz": 3201}]
    rows = {"rows": [{"index": "0", "uuid": "GPU-4983ae56-54ff"},
                     {"index": "1", "uuid": "GPU-53e2dbb6-50da"}]}

    def seen(value: str | None) -> list[int]:
        env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
        run = BenchRun(None, {"nvml": nvml, "gpus": rows, "env": env}, {})
        return [g["index"] for g in visible_gpus(run)]

    assert seen(None) == [0, 1]
    assert seen("1") == [1] and seen("1,0") == [1, 0] and seen("GPU-53e2") == [1]
    assert seen("0,7,1") == [0] and seen("") == [] and seen("-1") == []


def test_the_ceiling_and_the_plan_say_what_limits_a_token_one_way() -> None:
    """Issue 63: "tg32 at 2% of its ceiling (CPU memory limits it)" beside the plan's "CPU
    memory (100% of a token's time)". One function says it for both: a run far below its
    memory ceiling is not limited by memory, and a CPU predicted at a rate a bench measured
    is limited by that rate (its compute in it)."""
    from omni_host.measure.bench import _ceiling_note
    from omni_host.measure.ceiling import limit_words
    from omni_host.outcome import Ceiling

    assert limit_words("GPU0", fraction=0.44) == "GPU0 memory limits it"
    low = _ceiling_note({"tg32": Ceiling(1000.0, 0.02, "CPU memory")})
    assert low == ("tg32 at 2% of its 1000 t/s ceiling (CPU memory would limit it at the "
                   "ceiling; at 2% of it, memory bandwidth does not)")
    assert limit_words("CPU", share=1.0, measured=True) == \
        "CPU at the rate a bench measured (100% of a token's time) limits it"
    assert limit_words("CPU", share=0.52) == "CPU memory (52% of a token's time) limits it"
