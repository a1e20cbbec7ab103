"""The guides' tools as plain functions, from lucent."""

from __future__ import annotations

import numpy as np

from lucent import tools
from conftest import run_cli_json


def test_params_equal_lucent_params():
    p = tools.params("gpt2")
    assert p["total"] == 124_439_808
    cli = run_cli_json("params", "--preset", "gpt2", "--json")
    for key in ("token_embeddings", "position_embeddings", "embeddings", "head", "head_tied", "total", "stacks"):
        assert p[key] == cli[key], key
    small = tools.params(None, d_model=64, heads=4, layers=2, vocab_size=100, max_positions=32, d_ff=256)
    assert small["config"]["d_model"] == 64 and small["total"] < p["total"]


def test_shapes_and_memory():
    steps = tools.shapes("gpt2", batch=2, seq=5)
    assert steps[0]["shape"][:2] == [2, 5] and steps[-1]["shape"] == [2, 5, 50257]
    m = tools.memory("gpt2", batch=1, seq=1024)
    assert m["parameters"] == 124_439_808


def test_masks():
    c = tools.mask("causal", 4)
    assert c.dtype == np.bool_ and c.shape == (1, 4, 4)
    assert np.array_equal(c[0], np.tril(np.ones((4, 4), dtype=bool)))
    assert tools.mask("bidirectional", 3).all()
    p = tools.mask("prefix_lm", 4, prefix=2)[0]
    assert p[0, 1] and not p[1, 2] and p[3, 3]
    pad = tools.mask("padding", 3, lengths=[3, 1])
    assert pad.shape == (2, 3, 3) and pad[1, :, 1:].sum() == 0


def test_positions_and_softmax():
    pe = tools.sinusoidal_positions(50, 16)
    pos, i = np.arange(50)[:, None], np.arange(8)[None, :]
    angle = pos / 10000 ** (2 * i / 16)
    assert np.allclose(pe[:, 0::2], np.sin(angle), atol=1e-6)
    assert np.allclose(pe[:, 1::2], np.cos(angle), atol=1e-6)
    r = tools.rope_angles(4, 8, base=10000.0)
    assert r.shape == (4, 4) and np.allclose(r[1], 10000.0 ** (-np.arange(4) * 2 / 8))
    assert np.allclose(tools.alibi_slopes(8), [2 ** (-k) for k in range(1, 9)])
    s = tools.softmax(np.array([[1.0, 2.0, 3.0]]), temperature=2.0)
    z = np.exp(np.array([1.0, 2.0, 3.0]) / 2.0)
    assert np.allclose(s[0], z / z.sum(), atol=1e-6)
    assert dict(tools.presets())["gpt2"].startswith("GPT-2")
