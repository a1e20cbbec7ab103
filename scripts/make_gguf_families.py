"""Small random-weight GGUF files, one per architecture lucent reads, and llama.cpp's
logits for them: the test bench of `crates/lucent/tests/gguf_families.rs`.

    PYTHON scripts/make_gguf_families.py [OUTDIR]

OUTDIR defaults to tests/data/gguf_families. PYTHON needs `gguf` and `numpy` (PyPI) and
llama-cpp-python 0.3.36 built for AVX2 without AVX-512 (the venv that
scripts/parity-llama-avx2.sh builds), the build that made the decoder golden files: an
AVX-512 build sums its f16 products sixteen lanes at a time (tinyBLAS) and its softmax
sixteen at a time, which moves the last bits, and lucent follows the AVX2 build at every
instruction-set level. The script refuses an AVX-512 build. Run once; its outputs are
committed.

Each file (one per architecture, and one per RoPE scaling: `llama-linear`,
`qwen3-yarn`, `llama-ropefreqs`): 3 layers (SmolLM3's 4, so that its 4th has no RoPE), d_model 128, 4 query heads and 2 key/value heads of 32 features
(grouped-query attention), a gated FFN of width 128, a byte-level BPE vocabulary (the
256 bytes as GPT-2 writes them, 32 merges, one control token) of 289 tokens. Matrices
are Q8_0 (quantised by `gguf.quants`), norms and biases F32; weights are N(0, 1/fan-in)
from a seeded generator, norm weights 1 + N(0, 0.1²). Each architecture's own feature
is set strongly enough to change the greedy tokens (a soft-cap of 1.5, a window of 4
positions, Granite's multipliers far from 1), so a test that switches it off sees a
difference.

reference.json holds, per file and per prompt (5, 17 and 40 token ids drawn from the
vocabulary), llama.cpp's logits after the prompt (run as one batch, as lucent's
generate prefills it) at n_threads = 1 and 2, as f32 bit patterns, and its 32 greedy
tokens: argmax of the last logits (the first index among equals), appended and run as
one decode step, 32 times, not stopping at any token: what lucent's generate does at
temperature 0 (it would stop at EOS; the test runs the same loop without the stop).
"""

import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D, HEADS, KV_HEADS, HEAD_DIM, FF, LAYERS = 128, 4, 2, 32, 128, 3
CONTEXT = 256
PROMPT_LENGTHS = (5, 17, 40)
GREEDY = 32
THREADS = (1, 2)


