"""Small random-weight Mixture-of-Experts GGUF files and llama.cpp's logits for them: the
test bench of `crates/lucent/tests/gguf_moe.rs`.

    PYTHON scripts/make_gguf_moe.py [OUTDIR]

OUTDIR defaults to tests/data/gguf_moe. PYTHON is the one `scripts/make_gguf_families.py`
wants (`gguf`, `numpy`, llama-cpp-python 0.3.36 built for AVX2 without AVX-512); this
script reuses that one's writer, prompts and llama.cpp loop (imported, not copied), so
the files share its shapes: 3 layers, d_model 128, 4 query and 2 key/value heads of 32
features, the 289-token byte-level vocabulary, Q8_0 matrices, F32 norms.

Three files, each with a Mixture-of-Experts block in place of every layer's FFN:

- `qwen3moe.gguf` (`general.architecture = qwen3moe`): Qwen 3's attention (per-head
  QK-norm, rotate-half RoPE), 8 experts of width 64 (`qwen3moe.expert_feed_forward_length`),
  2 used per token;
- `mixtral.gguf` (`general.architecture = llama` with `llama.expert_count = 8`, the
  Mixtral layout): LLaMA's attention, 8 experts of width 128 (`llama.feed_forward_length`),
  2 used per token;
- `qwen3moe-f32-router.gguf`: as `qwen3moe.gguf` (its own seed) with every router kept F32,
  as real Qwen3-MoE files keep it (llama.cpp multiplies it by tinyBLAS's F32 chain for a
  prompt, `ggml_vec_dot_f32` for one token; see docs/quantization.md).

Each layer's router `blk.{i}.ffn_gate_inp.weight` is (n_expert, d), the experts'
`ffn_gate_exps`, `ffn_up_exps` (n_expert, d_ff, d) and `ffn_down_exps` (n_expert, d, d_ff)
are 3-D tensors, all Q8_0 (the router F32 in the third file), N(0, 1/fan-in) (the router's N(0, 4/d), so that its softmax is
far from uniform and dropping the renormalisation of the two weights changes the output
by a clear factor).

reference.json has the layout of `make_gguf_families.py`'s: per file and prompt (5, 17 and
40 token ids), llama.cpp's logits after the prompt (one batch) at 1 and 2 threads as f32
bit patterns, and its 32 greedy tokens. Files whose metadata asks for expert arithmetic
lucent does not do (metadata only) are written beside them.
"""

import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gguf_families as fam  # noqa: E402  (the shared writer and llama.cpp loop)
from make_gguf_families import D, HEADS, KV_HEADS, HEAD_DIM, Writer  # noqa: E402

import llama_cpp  # noqa: E402

N_EXPERT, N_USED = 8, 2
QWEN3MOE_FF = 64


def experts(w, b, n_ff, f32_router=False):
    """The router and the experts' 3-D tensors of one layer (prefix `b`); the router F32
    (as real Qwen3-MoE files keep it) when `f32_router`, else Q8_0."""
    if f32_router:
        x = w.rng.normal(0.0, 2.0 / np.sqrt(D), (N_EXPERT, D)).astype(np.float32)
        w.w.add_tensor(b + "ffn_gate_inp.weight", x)
    else:
        w.matrix(b + "ffn_gate_inp.weight", N_EXPERT, D, std=2.0 / np.sqrt(D))
    for name, rows, cols in (("ffn_gate_exps", n_ff, D), ("ffn_up_exps", n_ff, D),
                             ("ffn_down_exps", D, n_ff)):
        x = w.rng.normal(0.0, 1.0 / np.sqrt(cols), (N_EXPERT, rows, cols)).astype(np.float32)
        w.w.add_tensor(b + name + ".weight", gguf.quants.quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)


