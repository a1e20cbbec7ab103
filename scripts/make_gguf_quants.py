"""Small random-weight GGUF files in llama.cpp's low-bit mixes, made by llama.cpp's own
`llama-quantize`, and llama.cpp's logits for them: the test bench of
`crates/lucent/tests/gguf_quants.rs`.

    PYTHONPATH=/tmp/fam-llama-avx2 PYTHON scripts/make_gguf_quants.py LLAMA_QUANTIZE [OUTDIR]

LLAMA_QUANTIZE is the `llama-quantize` binary of the llama-cpp-python 0.3.36 sdist's
`vendor/llama.cpp` (built for AVX2: `cmake -B build -DGGML_NATIVE=OFF -DGGML_AVX2=ON
-DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF vendor/llama.cpp && cmake --build build
--target llama-quantize`). OUTDIR defaults to tests/data/gguf_quants. PYTHON needs
`gguf`, `numpy` and llama-cpp-python 0.3.36 built for AVX2 without AVX-512, as
scripts/make_gguf_families.py does (whose writer, prompts and reference loop this script
imports); it refuses an AVX-512 build. Run once; its outputs are committed.

One F32 file of the `llama` architecture (2 layers, d_model 256, 4 query heads and 2
key/value heads of 64 features, a gated FFN of width 256, the families' 289-token
vocabulary, untied output head; weights N(0, 1/fan-in) from a seeded generator) is
written to a temporary directory, then quantised as

    llama-quantize llama-f32.gguf OUTDIR/<mix>.gguf <mix>

for each mix in MIXES (no importance matrix: none of these mixes needs one; llama.cpp
asks for one only for its IQ1/IQ2 types). Every row length (256) is a multiple of
256, so the K-quant and IQ4_XS mixes keep their own types (llama-quantize falls back to
a 32-block type for a row that is not). reference.json holds, per file, llama.cpp's
logits after three prompts (one batch) at 1 and 2 threads as f32 bits and its 32 greedy
tokens, exactly as make_gguf_families.py records them, and the block-type mix of each
file as llama-quantize chose it.

The float weights (F32, F16, BF16) have a bench of their own, smaller and with awkward
widths: one F32 `llama` file (2 layers, d_model 128, 4 query heads and 2 key/value heads
of 32 features, a gated FFN of width 142, the same vocabulary), written to the temporary
directory and converted by the same `llama-quantize` to each type of FLOATS (F32 too, so
that its metadata names its type). The widths pick both of llama.cpp's float products for
a prompt: Q, K, V, O (128 and 64 rows of 128 numbers) take tinyBLAS (`k % 8 == 0`, `m %
4 == 0`), the FFN's gate and up (142 rows: `m % 4 != 0`) and down (rows of 142 numbers:
`k % 8 != 0`, and `142 % 32 = 14` leftovers after the dot's 32-number steps) one
`vec_dot` per output, as every one-token product does.

Row counts that are not multiples of 8 have a bench of their own (`iq4-nl-rows.gguf`,
`q4-0-rows.gguf`): llama.cpp repacks an IQ4_NL or Q4_0 matrix only when its rows are a
multiple of 8 (then one chain per output, token and prompt alike), and multiplies any
other with tinyBLAS in a prompt (one eight-lane accumulator per output,
docs/quantization.md), where the main bench's matrices (all rows multiples of 8) never
go. One F32 `llama` file (2 layers, d_model 128, 8 query heads and 1 key/value head of
28 features, a gated FFN of width 148, the same vocabulary) quantised to IQ4_NL and to
Q4_0 with three overrides (`--tensor-type`, `--output-tensor-type`): `attn_v` kept in
the type (llama-quantize would give a grouped-query model's V Q5_K for IQ4_NL), and
`ffn_down` and `output` F32. So K and V (28 rows of 128) and the FFN's gate and up (148
rows of 128) have 28 % 8 = 148 % 8 = 4, beside Q (224 rows) and O (128 rows), which
llama.cpp repacks. The F32 down projection and head are what let the bench tell the
orders apart: they take their inputs as they are, where an F16 or quantised one rounds
them first (to f16, or to 8 bits a block), and K and V are rounded to f16 in the cache,
which hides a last-bit difference almost always (with `ffn_down` F16, width 276 and a
quantised head, the IQ4_NL file passed in the dot's order too; the main bench's Q4_0
mix passes in the dot's order although llama.cpp repacks every matrix of it).
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gguf_families as fam  # noqa: E402  (its writer, prompts and reference loop)

import llama_cpp  # noqa: E402

# The mixes: llama-quantize's ftype names.
MIXES = ["Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "IQ4_XS"]

# The float types, llama-quantize's ftype names, and the float bench's shape (d_model,
# heads, key/value heads, head width, FFN width).
FLOATS = ["F32", "F16", "BF16"]
FLOAT_SHAPE = (128, 4, 2, 32, 142)

# This bench's shape (the families' module constants, set before the writer reads them).
QUANT_SHAPE = (256, 4, 2, 64, 256)
fam.D, fam.HEADS, fam.KV_HEADS, fam.HEAD_DIM, fam.FF = QUANT_SHAPE
LAYERS = 2

# The rows bench: its shape, its types (llama-quantize's ftype, file name) and
# llama-quantize's overrides for each.
ROWS_SHAPE = (128, 8, 1, 28, 148)
ROWS_MIXES = [("IQ4_NL", "iq4-nl-rows"), ("Q4_0", "q4-0-rows")]


def rows_overrides(ftype):
    """V kept in `ftype`, the down projection and the output head F32."""
    return ["--tensor-type", f"attn_v={ftype.lower()}", "--tensor-type", "ffn_down=f32",
            "--output-tensor-type", "f32"]


class F32Writer(fam.Writer):
    """The families' writer with its matrices kept in F32 (llama-quantize quantises them)."""

    def __init__(self, path):
        super().__init__(path, "llama", seed=7, layers=LAYERS)

    def matrix(self, name, rows, cols, std=None):
        std = 1.0 / np.sqrt(cols) if std is None else std
        self.vector(name, self.rng.normal(0.0, std, (rows, cols)))


