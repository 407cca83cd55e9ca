"""A llama-architecture GGUF with random F16 weights and a real vocabulary (llama.cpp's own
llama-spm vocab file), written with the gguf package. llama-bench measures it exactly as it
would trained weights of the same shapes: the bench tests' model, and the lent GPU machine's.

    python3 tests/random_llama.py VOCAB.gguf OUT.gguf [--embd N --layers N --ff N --heads N
                                                       --experts N --experts-used N]

With ``--experts`` each layer's feed-forward is a mixture of experts (llama.cpp reads it the
way it reads Mixtral: a router, ``ffn_{gate,up,down}_exps`` holding every expert, and
``--experts-used`` of them chosen per token).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def write_random_llama(vocab: Path, out: Path, *, embd: int = 512, layers: int = 8,
                       ff: int = 2048, heads: int = 8, experts: int = 0, experts_used: int = 0,
                       seed: int = 0, context: int = 4096) -> Path:
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(vocab))

    def values(name: str) -> list:
        field = reader.fields[name]
        return [field.parts[i] for i in field.data]

    tokens = [bytes(p).decode("utf-8", "replace") for p in values("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in values("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in values("tokenizer.ggml.token_type")]
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("omni-host random llama")
    writer.add_context_length(context)
    writer.add_embedding_length(embd)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(embd // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(experts_used)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    rng = np.random.default_rng(seed)

    def tensor(name: str, shape: tuple[int, ...], norm: bool = False) -> None:
        if norm:
            writer.add_tensor(name, np.ones(shape, dtype=np.float32))
        else:
            writer.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * 0.02)
                              .astype(np.float16))

    tensor("token_embd.weight", (len(tokens), embd))
    tensor("output_norm.weight", (embd,), norm=True)
    tensor("output.weight", (len(tokens), embd))
    for i in range(layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", (embd,), norm=True)
        tensor(p + "ffn_norm.weight", (embd,), norm=True)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(p + name + ".weight", (embd, embd))
        if experts:
            tensor(p + "ffn_gate_inp.weight", (experts, embd))
            tensor(p + "ffn_gate_exps.weight", (experts, ff, embd))
            tensor(p + "ffn_up_exps.weight", (experts, ff, embd))
            tensor(p + "ffn_down_exps.weight", (experts, embd, ff))
        else:
            tensor(p + "ffn_gate.weight", (ff, embd))
            tensor(p + "ffn_up.weight", (ff, embd))
            tensor(p + "ffn_down.weight", (embd, ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("vocab", type=Path)
    parser.add_argument("out", type=Path)
    for name, default in (("embd", 512), ("layers", 8), ("ff", 2048), ("heads", 8),
                          ("experts", 0), ("experts-used", 0), ("context", 4096)):
        parser.add_argument(f"--{name}", type=int, default=default)
    a = parser.parse_args()
    write_random_llama(a.vocab, a.out, embd=a.embd, layers=a.layers, ff=a.ff, heads=a.heads,
                       experts=a.experts, experts_used=a.experts_used, context=a.context)
    print(a.out, a.out.stat().st_size)
