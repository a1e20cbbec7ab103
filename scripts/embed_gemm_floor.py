"""How much of sentence-transformers' MiniLM pass is MKL's GEMM alone: the floor under a
"1.5x faster" target. Times, at THREADS torch threads, (1) sentence-transformers encoding
the benchmark sentences (batch 32, sorted by length, each batch padded to its longest, as
it does), and (2) the same pass's matrix products alone, at the same padded shapes, with
torch's GEMM (MKL): per layer Q/K/V, the output projection and the two FFN products.
Medians of 7. Run with the venv of scripts/bench-embed-peer.sh:

    MODEL="$(target/release/lucent fetch minilm --json | python3 -c \\
        'import json,sys; print(json.load(sys.stdin)["models"][0]["path"])')"
    HF_HUB_OFFLINE=1 ~/.cache/lucent/bench-venv/bin/python scripts/embed_gemm_floor.py \\
        "$MODEL" benches/sentences.txt 1
"""

import statistics
import sys
import time

import torch
from sentence_transformers import SentenceTransformer

model_dir, path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
sentences = [line.rstrip("\n") for line in open(path) if line.strip()]
torch.set_num_threads(threads)
st = SentenceTransformer(model_dir, device="cpu")
lens = sorted(len(st.tokenizer(s)["input_ids"]) for s in sentences)
batches = [(len(lens[i:i + 32]), max(lens[i:i + 32])) for i in range(0, len(lens), 32)]
d, ff, layers = 384, 1536, 6
w = {"qkv": torch.randn(d, 3 * d), "o": torch.randn(d, d),
     "up": torch.randn(d, ff), "down": torch.randn(ff, d)}


def gemms():
    for b, t in batches:
        x, h = torch.randn(b * t, d), torch.randn(b * t, ff)
        for _ in range(layers):
            x @ w["qkv"]
            x @ w["o"]
            x @ w["up"]
            h @ w["down"]


def median_s(f, n=7):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


st.encode(sentences, batch_size=32)
g = median_s(gemms)
e = median_s(lambda: st.encode(sentences, batch_size=32))
target = e / 1.5
print(f"threads {threads}: {sum(b * t for b, t in batches)} padded tokens; "
      f"sentence-transformers' pass {e * 1e3:.0f} ms ({len(sentences) / e:.0f} sentences/s), "
      f"its GEMMs alone {g * 1e3:.0f} ms; a pass 1.5x faster = {target * 1e3:.0f} ms, "
      f"{g / target * 100:.0f}% of what MKL needs for the GEMMs alone")