def type_mix(path):
    """{block type name: tensor count} of a GGUF file."""
    mix = {}
    for t in gguf.GGUFReader(path).tensors:
        name = t.tensor_type.name
        mix[name] = mix.get(name, 0) + 1
    return dict(sorted(mix.items()))


def write_bench(src, shape):
    """The F32 random-weight file of `shape` at `src`; returns its writer."""
    fam.D, fam.HEADS, fam.KV_HEADS, fam.HEAD_DIM, fam.FF = shape
    w = F32Writer(src)
    for i in range(LAYERS):
        w.layer(i)
    w.finish(True, 1.0 / np.sqrt(fam.D))
    return w


def convert(quantize, src, outdir, ftype, ref, w, name=None, options=()):
    """`llama-quantize [options] src OUTDIR/<name>.gguf ftype` (name: the ftype's, by
    default), and llama.cpp's record of it in `ref`."""
    name = name or ftype.lower().replace("_", "-")
    path = os.path.join(outdir, f"{name}.gguf")
    subprocess.run([quantize, *options, src, path, ftype], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cases = fam.run(path, fam.prompts(w.n_normal))
    ref["files"][name] = {"file": f"{name}.gguf", "mix": ftype, "types": type_mix(path),
                          "cases": cases}
    print(f"{name}: {os.path.getsize(path)} bytes, {type_mix(path)}, "
          f"greedy of prompt 0: {cases[0]['greedy_ids'][:8]}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    quantize = sys.argv[1]
    outdir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(fam.ROOT, "tests/data/gguf_quants")
    os.makedirs(outdir, exist_ok=True)
    llama_cpp.llama_log_set(fam.QUIET, None)
    if "AVX512 = 1" in llama_cpp.llama_print_system_info().decode():
        sys.exit("this llama-cpp-python is built with AVX-512; use the AVX2 build of scripts/parity-llama-avx2.sh")
    ref = {"meta": {
        "engine": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}",
        "system": llama_cpp.llama_print_system_info().decode().strip(),
        "quantizer": "llama-quantize of the same sdist (AVX2 build), from one F32 file",
        "n_ctx": fam.CONTEXT, "greedy": fam.GREEDY, "threads": list(fam.THREADS),
        "note": "logits after the prompt (one batch) as f32 bit patterns per thread count; "
                "greedy = argmax of the last logits, appended and decoded one at a time, never stopping",
    }, "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "llama-f32.gguf")
        w = write_bench(src, QUANT_SHAPE)
        for mix in MIXES:
            convert(quantize, src, outdir, mix, ref, w)
        src = os.path.join(tmp, "llama-floats-f32.gguf")
        w = write_bench(src, FLOAT_SHAPE)
        for ftype in FLOATS:
            convert(quantize, src, outdir, ftype, ref, w)
        src = os.path.join(tmp, "llama-rows-f32.gguf")
        w = write_bench(src, ROWS_SHAPE)
        for ftype, name in ROWS_MIXES:
            convert(quantize, src, outdir, ftype, ref, w, name=name,
                    options=rows_overrides(ftype))
    with open(os.path.join(outdir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
