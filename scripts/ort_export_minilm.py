"""Export a sentence-transformers encoder folder (all-MiniLM-L6-v2 or all-mpnet-base-v2,
Hugging Face layout) to ONNX once, for the ONNX Runtime peer in scripts/bench-embed-peer.sh.

Usage: python scripts/ort_export_minilm.py MODEL_DIR OUT.onnx

The graph is the bare encoder: inputs input_ids and attention_mask (plus token_type_ids
for BERT-like models, which have a token-type embedding), output last_hidden_state; batch
and sequence axes are dynamic, so the benchmark pads each batch only to its own longest
sentence. Pooling and normalisation stay outside the graph (done in NumPy by the benchmark),
like sentence-transformers does them outside the Transformer module.

The file is written under a temporary name and renamed into place, so a half-written
export never looks finished.
"""
import os
import sys
import warnings

import torch
from transformers import AutoModel

model_dir, out = sys.argv[1], sys.argv[2]
model = AutoModel.from_pretrained(model_dir).eval()
# MPNet has no token-type embedding; BERT (MiniLM) does (type_vocab_size 2).
with_types = getattr(model.config, "type_vocab_size", 0) > 0 and model.config.model_type != "mpnet"
names = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else [])


class Encoder(torch.nn.Module):
    """Positional inputs in `names` order -> last_hidden_state only (drops the pooler)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return self.inner(**dict(zip(names, args))).last_hidden_state


# A dummy batch of 2 x 8 tokens, the axes being dynamic. The second row is padded (mask 0 on
# its last 3 tokens): the tracer records one path through Python branches on the mask, and a
# padded example makes that the path which applies the mask (an all-ones example could record
# a "no padding, skip the mask" shortcut and silently ignore padding at run time).
ids = torch.full((2, 8), 5, dtype=torch.int64)
mask = torch.ones(2, 8, dtype=torch.int64)
mask[1, 5:] = 0
example = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros(2, 8, dtype=torch.int64)}
dummy = tuple(example[n] for n in names)
dynamic = {n: {0: "batch", 1: "sequence"} for n in names}
dynamic["last_hidden_state"] = {0: "batch", 1: "sequence"}
tmp = out + ".tmp"
os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.no_grad():
        # The legacy (TorchScript) exporter: it takes dynamic_axes directly and needs no
        # onnxscript; opset 17 has LayerNormalization as one op.
        torch.onnx.export(Encoder(model), dummy, tmp, input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=dynamic, opset_version=17, do_constant_folding=True, dynamo=False)
for w in caught:
    # Shown once, so the benchmark's log says what the exporter complained about.
    print(f"export warning: {w.category.__name__} at {os.path.basename(w.filename)}:{w.lineno}:"
          f" {str(w.message).splitlines()[0][:120]}", file=sys.stderr)
os.replace(tmp, out)
print(f"exported {model_dir} -> {out} (inputs {', '.join(names)}; torch {torch.__version__})", file=sys.stderr)
