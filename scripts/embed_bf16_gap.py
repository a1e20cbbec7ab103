"""How far a bf16 MiniLM / MPNet pass lands from the f32 one: the evidence behind
issue 18's "opt-in lower precision" question. Encodes the benchmark sentences with
sentence-transformers in f32 and again with the model's weights and activations in
bfloat16 (torch's CPU bf16 products accumulate in f32, as AVX512-BF16's VDPBF16PS
does), and prints the smallest cosine and the largest element difference between the
two normalised embeddings of each sentence; and the least any bf16 product could
change: only the Linear weights rounded to bf16, all arithmetic in f32. Run with the venv of
scripts/bench-embed-peer.sh:

    MODEL="$(target/release/lucent fetch minilm --json | python3 -c \\
        'import json,sys; print(json.load(sys.stdin)["models"][0]["path"])')"
    HF_HUB_OFFLINE=1 ~/.cache/lucent/bench-venv/bin/python scripts/embed_bf16_gap.py \\
        "$MODEL" benches/sentences.txt
"""

import sys

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

model_dir, path = sys.argv[1], sys.argv[2]
sentences = [line.rstrip("\n") for line in open(path) if line.strip()]
st = SentenceTransformer(model_dir, device="cpu")
f32 = st.encode(sentences, batch_size=32, normalize_embeddings=True)


def report(what, emb):
    emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    cos = (f32 * emb).sum(axis=1)
    diff = np.abs(f32 - emb).max(axis=1)
    print(f"{len(sentences)} sentences, {what} vs f32: cosine min {cos.min():.6f} "
          f"median {np.median(cos):.6f}; max |difference| {diff.max():.2e} "
          f"(median {np.median(diff):.2e}); issue 18 asks cosine >= 0.99999, "
          f"difference <= 1e-4")


# The least a bf16 product can change: only the Linear weights rounded to bf16, every
# activation and sum still f32.
with torch.no_grad():
    saved = {}
    for name, m in st.named_modules():
        if isinstance(m, torch.nn.Linear):
            saved[name] = m.weight.detach().clone()
            m.weight.copy_(m.weight.to(torch.bfloat16).float())
report("Linear weights rounded to bf16 (f32 arithmetic)",
       st.encode(sentences, batch_size=32, normalize_embeddings=True))
with torch.no_grad():
    for name, m in st.named_modules():
        if name in saved:
            m.weight.copy_(saved[name])
# A whole bf16 pass.
st = st.to(torch.bfloat16)
b16 = st.encode(sentences, batch_size=32, normalize_embeddings=True,
                convert_to_numpy=False)
report("bf16 pass", np.stack([e.float().numpy() for e in b16]))