def byte_chars():
    """GPT-2's byte → printable character table (bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def vocabulary():
    """(tokens, token types, merges): 256 byte tokens, 32 merges, one control token."""
    chars = byte_chars()
    tokens = list(chars)
    merges = []
    for pair in ["Ġ t", "h e", "i n", "e r", "a n", "r e", "o n", "Ġ a", "e n", "a t",
                 "o r", "e s", "Ġ s", "Ġ w", "i s", "i t", "a l", "Ġ c", "Ġ o", "Ġ b",
                 "a r", "n d", "t e", "Ġ f", "Ġ m", "Ġ p", "l e", "o u", "Ġ d", "s t",
                 "i c", "Ġ i"]:
        a, b = pair.split(" ")
        merges.append(pair)
        tokens.append(a + b)
    tokens.append("<|endoftext|>")
    types = [1] * (len(tokens) - 1) + [3]
    return tokens, types, merges


class Writer:
    """A GGUF writer with the metadata every file shares and seeded random tensors."""

    def __init__(self, path, arch, seed, layers=LAYERS):
        self.w = gguf.GGUFWriter(path, arch)
        self.arch = arch
        self.layers = layers
        self.rng = np.random.default_rng(seed)
        tokens, types, merges = vocabulary()
        self.vocab = len(tokens)
        self.n_normal = len(tokens) - 1
        w, k = self.w, self.key
        w.add_uint32(k("context_length"), CONTEXT)
        w.add_uint32(k("embedding_length"), D)
        w.add_uint32(k("block_count"), layers)
        w.add_uint32(k("feed_forward_length"), FF)
        w.add_uint32(k("attention.head_count"), HEADS)
        w.add_uint32(k("attention.head_count_kv"), KV_HEADS)
        w.add_uint32(k("attention.key_length"), HEAD_DIM)
        w.add_uint32(k("attention.value_length"), HEAD_DIM)
        w.add_uint32(k("rope.dimension_count"), HEAD_DIM)
        w.add_float32(k("rope.freq_base"), 10000.0)
        w.add_float32(k("attention.layer_norm_rms_epsilon"), 1e-6)
        w.add_uint32("general.file_type", 7)  # MOSTLY_Q8_0
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_string("tokenizer.ggml.pre", "default")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.token_type", types)
        w.add_array("tokenizer.ggml.merges", merges)
        w.add_uint32("tokenizer.ggml.bos_token_id", len(tokens) - 1)
        w.add_uint32("tokenizer.ggml.eos_token_id", len(tokens) - 1)
        w.add_bool("tokenizer.ggml.add_bos_token", False)

    def key(self, name):
        return f"{self.arch}.{name}"

    def matrix(self, name, rows, cols, std=None):
        """A (rows, cols) matrix, N(0, 1/cols) unless `std` is given, stored Q8_0."""
        std = 1.0 / np.sqrt(cols) if std is None else std
        x = self.rng.normal(0.0, std, (rows, cols)).astype(np.float32)
        self.w.add_tensor(name, gguf.quants.quantize(x, Q.Q8_0), raw_dtype=Q.Q8_0)

    def norm(self, name, n):
        """A norm weight 1 + N(0, 0.1²), F32."""
        self.vector(name, 1.0 + self.rng.normal(0.0, 0.1, n))

    def bias(self, name, n, std=0.5):
        self.vector(name, self.rng.normal(0.0, std, n))

    def vector(self, name, x):
        self.w.add_tensor(name, np.asarray(x, dtype=np.float32))

    def layer(self, i, pre_norms=True, post_norms=False, qkv_bias=False,
              head_qk_norm=False, whole_qk_norm=False):
        b = f"blk.{i}."
        q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
        self.matrix(b + "attn_q.weight", q, D)
        self.matrix(b + "attn_k.weight", kv, D)
        self.matrix(b + "attn_v.weight", kv, D)
        self.matrix(b + "attn_output.weight", D, q)
        if qkv_bias:
            self.bias(b + "attn_q.bias", q)
            self.bias(b + "attn_k.bias", kv)
            self.bias(b + "attn_v.bias", kv)
        if head_qk_norm:
            self.norm(b + "attn_q_norm.weight", HEAD_DIM)
            self.norm(b + "attn_k_norm.weight", HEAD_DIM)
        if whole_qk_norm:
            self.norm(b + "attn_q_norm.weight", q)
            self.norm(b + "attn_k_norm.weight", kv)
        if pre_norms:
            self.norm(b + "attn_norm.weight", D)
            self.norm(b + "ffn_norm.weight", D)
        if post_norms:
            self.norm(b + "post_attention_norm.weight", D)
            self.norm(b + "post_ffw_norm.weight", D)
        self.matrix(b + "ffn_gate.weight", FF, D)
        self.matrix(b + "ffn_up.weight", FF, D)
        self.matrix(b + "ffn_down.weight", D, FF)

    def finish(self, output, embedding_std):
        self.matrix("token_embd.weight", self.vocab, D, std=embedding_std)
        self.norm("output_norm.weight", D)
        if output:
            self.matrix("output.weight", self.vocab, D)
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


def llama(w):
    for i in range(w.layers):
        w.layer(i)


def qwen2(w):
    for i in range(w.layers):
        w.layer(i, qkv_bias=True)


def qwen3(w):
    for i in range(w.layers):
        w.layer(i, head_qk_norm=True)


def gemma2(w):
    w.w.add_float32(w.key("attn_logit_softcapping"), 1.5)
    w.w.add_float32(w.key("final_logit_softcapping"), 2.0)
    w.w.add_uint32(w.key("attention.sliding_window"), 4)
    for i in range(w.layers):
        w.layer(i, post_norms=True)


def olmo2(w):
    for i in range(w.layers):
        w.layer(i, pre_norms=False, post_norms=True, whole_qk_norm=True)


def granite(w):
    w.w.add_float32(w.key("embedding_scale"), 12.0)
    w.w.add_float32(w.key("residual_scale"), 0.22)
    w.w.add_float32(w.key("attention.scale"), 0.5)
    w.w.add_float32(w.key("logit_scale"), 8.0)
    for i in range(w.layers):
        w.layer(i)


def smollm3(w):
    for i in range(w.layers):  # 4 layers: layer 3 has no RoPE
        w.layer(i)


def phi3(w):
    # Fused matrices: attn_qkv = W_q, W_k, W_v stacked by rows; ffn_up = gate, then up.
    # llama.cpp reads phi3.attention.sliding_window and switches Phi's window off: a
    # window of 4 here would change the logits if it were honoured.
    w.w.add_uint32(w.key("attention.sliding_window"), 4)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(w.layers):
        b = f"blk.{i}."
        w.matrix(b + "attn_qkv.weight", q + 2 * kv, D)
        w.matrix(b + "attn_output.weight", D, q)
        w.norm(b + "attn_norm.weight", D)
        w.norm(b + "ffn_norm.weight", D)
        w.matrix(b + "ffn_up.weight", 2 * FF, D)
        w.matrix(b + "ffn_down.weight", D, FF)


# RoPE scalings. Positions reach 72 (a 40-token prompt and 32 greedy tokens), so the
# factors are strong: every angle divided by 8 (linear); YaRN stretching a 64-token
# original context 4 times (its ramp spans pairs 0 to 5 of 16, the others are
# interpolated, and q·k grows by (1 + 0.1 ln 4)²); frequency factors between 1/2 and 8.

def llama_linear(w):
    w.w.add_string(w.key("rope.scaling.type"), "linear")
    w.w.add_float32(w.key("rope.scaling.factor"), 8.0)
    for i in range(w.layers):
        w.layer(i)


def qwen3_yarn(w):
    w.w.add_string(w.key("rope.scaling.type"), "yarn")
    w.w.add_float32(w.key("rope.scaling.factor"), 4.0)
    w.w.add_uint32(w.key("rope.scaling.original_context_length"), 64)
    for i in range(w.layers):
        w.layer(i, head_qk_norm=True)


def llama_ropefreqs(w):
    # Llama 3.1's frequency bands: one rope_freqs.weight of d_k/2 divisors of θᵢ.
    w.vector("rope_freqs.weight", np.exp(w.rng.uniform(np.log(0.5), np.log(8.0), HEAD_DIM // 2)))
    for i in range(w.layers):
        w.layer(i)


# (architecture, builder, whether it has an untied output head, the token table's std).
# A tied head reads the token table, whose row of the last token then dominates the
# logits (the model repeats its input) unless the layers' outputs outweigh it: Gemma 2
# (always tied, embeddings × √d) and Granite (embeddings × 12) get small tables.
FAMILIES = [
    ("llama", llama, False, 1.0 / np.sqrt(D)),
    ("qwen2", qwen2, True, 1.0 / np.sqrt(D)),
    ("qwen3", qwen3, True, 1.0 / np.sqrt(D)),
    ("gemma2", gemma2, False, 1.0 / D),
    ("olmo2", olmo2, True, 1.0 / np.sqrt(D)),
    ("granite", granite, True, 1.0 / D),
    ("smollm3", smollm3, True, 1.0 / np.sqrt(D)),
    ("llama-linear", llama_linear, False, 1.0 / np.sqrt(D)),
    ("qwen3-yarn", qwen3_yarn, True, 1.0 / np.sqrt(D)),
    ("llama-ropefreqs", llama_ropefreqs, False, 1.0 / np.sqrt(D)),
    ("phi3", phi3, True, 1.0 / np.sqrt(D)),
]

# The architecture of a bench file whose name is not one (a feature's variant).
ARCH_OF = {"llama-linear": "llama", "qwen3-yarn": "qwen3", "llama-ropefreqs": "llama"}

# Layers where an architecture needs more than LAYERS to show its feature.
LAYERS_OF = {"smollm3": 4}


# Files whose metadata asks for what lucent does not do (metadata only, no tensors: the
# refusal comes before any tensor is read): (file, architecture, key, value).
REFUSED = [
    ("qwen2-yarn", "qwen2", "rope.scaling.type", "yarn"),
    ("qwen3-linear", "qwen3", "rope.scaling.type", "linear"),
    ("olmo2-swa", "olmo2", "attention.sliding_window", 4096),
    ("granite-norope", "granite", "rope.scaling.finetuned", False),
    ("qwen2-longrope", "qwen2", "rope.scaling.type", "longrope"),
    # an architecture lucent does not read at all (the error lists those it reads)
    ("mamba-unknown", "mamba", "ssm.conv_kernel", 4),
]


def write_refused(outdir):
    for name, arch, key, value in REFUSED:
        w = Writer(os.path.join(outdir, f"{name}.gguf"), arch, seed=0)
        full = w.key(key)
        if isinstance(value, bool):
            w.w.add_bool(full, value)
        elif isinstance(value, int):
            w.w.add_uint32(full, value)
        else:
            w.w.add_string(full, value)
        w.w.write_header_to_file()
        w.w.write_kv_data_to_file()
        w.w.write_tensors_to_file()
        w.w.close()


def prompts(n_normal):
    rng = np.random.default_rng(1234)
    return [[int(x) for x in rng.integers(0, n_normal, n)] for n in PROMPT_LENGTHS]


def bits(x):
    return [int(b) for b in np.asarray(x, dtype=np.float32).view(np.uint32)]


class Context:
    """One llama.cpp context on a file (llama.cpp's C API, as its own generation loop
    calls it): each call decodes a batch of tokens and returns the logits of the last
    one only, so the last layer's rows are cut to that one as in any generation."""

    def __init__(self, path, threads):
        L = llama_cpp
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
        if not self.model:
            sys.exit(f"{path}: llama.cpp cannot load it")
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = CONTEXT, CONTEXT, CONTEXT
        cp.n_threads, cp.n_threads_batch = threads, threads
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.pos = 0

    def decode(self, ids):
        L = llama_cpp
        n = len(ids)
        batch = L.llama_batch_init(n, 0, 1)
        for i, t in enumerate(ids):
            batch.token[i] = t
            batch.pos[i] = self.pos + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == n - 1
        batch.n_tokens = n
        if L.llama_decode(self.ctx, batch) != 0:
            sys.exit("llama_decode failed")
        self.pos += n
        ptr = L.llama_get_logits_ith(self.ctx, -1)
        row = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float32).copy()
        L.llama_batch_free(batch)
        return row

    def close(self):
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)


