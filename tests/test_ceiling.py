"""The hybrid ceiling's bytes per token, on real GGUF files written with the gguf package and
read by the host's own helper code: where llama.cpp puts each tensor for -ngl, -ot, -ncmoe,
-sm and -ts, and how much of a mixture of experts a token reads. The expected bytes are the
shapes' own arithmetic (F16: 2 bytes a weight, F32 norms: 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_host.evaluate.ceiling import CPU, bytes_per_token, ceiling, placement
from omni_host.probes.catalog import helper_code
from omni_host.probes.parsers.bench import TensorMap, tensor_map

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
