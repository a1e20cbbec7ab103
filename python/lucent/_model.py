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
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from lucent import _lucent

__all__ = ["Intervened", "Model", "Trace", "open"]

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

    # --- TransformerLens-style hooks and interventions (issue #34) -------------------

    def hook_points(self) -> List[Tuple[str, str, str]]:
        """Every hook point in pass order: ``(TransformerLens name, trace name, kind)``,
        kind ``rows`` (batch, pos, x), ``heads`` or ``pattern``."""
        return self._raw.hook_points()

    def hook_names(self) -> List[str]:
        """TransformerLens's names of this model's hook points, in pass order."""
        return [p[0] for p in self.hook_points()]

    def _point(self, name: str) -> Tuple[str, str]:
        for tl, trace_name, kind in self.hook_points():
            if tl == name:
                return trace_name, kind
        raise KeyError(f"no hook point named {name!r}; Model.hook_names() lists them")

    def run_with_cache(self, text: str) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """One plain pass over ``text``: ``(logits, cache)``. ``logits`` is
        ``(batch 1, pos, d_vocab)``; ``cache`` maps every TransformerLens hook name to a
        numpy array in TransformerLens's shape (``hook_pattern`` (batch, head, q, k);
        ``hook_q/k/v/z`` (batch, pos, head, d_head); the residual stream and the other
        rows (batch, pos, d))."""
        return _logits_and_cache(self, self._raw.run_edited(text, None, [], None))

    def run_with_hooks(
        self,
        text: str,
        fwd_hooks: Sequence[Tuple[str, Callable[..., Optional[np.ndarray]]]] = (),
    ) -> np.ndarray:
        """The logits ``(1, pos, d_vocab)`` of a pass over ``text`` in which each hook
        ``(name, fn)`` sees its point's value (TransformerLens's shape, a read-only
        array) as ``fn(value, hook)`` (``hook.name`` is the name) and may return a new
        array of that shape, which the pass then carries on with.

        How: the hooks run in pass order, each on a pass that already carries the
        values written by the hooks before it; a returned array becomes an exact write
        of that point (a patch of every element), so a hook that returns its input
        unchanged leaves every bit as it was. A pass per hook, then the final one."""
        order = {n: i for i, n in enumerate(self.hook_names())}
        for name, _ in fwd_hooks:
            self._point(name)
        hooks = sorted(fwd_hooks, key=lambda h: order[h[0]])
        patches: List[Tuple[str, np.ndarray]] = []
        for name, fn in hooks:
            trace_name, kind = self._point(name)
            leaf = trace_name.rsplit(".", 1)[-1]
            tr = self._raw.run_edited(text, None, patches, [leaf])
            value = _to_tl(tr[trace_name], kind)
            out = fn(value, _Hook(name))
            if out is None:
                continue
            out = np.asarray(out, dtype=np.float32)
            if out.shape != value.shape:
                raise ValueError(f"hook {name}: returned shape {out.shape}, the point holds {value.shape}")
            patches = [p for p in patches if p[0] != trace_name]
            patches.append((trace_name, np.ascontiguousarray(_from_tl(out, kind))))
        tr = self._raw.run_edited(text, None, patches, [])
        return np.asarray(tr["logits"])[None]

    def logit_attribution(self, text: str, token: Union[str, int]) -> Dict[str, Any]:
        """Direct logit attribution of the next token after ``text`` (``token``: a text
        that is one token, e.g. ``" Paris"``, or its id), TransformerLens's
        ``logit_attrs`` with the cached final-norm scale: a dict with ``heads`` (layer,
        head) and ``mlp`` (layer,) as numpy arrays, ``embed``, ``attn_rest`` (layer,),
        ``rest``, ``sum`` (every term added), ``logit_f32`` (the logit from the final
        residual stream, which the terms add up to), ``logit`` (the engine's),
        ``scale`` and ``target_id``."""
        if isinstance(token, str):
            raw = self._raw.logit_attribution_json(text, None, token)
        else:
            raw = self._raw.logit_attribution_json(text, int(token), None)
        out = json.loads(raw)
        for key in ("heads", "mlp", "attn_rest"):
            out[key] = np.asarray(out[key], dtype=np.float64)
        return out

    def intervene(self, interventions: Sequence[Dict[str, Any]]) -> "Intervened":
        """This model seen through ``interventions``: dicts of lucent's Intervention
        shape ``{"hook", "op", "head", "unit", "positions", "keys", "value", "from"}``
        (the CLI's ``--intervene``, the server's ``lucent.interventions``)."""
        return Intervened(self, list(interventions))

    def __repr__(self) -> str:
        return f"lucent.Model({self.name!r}, {self.kind}, family {self.config.get('family')!r})"


class _Hook:
    """What a ``run_with_hooks`` function gets as its ``hook`` argument."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


def _to_tl(a: np.ndarray, kind: str) -> np.ndarray:
    """lucent's (b, h, t, d) per-head layout → TransformerLens's (b, t, h, d)."""
    return a.transpose(0, 2, 1, 3) if kind == "heads" else a


def _from_tl(a: np.ndarray, kind: str) -> np.ndarray:
    return a.transpose(0, 2, 1, 3) if kind == "heads" else a


def _logits_and_cache(model: Model, tr: "_lucent.Trace") -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    cache = {}
    for tl, trace_name, kind in model.hook_points():
        if trace_name in tr:
            cache[tl] = _to_tl(tr[trace_name], kind)
    return np.asarray(tr["logits"])[None], cache


class Intervened:
    """A model seen through interventions (``Model.intervene``)."""

    def __init__(self, model: Model, interventions: List[Dict[str, Any]]) -> None:
        self.model = model
        self.interventions = interventions
        self._json = json.dumps(interventions)

    def logits(self, text: str) -> np.ndarray:
        """The intervened pass's logits, ``(1, pos, d_vocab)``."""
        tr = self.model._raw.run_edited(text, self._json, [], [])
        return np.asarray(tr["logits"])[None]

    def run_with_cache(self, text: str) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
        """``Model.run_with_cache`` of the intervened pass (the cache holds the written
        values)."""
        return _logits_and_cache(self.model, self.model._raw.run_edited(text, self._json, [], None))

    def generate(self, text: str, max_tokens: int = 16) -> str:
        """Greedy continuation under the interventions (KV-cached)."""
        return self.model._raw.generate_intervened(text, self._json, max_tokens)


def open(  # noqa: A001 - as lucent::open
    name_or_path: str, n_threads: Optional[int] = None, precision: str = "exact"
) -> Model:
    """Open a model by name (``minilm``, ``smollm2``, ``gemma3``; fetched on first use)
    or by path (a ``.gguf`` file, a Hugging Face folder, a ``lucent train`` run);
    ``n_threads``: a runtime of that many kernel threads for it alone; ``precision``:
    ``exact`` (default), ``bf16`` or ``int8`` products (encoders; docs/precision.md)."""
    return Model(name_or_path, n_threads, precision)