def run(path, prompt_ids):
    """llama.cpp's logits after each prompt at each thread count, and its greedy tokens."""
    out = []
    for ids in prompt_ids:
        case = {"prompt_ids": ids, "logits_bits": {}}
        for t in THREADS:
            c = Context(path, t)
            row = c.decode(ids)
            case["logits_bits"][str(t)] = bits(row)
            greedy = []
            for _ in range(GREEDY):
                tok = int(np.argmax(row))
                greedy.append(tok)
                row = c.decode([tok])
            c.close()
            if "greedy_ids" in case and case["greedy_ids"] != greedy:
                sys.exit(f"{path}: greedy tokens differ between thread counts")
            case["greedy_ids"] = greedy
        out.append(case)
    return out


@llama_cpp.llama_log_callback
def QUIET(_level, _text, _user):
    pass


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/data/gguf_families")
    os.makedirs(outdir, exist_ok=True)
    ref = {"meta": {
        "engine": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}",
        "system": llama_cpp.llama_print_system_info().decode().strip(),
        "n_ctx": CONTEXT, "greedy": GREEDY, "threads": list(THREADS),
        "note": "logits after the prompt (one batch) as f32 bit patterns per thread count; "
                "greedy = argmax of the last logits, appended and decoded one at a time, never stopping",
    }, "files": {}}
    llama_cpp.llama_log_set(QUIET, None)
    if "AVX512 = 1" in llama_cpp.llama_print_system_info().decode():
        sys.exit("this llama-cpp-python is built with AVX-512; use the AVX2 build of scripts/parity-llama-avx2.sh")
    for seed, (name, build, output, embedding_std) in enumerate(FAMILIES):
        path = os.path.join(outdir, f"{name}.gguf")
        arch = ARCH_OF.get(name, name)
        w = Writer(path, arch, seed=100 + seed, layers=LAYERS_OF.get(arch, LAYERS))
        build(w)
        w.finish(output, embedding_std)
        cases = run(path, prompts(w.n_normal))
        ref["files"][name] = {"file": f"{name}.gguf", "cases": cases}
        print(f"{name}: {os.path.getsize(path)} bytes, greedy of prompt 0: {cases[0]['greedy_ids'][:8]}")
    write_refused(outdir)
    with open(os.path.join(outdir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
