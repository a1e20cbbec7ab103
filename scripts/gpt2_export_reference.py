"""Reference logits of `lucent export hf`, computed by PyTorch / transformers.

For each committed training run in tests/data/runs/ (a character model and a byte-level
BPE one), this script exports it with the lucent binary, loads the folder with
`transformers.GPT2LMHeadModel.from_pretrained`, tokenizes a prompt with the folder's
tokenizer.json (the `tokenizers` library) and writes the logits of every position, with
the sha256 of each exported file, to tests/data/gpt2_export_reference.json.

crates/lucent/tests/export_hf.rs then holds lucent to it without torch: its export must
be the same bytes (so these logits are PyTorch's for it), and lucent's logits — of the
run itself and of the exported folder read back through the `gpt2` family — must equal
PyTorch's within 1e-4.

Run once, outside the repository's environment (torch is not a dependency of lucent):

    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch transformers
    cargo build --release -p lucent-cli
    /tmp/refvenv/bin/python scripts/gpt2_export_reference.py target/release/lucent
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import tokenizers
import torch
import transformers

REPO = Path(__file__).resolve().parents[1]
RUNS = ["tiny-char", "tiny-bpe"]
PROMPT = "The stock market recovered slowly after the surprising announcement."


def main() -> None:
    lucent = sys.argv[1] if len(sys.argv) > 1 else str(REPO / "target" / "release" / "lucent")
    torch.manual_seed(0)
    out = {
        "made_by": "scripts/gpt2_export_reference.py",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "prompt": PROMPT,
        "runs": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for run in RUNS:
            run_dir = REPO / "tests" / "data" / "runs" / run
            folder = Path(tmp) / run
            subprocess.run([lucent, "export", "hf", str(run_dir), str(folder)], check=True)
            files = {
                f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                for f in sorted(folder.iterdir())
            }
            tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
            ids = tok.encode(PROMPT, add_special_tokens=False).ids
            assert tok.decode(ids) == PROMPT, "the exported tokenizer does not give the prompt back"
            model = transformers.GPT2LMHeadModel.from_pretrained(folder, torch_dtype=torch.float32)
            model.eval()
            block = model.config.n_positions
            ids = ids[:block]
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0]  # (t, V)
            out["runs"][run] = {
                "files": files,
                "ids": ids,
                "n_positions": block,
                "logits": [[float(x) for x in row] for row in logits.tolist()],
            }
            print(f"{run}: {len(ids)} ids, logits {tuple(logits.shape)}")
    path = REPO / "tests" / "data" / "gpt2_export_reference.json"
    path.write_text(json.dumps(out) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
