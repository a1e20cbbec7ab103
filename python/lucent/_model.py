"""``open(name)``: any model lucent runs, and the trace of its forward pass.

``open("minilm").trace("The cat sat")`` runs one forward pass recording every
intermediate (lucent's ``Trace``); the result gives each tensor by its dotted name as a
read-only numpy view (no copy), and gathers the ones the guides draw:

- ``attention`` — softmax weights, ``[layers, heads, t, t]``;
- ``q``, ``k``, ``v`` — per layer and head, ``[layers, heads, t, d_k]`` (``k`` and
  ``v`` have the key/value heads of grouped-query attention);
- ``scores`` (Q·Kᵀ) and ``scaled`` (Q·Kᵀ/√d_k), ``[layers, heads, t, t]``;
- ``residual`` — the residual stream: the input of the first layer, then each layer's
  output, ``[layers + 1, t, d]``.

A decoder's names live under ``decoder.``, an encoder's under ``encoder.``; an
encoder-decoder trained by ``lucent train seq2seq`` has both (``stack=`` picks one).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from lucent import _lucent

__all__ = ["Model", "Trace", "open"]

_LAYER = re.compile(r"^(encoder|decoder)\.layer\.(\d+)\.(attn|cross_attn)\.([a-z_]+)$")


class Trace:
    """The named intermediates of one forward pass (see the module docs)."""

    def __init__(self, raw: "_lucent.Trace") -> None:
        self._raw = raw

    @property
    def tokens(self) -> List[str]:
        """The input's tokens, labels of the positions."""
        return self._raw.tokens

    @property
    def target_tokens(self) -> List[str]:
        """An encoder-decoder's target tokens; empty otherwise."""
        return self._raw.target_tokens

    def names(self) -> List[str]:
        """Every recorded name, in order."""
        return self._raw.names()

    def keys(self) -> List[str]:
        return self.names()

    def items(self):
        return [(n, self[n]) for n in self.names()]

    def __getitem__(self, name: str) -> np.ndarray:
        return self._raw[name]

    def __contains__(self, name: str) -> bool:
        return name in self._raw

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        return f"Trace({len(self)} tensors over {len(self.tokens)} tokens)"

    def stacks(self) -> List[str]:
        """The stacks recorded: ``encoder``, ``decoder`` or both."""
        seen = []
        for n in self.names():
            s = n.split(".", 1)[0]
            if s in ("encoder", "decoder") and s not in seen:
                seen.append(s)
        return seen

    def _stack(self, stack: Optional[str]) -> str:
        have = self.stacks()
        if stack is None:
            if not have:
                raise KeyError("the trace recorded no encoder or decoder layer")
            return have[0]
        if stack not in have:
            raise KeyError(f"stack {stack!r} not in this trace (it has {have})")
        return stack

    def layer_tensors(self, leaf: str, stack: Optional[str] = None, sublayer: str = "attn") -> np.ndarray:
        """``{stack}.layer.{i}.{sublayer}.{leaf}`` of every layer, stacked on a new first
        axis, the batch axis dropped: e.g. ``weights`` → ``[layers, heads, t, t]``."""
        stack = self._stack(stack)
        found: Dict[int, str] = {}
        for n in self.names():
            m = _LAYER.match(n)
            if m and m.group(1) == stack and m.group(3) == sublayer and m.group(4) == leaf:
                found[int(m.group(2))] = n
        if not found:
            raise KeyError(f"no {stack}.layer.*.{sublayer}.{leaf} in this trace")
        return np.stack([self[found[i]][0] for i in sorted(found)])

    def attention(self, stack: Optional[str] = None) -> np.ndarray:
        """Softmax attention weights, ``[layers, heads, t, t]``."""
        return self.layer_tensors("weights", stack)

    def q(self, stack: Optional[str] = None) -> np.ndarray:
        """Queries after projection (and RoPE), ``[layers, heads, t, d_k]``."""
        return self.layer_tensors("q", stack)

    def k(self, stack: Optional[str] = None) -> np.ndarray:
        """Keys, ``[layers, kv_heads, t, d_k]``."""
        return self.layer_tensors("k", stack)

    def v(self, stack: Optional[str] = None) -> np.ndarray:
        """Values, ``[layers, kv_heads, t, d_k]``."""
        return self.layer_tensors("v", stack)

    def scores(self, stack: Optional[str] = None) -> np.ndarray:
        """Raw scores Q·Kᵀ, ``[layers, heads, t, t]``."""
        return self.layer_tensors("scores", stack)

    def scaled(self, stack: Optional[str] = None) -> np.ndarray:
        """Scaled scores Q·Kᵀ/√d_k, ``[layers, heads, t, t]``."""
        return self.layer_tensors("scaled", stack)

    def residual(self, stack: Optional[str] = None) -> np.ndarray:
        """The residual stream, ``[layers + 1, t, d]``: what enters layer 0 (the
        embeddings, positions added), then the output of every layer."""
        stack = self._stack(stack)
        outs: Dict[int, str] = {}
        for n in self.names():
            m = re.match(rf"^{stack}\.layer\.(\d+)\.output$", n)
            if m:
                outs[int(m.group(1))] = n
        start = f"{stack}.input"
        if start not in self or not outs:
            raise KeyError(f"the trace has no {start} and {stack}.layer.*.output (trace with leaves=None)")
        return np.stack([self[start][0]] + [self[outs[i]][0] for i in sorted(outs)])


