"""The guides' tools as plain functions, computed by lucent (the same code as
``lucent params``, ``lucent shapes``, ``lucent memory``, ``lucent mask``, ``lucent pe``
and ``lucent softmax``).

A config is a preset name (``gpt2``, ``bert-base``, ``minilm``, ``llama-7b``,
``smollm2``, ``gemma3``, ``transformer-base``; ``None``: a GPT-2-style decoder) with
any dimension changed by keyword: ``d_model``, ``heads``, ``kv_heads``, ``head_dim``,
``d_ff``, ``layers``, ``vocab_size``, ``max_positions``.

>>> from lucent import tools
>>> tools.params("gpt2")["total"]
124439808
>>> tools.mask("causal", 3).astype(int)[0]
array([[1, 0, 0],
       [1, 1, 0],
       [1, 1, 1]])
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from lucent import _lucent

__all__ = [
    "alibi_slopes",
    "config",
    "mask",
    "memory",
    "params",
    "presets",
    "rope_angles",
    "shapes",
    "sinusoidal_positions",
    "softmax",
]


def presets() -> List[Tuple[str, str]]:
    """The presets: ``[(name, description), …]``."""
    return _lucent.presets()


def config(preset: Optional[str] = None, **dims: int) -> Dict[str, Any]:
    """lucent's checked ``ModelConfig`` of a preset with ``dims`` changed."""
    return json.loads(_lucent.config_json(preset, **dims))


def params(preset: Optional[str] = None, **dims: int) -> Dict[str, Any]:
    """Exact parameter counts, component by component: ``token_embeddings``,
    ``position_embeddings``, ``stacks`` (per layer: attention weights and biases, FFN,
    norms), ``head``, ``total``."""
    return json.loads(_lucent.params_json(preset, **dims))


def shapes(
    preset: Optional[str] = None, *, batch: int = 1, seq: int = 8, src_seq: Optional[int] = None, **dims: int
) -> List[Dict[str, Any]]:
    """The shape after every step of a forward pass over ``batch`` × ``seq`` tokens:
    ``[{"stage", "repeat", "name", "dims", "shape", "note"}, …]``."""
    return json.loads(_lucent.shapes_json(preset, batch=batch, seq=seq, src_seq=src_seq, **dims))


def memory(
    preset: Optional[str] = None, *, batch: int = 1, seq: int = 1024, dtype: str = "f32", **dims: int
) -> Dict[str, Any]:
    """Bytes of the weights, the KV cache and the attention scores at ``batch`` ×
    ``seq`` in ``dtype`` (``f32``, ``f16``, ``bf16``)."""
    return json.loads(_lucent.memory_json(preset, batch=batch, seq=seq, dtype=dtype, **dims))


def mask(kind: str, t: int, *, prefix: int = 0, lengths: Optional[Sequence[int]] = None) -> np.ndarray:
    """An attention mask, boolean ``(batch, t, t)``, True where query i may attend to
    key j: ``causal`` (j ≤ i), ``bidirectional`` (all), ``prefix_lm`` (j < prefix or
    j ≤ i), ``padding`` (one row per length; keys past it hidden). Note PyTorch's
    boolean masks mean the opposite (True = hidden)."""
    return _lucent.mask(kind, t, prefix=prefix, lengths=list(lengths) if lengths is not None else None)


def sinusoidal_positions(max_len: int, d: int) -> np.ndarray:
    """The sinusoidal table PE ``(max_len, d)``: PE(p, 2i) = sin(p / 10000^(2i/d)),
    PE(p, 2i+1) = cos(p / 10000^(2i/d))."""
    return _lucent.sinusoidal_table(max_len, d)


def rope_angles(t: int, head_dim: int, base: float = 10000.0) -> np.ndarray:
    """RoPE's rotation angles p·θᵢ, θᵢ = base^(−2i/d): ``(t, head_dim / 2)``."""
    return _lucent.rope_angles(t, head_dim, base)


def alibi_slopes(n_heads: int) -> List[float]:
    """ALiBi's slope of each head: 2^(−8h/n), h = 1..n."""
    return _lucent.alibi_slopes(n_heads)


def softmax(x, temperature: float = 1.0) -> np.ndarray:
    """softmax(x / T) over the last axis (T finite and > 0), float32."""
    return _lucent.softmax(np.ascontiguousarray(x, dtype=np.float32), temperature)