def attention(w, b, head_qk_norm):
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    w.matrix(b + "attn_q.weight", q, D)
    w.matrix(b + "attn_k.weight", kv, D)
    w.matrix(b + "attn_v.weight", kv, D)
    w.matrix(b + "attn_output.weight", D, q)
    if head_qk_norm:
        w.norm(b + "attn_q_norm.weight", HEAD_DIM)
        w.norm(b + "attn_k_norm.weight", HEAD_DIM)
    w.norm(b + "attn_norm.weight", D)
    w.norm(b + "ffn_norm.weight", D)


def qwen3moe(w, f32_router=False):
    w.w.add_uint32(w.key("expert_count"), N_EXPERT)
    w.w.add_uint32(w.key("expert_used_count"), N_USED)
    w.w.add_uint32(w.key("expert_feed_forward_length"), QWEN3MOE_FF)
    for i in range(w.layers):
        attention(w, f"blk.{i}.", head_qk_norm=True)
        experts(w, f"blk.{i}.", QWEN3MOE_FF, f32_router)


def qwen3moe_f32_router(w):
    qwen3moe(w, f32_router=True)


def mixtral(w):
    w.w.add_uint32(w.key("expert_count"), N_EXPERT)
    w.w.add_uint32(w.key("expert_used_count"), N_USED)
    for i in range(w.layers):
        attention(w, f"blk.{i}.", head_qk_norm=False)
        experts(w, f"blk.{i}.", fam.FF)


# (file, architecture, builder, whether it has an untied output head)
FILES = [
    ("qwen3moe", "qwen3moe", qwen3moe, True),
    ("mixtral", "llama", mixtral, False),
    # the router F32 as in real Qwen3-MoE files (tinyBLAS's / vec_dot_f32's order)
    ("qwen3moe-f32-router", "qwen3moe", qwen3moe_f32_router, True),
]

# Metadata lucent refuses (no tensors: the refusal comes first): (file, arch, key, value).
REFUSED = [
    # sigmoid gating (LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID = 2), not the softmax router
    ("qwen3moe-sigmoid", "qwen3moe", "expert_gating_func", 2),
    # shared experts beside the routed ones
    ("qwen3moe-shared", "qwen3moe", "expert_shared_count", 1),
]


def write_refused(outdir):
    for name, arch, key, value in REFUSED:
        w = Writer(os.path.join(outdir, f"{name}.gguf"), arch, seed=0)
        w.w.add_uint32(w.key("expert_count"), N_EXPERT)
        w.w.add_uint32(w.key("expert_used_count"), N_USED)
        w.w.add_uint32(w.key(key), value)
        w.w.write_header_to_file()
        w.w.write_kv_data_to_file()
        w.w.write_tensors_to_file()
        w.w.close()


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(fam.ROOT, "tests/data/gguf_moe")
    os.makedirs(outdir, exist_ok=True)
    llama_cpp.llama_log_set(fam.QUIET, None)
    system = llama_cpp.llama_print_system_info().decode().strip()
    if "AVX512 = 1" in system:
        sys.exit("this llama-cpp-python is built with AVX-512; use the AVX2 build of scripts/parity-llama-avx2.sh")
    ref = {"meta": {
        "engine": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}",
        "system": system,
        "n_ctx": fam.CONTEXT, "greedy": fam.GREEDY, "threads": list(fam.THREADS),
        "experts": N_EXPERT, "used": N_USED,
        "note": "logits after the prompt (one batch) as f32 bit patterns per thread count; "
                "greedy = argmax of the last logits, appended and decoded one at a time, never stopping",
    }, "files": {}}
    for seed, (name, arch, build, output) in enumerate(FILES):
        path = os.path.join(outdir, f"{name}.gguf")
        w = Writer(path, arch, seed=500 + seed)
        build(w)
        w.finish(output, 1.0 / np.sqrt(D))
        cases = fam.run(path, fam.prompts(w.n_normal))
        ref["files"][name] = {"file": f"{name}.gguf", "arch": arch, "cases": cases}
        print(f"{name}: {os.path.getsize(path)} bytes, greedy of prompt 0: {cases[0]['greedy_ids'][:8]}")
    write_refused(outdir)
    with open(os.path.join(outdir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
