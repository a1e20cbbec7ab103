#!/usr/bin/env python3
"""Small crafted Hugging Face encoder folders with random weights, and transformers'
outputs on them, for tests/encoder_folders.rs.

For each family (roberta, xlm-roberta, mpnet, distilbert; hidden 32, 2 layers, 4 heads, vocab 100,
66 position rows) writes tests/data/encoders/tiny-FAMILY/ with config.json and model.safetensors
(saved by transformers' save_pretrained, so the keys are the real ones) and
reference.json: a right-padded batch of two id sequences, its attention mask, and
last_hidden_state (2, t, 32) as transformers computes it (eval mode, f32).

Run in the bench venv (torch + transformers from PyPI):
  ~/.cache/lucent/bench-venv/bin/python scripts/encoder_folders.py [NAME ...]
(NAME: tiny-roberta, tiny-xlm-roberta, tiny-mpnet, tiny-distilbert; default all).
"""
import json
import os
import sys

import torch
import transformers
from transformers import (
    DistilBertConfig,
    DistilBertModel,
    MPNetConfig,
    MPNetModel,
    RobertaConfig,
    RobertaModel,
    XLMRobertaConfig,
    XLMRobertaModel,
)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
COMMON = dict(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=66,
    hidden_act="gelu",
    layer_norm_eps=1e-5,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
)


def write(name, model):
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    model.eval()
    out = os.path.join(ROOT, "tests", "data", "encoders", name)
    model.save_pretrained(out, safe_serialization=True)
    # Two sequences: 40 tokens and 23 tokens + padding (id 1), no pad id inside.
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 100, (2, 40), generator=g)
    ids[:, 0] = 0
    ids[0, 39] = 2
    ids[1, 22] = 2
    ids[1, 23:] = 1
    mask = (ids != 1).long()
    with torch.no_grad():
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
    ref = {
        "ids": ids.tolist(),
        "mask": mask.tolist(),
        "last_hidden_state": h.tolist(),
        "versions": f"transformers {transformers.__version__}, torch {torch.__version__}",
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(name, os.path.getsize(os.path.join(out, "model.safetensors")), "bytes")


def distilbert():
    # DistilBERT's own field names for the same sizes; learned positions (sinusoidal
    # tables are an initialisation: the file holds the table either way).
    cfg = DistilBertConfig(
        vocab_size=COMMON["vocab_size"],
        dim=COMMON["hidden_size"],
        n_layers=COMMON["num_hidden_layers"],
        n_heads=COMMON["num_attention_heads"],
        hidden_dim=COMMON["intermediate_size"],
        max_position_embeddings=COMMON["max_position_embeddings"],
        activation="gelu",
        pad_token_id=COMMON["pad_token_id"],
    )
    return DistilBertModel(cfg)


def main():
    names = sys.argv[1:] or ["tiny-roberta", "tiny-xlm-roberta", "tiny-mpnet", "tiny-distilbert"]
    torch.manual_seed(0)
    makers = {
        "tiny-roberta": lambda: RobertaModel(RobertaConfig(type_vocab_size=1, **COMMON), add_pooling_layer=False),
        "tiny-xlm-roberta": lambda: XLMRobertaModel(XLMRobertaConfig(type_vocab_size=1, **COMMON), add_pooling_layer=False),
        "tiny-mpnet": lambda: MPNetModel(MPNetConfig(relative_attention_num_buckets=32, **COMMON), add_pooling_layer=False),
        "tiny-distilbert": distilbert,
    }
    for name in names:
        write(name, makers[name]())


if __name__ == "__main__":
    main()
