"""A random-weight GGUF file of a real model's shape, for speed benchmarks
(scripts/bench-shape-peer.sh): the same dimensions, layer count, vocabulary size and
tensor names as the model, random numbers instead of its weights (speed depends on the
shapes and block types only).

    PYTHON scripts/make_gguf_shape.py SHAPE OUT.gguf

SHAPE is one of:
  qwen3-0.6b      Qwen3-0.6B: d 1024, 28 layers, 16 query / 8 key-value heads of 128,
                  FFN 3072, vocabulary 151,936, per-head Q/K norms, tied embeddings.
  qwen3moe-a3b-8  Qwen3-30B-A3B's layer (d 2048, 32 query / 4 key-value heads of 128,
                  128 experts of width 768, 8 used per token), 8 of its 48 layers, so that
                  the file fits this machine's memory beside llama.cpp's copy.

Matrices are written Q8_0 (gguf.quants); llama-quantize then makes the mix a benchmark
asks for (`llama-quantize --allow-requantize OUT.gguf Q4_K_M.gguf Q4_K_M`). The
vocabulary is the 256 bytes as GPT-2 writes them, two merges, filler tokens up to the
model's size and `<|endoftext|>`; pre-tokenizer `qwen2`. PYTHON needs `gguf` and `numpy`.
"""

import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

from make_gguf_families import byte_chars  # GPT-2's byte → character table

SHAPES = {
    "qwen3-0.6b": dict(arch="qwen3", d=1024, layers=28, heads=16, kv=8, hd=128, ff=3072,
                       vocab=151936, experts=0, used=0),
    "qwen3moe-a3b-8": dict(arch="qwen3moe", d=2048, layers=8, heads=32, kv=4, hd=128, ff=768,
                           vocab=151936, experts=128, used=8),
}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: make_gguf_shape.py {{{'|'.join(SHAPES)}}} OUT.gguf")
    s = SHAPES[sys.argv[1]]
    arch, d, hd = s["arch"], s["d"], s["hd"]
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(sys.argv[2], arch)
    k = lambda name: f"{arch}.{name}"
    w.add_uint32(k("context_length"), 40960)
    w.add_uint32(k("embedding_length"), d)
    w.add_uint32(k("block_count"), s["layers"])
    w.add_uint32(k("feed_forward_length"), s["ff"] if not s["experts"] else 6144)
    w.add_uint32(k("attention.head_count"), s["heads"])
    w.add_uint32(k("attention.head_count_kv"), s["kv"])
    w.add_uint32(k("attention.key_length"), hd)
    w.add_uint32(k("attention.value_length"), hd)
    w.add_float32(k("rope.freq_base"), 1_000_000.0)
    w.add_float32(k("attention.layer_norm_rms_epsilon"), 1e-6)
    if s["experts"]:
        w.add_uint32(k("expert_count"), s["experts"])
        w.add_uint32(k("expert_used_count"), s["used"])
        w.add_uint32(k("expert_feed_forward_length"), s["ff"])
    w.add_uint32("general.file_type", 7)  # MOSTLY_Q8_0
    merged = ["Ġt", "he"]
    tokens = byte_chars() + merged + [f"<filler{i}>" for i in range(s["vocab"] - 259)]
    tokens.append("<|endoftext|>")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * (len(tokens) - 1) + [3])
    w.add_array("tokenizer.ggml.merges", ["Ġ t", "h e"])
    w.add_uint32("tokenizer.ggml.bos_token_id", len(tokens) - 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", len(tokens) - 1)
    w.add_bool("tokenizer.ggml.add_bos_token", False)

    def matrix(name, *shape):
        """Q8_0 N(0, 1/fan-in) numbers of `shape` (..., rows, cols)."""
        x = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[-1]))
        w.add_tensor(name, gguf.quants.quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)

    def ones(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    q, kv = s["heads"] * hd, s["kv"] * hd
    matrix("token_embd.weight", s["vocab"], d)
    ones("output_norm.weight", d)
    for i in range(s["layers"]):
        b = f"blk.{i}."
        ones(b + "attn_norm.weight", d)
        matrix(b + "attn_q.weight", q, d)
        matrix(b + "attn_k.weight", kv, d)
        matrix(b + "attn_v.weight", kv, d)
        matrix(b + "attn_output.weight", d, q)
        ones(b + "attn_q_norm.weight", hd)
        ones(b + "attn_k_norm.weight", hd)
        ones(b + "ffn_norm.weight", d)
        if s["experts"]:
            e, ff = s["experts"], s["ff"]
            matrix(b + "ffn_gate_inp.weight", e, d)
            matrix(b + "ffn_gate_exps.weight", e, ff, d)
            matrix(b + "ffn_up_exps.weight", e, ff, d)
            matrix(b + "ffn_down_exps.weight", e, d, ff)
        else:
            matrix(b + "ffn_gate.weight", s["ff"], d)
            matrix(b + "ffn_up.weight", s["ff"], d)
            matrix(b + "ffn_down.weight", d, s["ff"])
        print(f"layer {i + 1}/{s['layers']}", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()


if __name__ == "__main__":
    main()
