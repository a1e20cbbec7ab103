"""TransformerLens-style hooks on SmolLM2: ``run_with_cache``, ``run_with_hooks`` and
``intervene`` (issue #34), held to lucent's own interventions bit for bit:

- an identity hook gives the plain pass's logits to the bit;
- a hook that zeroes head H of ``hook_z`` gives the ``zero`` intervention's logits to
  the bit (an independent path: a Python function's array written back, against the
  library's zero edit);
- the cache has TransformerLens's shapes and equals lucent's trace (transposed).
"""

from __future__ import annotations

import numpy as np
import pytest

import lucent

TEXT = "The Eiffel Tower is in"


@pytest.fixture(scope="module")
def smollm2():
    return lucent.open("smollm2")


def test_run_with_cache_has_transformerlens_shapes(smollm2):
    logits, cache = smollm2.run_with_cache(TEXT)
    t = len(smollm2.tokens(TEXT))
    cfg = smollm2.config
    assert logits.shape == (1, t, cfg["vocab_size"])
    assert cache["blocks.3.attn.hook_pattern"].shape == (1, cfg["n_heads"], t, t)
    assert cache["blocks.3.attn.hook_z"].shape == (1, t, cfg["n_heads"], cfg["head_dim"])
    assert cache["blocks.3.hook_resid_post"].shape == (1, t, cfg["d_model"])
    assert np.array_equal(cache["blocks.4.hook_resid_pre"], cache["blocks.3.hook_resid_post"])
    tr = smollm2.trace(TEXT)
    assert np.array_equal(cache["blocks.3.attn.hook_z"], tr["decoder.layer.3.attn.context"].transpose(0, 2, 1, 3))
    assert np.array_equal(logits[0], tr["logits"])


def test_identity_hook_gives_the_plain_logits_bit_for_bit(smollm2):
    plain = smollm2.intervene([]).logits(TEXT)
    seen = []

    def identity(z, hook):
        seen.append((hook.name, z.shape))
        return z

    got = smollm2.run_with_hooks(
        TEXT, fwd_hooks=[("blocks.5.attn.hook_z", identity), ("blocks.2.hook_resid_post", identity)]
    )
    assert [s[0] for s in seen] == ["blocks.2.hook_resid_post", "blocks.5.attn.hook_z"]  # pass order
    assert np.array_equal(got.view(np.uint32), plain.view(np.uint32))
    assert np.array_equal(smollm2.run_with_cache(TEXT)[0].view(np.uint32), plain.view(np.uint32))


def test_zeroing_hook_equals_the_ablate_intervention_bit_for_bit(smollm2):
    layer, head = 5, 3

    def zero_head(z, hook):
        z = z.copy()
        z[:, :, head, :] = 0.0  # (batch, pos, head, d_head)
        return z

    hooked = smollm2.run_with_hooks(TEXT, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero_head)])
    ablated = smollm2.intervene([{"hook": f"blocks.{layer}.attn.hook_z", "op": "zero", "head": head}]).logits(TEXT)
    plain = smollm2.intervene([]).logits(TEXT)
    assert np.array_equal(hooked.view(np.uint32), ablated.view(np.uint32))
    assert np.abs(ablated - plain).max() > 1e-3  # the ablation did something


def test_intervene_generates_and_bad_names_are_errors(smollm2):
    steer = smollm2.intervene([{"hook": "blocks.10.hook_resid_post", "op": "scale", "value": 0.0}])
    assert steer.generate(TEXT, max_tokens=4) != smollm2.intervene([]).generate(TEXT, max_tokens=4)
    with pytest.raises(KeyError, match="no hook point"):
        smollm2.run_with_hooks(TEXT, fwd_hooks=[("blocks.99.hook_nothing", lambda z, h: z)])
    with pytest.raises(lucent.LucentError, match="head"):
        smollm2.intervene([{"hook": "blocks.1.attn.hook_z", "op": "zero", "head": 99}]).logits(TEXT)


def test_logit_attribution_terms_add_up_to_the_logit(smollm2):
    """Direct logit attribution (the library's ``Model::logit_attribution``, the one
    ``lucent attribute`` prints): its terms add up to the logit from the final residual
    (f64 sums: a relative 1e-9 of the terms' magnitudes), by token text or by id."""
    a = smollm2.logit_attribution(TEXT, " Paris")
    cfg = smollm2.config
    assert a["heads"].shape == (cfg["decoder_layers"], cfg["n_heads"])
    assert a["mlp"].shape == (cfg["decoder_layers"],)
    terms = np.concatenate([a["heads"].ravel(), a["mlp"], a["attn_rest"], [a["embed"], a["rest"]]])
    assert abs(terms.sum() - a["logit_f32"]) <= 1e-9 * np.abs(terms).sum()
    b = smollm2.logit_attribution(TEXT, a["target_id"])
    assert np.array_equal(a["heads"], b["heads"]) and a["logit"] == b["logit"]
    logits = smollm2.intervene([]).logits(TEXT)
    assert np.float32(a["logit"]) == logits[0, -1, a["target_id"]]
    with pytest.raises(Exception, match="tokens"):
        smollm2.logit_attribution(TEXT, " Eiffel Tower")
