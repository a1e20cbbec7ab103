"""lucent.open(name).trace(text): every intermediate as numpy views, attention equal to
`lucent attention --json`."""

from __future__ import annotations

import numpy as np
import pytest

import lucent
from conftest import run_cli_json

TEXT = "The cat sat on the mat because it was tired"


@pytest.fixture(scope="module")
def minilm_trace():
    return lucent.open("minilm").trace(TEXT)


def test_attention_equals_lucent_attention_json(minilm_trace):
    att = minilm_trace.attention()
    assert att.shape == (6, 12, 12, 12)  # [layers, heads, t, t]
    for layer in range(6):
        cli = run_cli_json("attention", "-m", "minilm", TEXT, "--layer", str(layer), "--json")
        assert cli["tokens"] == minilm_trace.tokens
        want = np.array([h["weights"] for h in cli["heads"]], dtype=np.float32)
        assert np.array_equal(att[layer], want), (layer, np.abs(att[layer] - want).max())
    assert np.allclose(att.sum(-1), 1.0, atol=1e-5)


def test_qkv_scores_and_residual_stream(minilm_trace):
    t = len(minilm_trace.tokens)
    q, k, v = minilm_trace.q(), minilm_trace.k(), minilm_trace.v()
    assert q.shape == k.shape == v.shape == (6, 12, t, 32)
    scaled = minilm_trace.scaled()
    # The guides' formula, recomputed from the recorded Q and K.
    assert np.allclose(scaled, q @ k.transpose(0, 1, 3, 2) / np.sqrt(32), atol=1e-4)
    z = scaled - scaled.max(-1, keepdims=True)
    w = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    assert np.allclose(w, minilm_trace.attention(), atol=1e-5)
    res = minilm_trace.residual()
    assert res.shape == (7, t, 384)
    assert np.array_equal(res[-1], minilm_trace["encoder.output"][0])


def test_arrays_are_read_only_views_kept_alive_by_the_trace():
    tr = lucent.open("minilm").trace("a cat", leaves=["weights"], layers=[2])
    assert tr.names() == ["encoder.layer.2.attn.weights"]
    a = tr["encoder.layer.2.attn.weights"]
    assert a.shape == (1, 12, 4, 4) and a.dtype == np.float32
    assert not a.flags.writeable and not a.flags.owndata
    assert a.base is not None
    with pytest.raises(ValueError):
        a[0, 0, 0, 0] = 1.0
    del tr
    assert np.allclose(a.sum(-1), 1.0, atol=1e-5)  # still valid: the array keeps the trace
    with pytest.raises(KeyError, match="recorded no"):
        lucent.open("minilm").trace("a cat", leaves=["q"])["encoder.layer.0.attn.weights"]


def test_a_decoders_trace_is_causal(tiny_run):
    m = lucent.open(str(tiny_run))
    assert m.kind == "decoder" and m.config["family"] == "gpt"
    tr = m.trace("the cat")
    att = tr.attention()
    layers, heads, t, _ = att.shape
    assert (layers, t) == (m.config["decoder_layers"], 7)
    assert np.all(np.triu(att, k=1) == 0.0)
    assert tr.residual().shape == (layers + 1, t, m.config["d_model"])
    assert "logits" in tr and tr["logits"].shape == (t, m.config["vocab_size"])
    assert [tok["text"] for tok in m.tokens("the cat")] == list("the cat")
