"""What SmolLM2's and Gemma 3's GGUF files hold, read with the `gguf` package (PyPI,
llama.cpp's own reader): the reference `lucent inspect` is held to
(tests/data/inspect_reference.json, checked by crates/lucent/tests/inspect.rs).

    ~/.cache/lucent/bench-venv-llama/bin/python -m pip install gguf
    ~/.cache/lucent/bench-venv-llama/bin/python scripts/inspect_reference.py

The models come from lucent's cache ($LUCENT_HOME, default ~/.cache/lucent:
models/NAME/*.gguf; `lucent fetch NAME` puts them there).
"""

import glob
import importlib.metadata
import json
import os
import sys

import gguf


def cache_root():
    home = os.environ.get("LUCENT_HOME")
    return home if home else os.path.expanduser("~/.cache/lucent")


def field(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    v = f.contents()
    return v


def describe(name):
    paths = glob.glob(os.path.join(cache_root(), "models", name, "*.gguf"))
    if not paths:
        sys.exit(f"no .gguf in {cache_root()}/models/{name}: run `lucent fetch {name}` first")
    r = gguf.GGUFReader(paths[0])
    arch = field(r, "general.architecture")
    types = {}
    for t in r.tensors:
        name_ = t.tensor_type.name
        m = types.setdefault(name_, {"type": name_, "tensors": 0, "params": 0, "bytes": 0})
        m["tensors"] += 1
        m["params"] += int(t.n_elements)
        m["bytes"] += int(t.n_bytes)
    a = lambda k: field(r, f"{arch}.{k}")
    template = field(r, "tokenizer.chat_template")
    return {
        "model": name,
        "file": os.path.basename(paths[0]),
        "architecture": arch,
        "tensors": len(r.tensors),
        "parameters": sum(int(t.n_elements) for t in r.tensors),
        "types": sorted(types.values(), key=lambda m: (-m["bytes"], m["type"])),
        "context_length": a("context_length"),
        "embedding_length": a("embedding_length"),
        "block_count": a("block_count"),
        "head_count": a("attention.head_count"),
        "head_count_kv": a("attention.head_count_kv"),
        "key_length": a("attention.key_length"),
        "feed_forward_length": a("feed_forward_length"),
        "rope_freq_base": a("rope.freq_base"),
        "rope_dimension_count": a("rope.dimension_count"),
        "rope_scaling_keys": sorted(k for k in r.fields if k.startswith(f"{arch}.rope.scaling.")),
        "tokenizer_model": field(r, "tokenizer.ggml.model"),
        "tokenizer_pre": field(r, "tokenizer.ggml.pre"),
        "vocab_size": len(field(r, "tokenizer.ggml.tokens") or []),
        "chat_template": template is not None,
    }


def main():
    out = {
        "meta": {"reader": f"gguf {importlib.metadata.version('gguf')} (PyPI)"},
        "models": [describe(m) for m in ("smollm2", "gemma3")],
    }
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "inspect_reference.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for m in out["models"]:
        print(m["model"], m["parameters"], [(t["type"], t["tensors"]) for t in m["types"]])


if __name__ == "__main__":
    main()