class Model:
    """A model lucent runs, of a known kind (``encoder``, ``decoder``,
    ``encoder_decoder``), opened by name or path."""

    def __init__(self, name_or_path: str, n_threads: Optional[int] = None, precision: str = "exact") -> None:
        self._raw = _lucent.Model(name_or_path, n_threads, precision)

    @property
    def name(self) -> str:
        return self._raw.name

    @property
    def precision(self) -> str:
        """How its products are computed: ``exact``, ``bf16`` or ``int8`` (docs/precision.md)."""
        return self._raw.precision

    @property
    def path(self) -> str:
        return self._raw.path

    @property
    def kind(self) -> str:
        return self._raw.kind

    @property
    def config(self) -> Dict[str, Any]:
        """lucent's checked ``ModelConfig`` as a dict."""
        return json.loads(self._raw.config_json())

    def tokens(self, text: str) -> List[Dict[str, Any]]:
        """The tokens of ``text`` as the model reads it: ``{"id", "piece", "text",
        "special"}`` each."""
        return self._raw.tokens(text)

    def trace(
        self,
        text: str,
        leaves: Optional[Sequence[str]] = None,
        layers: Optional[Sequence[int]] = None,
        prefix: Optional[str] = None,
    ) -> Trace:
        """Run the model over ``text`` recording every intermediate (or only the
        ``leaves`` such as ``["weights"]``, in the ``layers``, under ``prefix``)."""
        return Trace(
            self._raw.trace(
                text,
                list(leaves) if leaves is not None else None,
                list(layers) if layers is not None else None,
                prefix,
            )
        )

    def __repr__(self) -> str:
        return f"lucent.Model({self.name!r}, {self.kind}, family {self.config.get('family')!r})"


def open(  # noqa: A001 - as lucent::open
    name_or_path: str, n_threads: Optional[int] = None, precision: str = "exact"
) -> Model:
    """Open a model by name (``minilm``, ``smollm2``, ``gemma3``; fetched on first use)
    or by path (a ``.gguf`` file, a Hugging Face folder, a ``lucent train`` run);
    ``n_threads``: a runtime of that many kernel threads for it alone; ``precision``:
    ``exact`` (default), ``bf16`` or ``int8`` products (encoders; docs/precision.md)."""
    return Model(name_or_path, n_threads, precision)
