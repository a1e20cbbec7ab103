#!/usr/bin/env python3
"""Reference embeddings of all-mpnet-base-v2 by sentence-transformers, for tests/mpnet.rs.

Inputs: the golden sentences (tests/data/minilm_sentences.txt, a literal \\n is a newline
inside one input) and the extra inputs below (Unicode, a text far over the 384-token
max_seq_length that sentence-transformers truncates, empty-ish and punctuation-only
inputs). Output: tests/data/mpnet_reference.safetensors with
  embeddings (n, 768) f32    what SentenceTransformer.encode returns (normalised)
and metadata: sentences (JSON list), token ids per input (JSON), versions.

Also prints MPNet's relative-position buckets for r = -600..600 as (start, bucket) runs,
the golden values of nn::relative_position's test.

Run in the bench venv (torch + sentence-transformers from PyPI):
  ~/.cache/lucent/bench-venv/bin/python scripts/mpnet_reference.py MODEL_DIR
where MODEL_DIR is lucent's cache folder of mpnet (`lucent fetch mpnet --json`).
"""
import json
import os
import sys

import torch
import sentence_transformers
import transformers
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

EXTRA = [
    "Ünïcödé — naïve café, 東京タワー, Привет мир, 🚀✨ emoji and ﬁ ligatures",
    "long: " + " ".join(f"token{i} the quick brown fox" for i in range(200)),
    "",
    "   ",
    "?!... ,;: -- ''",
    "<pad> and <s> written in the text",
]


def main():
    model_dir = sys.argv[1]
    torch.set_num_threads(2)
    path = os.path.join(ROOT, "tests", "data", "minilm_sentences.txt")
    golden = [l.rstrip("\n").replace("\\n", "\n") for l in open(path, encoding="utf-8")]
    sentences = golden + EXTRA
    model = SentenceTransformer(model_dir, device="cpu")
    assert model.max_seq_length == 384, model.max_seq_length
    with torch.inference_mode():
        emb = model.encode(sentences, batch_size=8, convert_to_tensor=True).float()
    ids = [model.tokenizer(s, truncation=True, max_length=model.max_seq_length)["input_ids"] for s in sentences]
    assert max(len(i) for i in ids) == 384, "the long input must be truncated to 384"
    out = os.path.join(ROOT, "tests", "data", "mpnet_reference.safetensors")
    save_file(
        {"embeddings": emb.contiguous()},
        out,
        metadata={
            "sentences": json.dumps(sentences, ensure_ascii=False),
            "golden_count": str(len(golden)),
            "ids": json.dumps(ids),
            "versions": f"sentence-transformers {sentence_transformers.__version__}, "
            f"transformers {transformers.__version__}, torch {torch.__version__}",
        },
    )
    print(f"wrote {out}: {tuple(emb.shape)}")
    rel = torch.arange(-600, 601)
    b = MPNetEncoder.relative_position_bucket(rel, num_buckets=32, max_distance=128).tolist()
    runs = [(int(r), int(x)) for k, (r, x) in enumerate(zip(rel.tolist(), b)) if k == 0 or b[k - 1] != x]
    print("buckets:", ", ".join(f"({r}, {x})" for r, x in runs))


if __name__ == "__main__":
    main()
