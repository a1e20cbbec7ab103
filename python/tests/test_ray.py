"""examples/ray_embed.py on a local Ray cluster equals one process's encode."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import ray

import lucent
from conftest import REPO


def load_example():
    spec = importlib.util.spec_from_file_location("ray_embed", REPO / "examples" / "ray_embed.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ray_embed"] = mod  # as `import ray_embed` does: Ray pickles it by value
    spec.loader.exec_module(mod)
    return mod


def test_ray_data_embeddings_equal_one_process(sentences):
    example = load_example()
    texts = sentences[:96]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        got = example.embed_corpus(texts, "minilm", workers=2, threads=1, rows_per_batch=20)
    finally:
        ray.shutdown()
    want = lucent.SentenceTransformer("minilm").encode(texts)
    assert got.shape == want.shape == (96, 384)
    assert np.array_equal(got, want)
