"""``SentenceTransformer``: sentence embeddings with sentence-transformers' API.

``encode`` takes the arguments sentence-transformers users pass, with the same meaning:

- ``batch_size`` — texts per forward pass (texts are sorted by length first, so each
  batch pads little). A text's vector is the same bit for bit whatever the batch size,
  and equal to `lucent embed`'s (lucent's kernels sum every number in one order whatever
  the other rows) — sentence-transformers#2312 reports changes with the batch size.
- ``normalize_embeddings`` — L2-normalise each vector (on top of the model's own
  ``Normalize`` module, if it has one, as sentence-transformers does).
- ``convert_to_numpy`` — one (n, d) float32 array (default), else a list of 1-D arrays.
- ``show_progress_bar`` — a bar on stderr (``None``: off).
- a single string gives one 1-D vector, a list gives a 2-D array.

``similarity`` is cosine similarity (the default of sentence-transformers models) or
another of its functions: ``dot``, ``euclidean`` (negative L2), ``manhattan``
(negative L1).
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, List, Optional, Sequence, Union

import numpy as np

from lucent import _lucent

__all__ = ["SentenceTransformer", "cos_sim", "dot_score"]

SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")


def _as_2d(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"embeddings must be 1-D or 2-D, got shape {a.shape}")
    return a


def cos_sim(a, b) -> np.ndarray:
    """Cosine similarity of every row of ``a`` with every row of ``b``: (n, m)."""
    a, b = _as_2d(a), _as_2d(b)
    na = np.linalg.norm(a, axis=1, keepdims=True)
    nb = np.linalg.norm(b, axis=1, keepdims=True)
    na[na == 0] = 1.0
    nb[nb == 0] = 1.0
    return (a / na) @ (b / nb).T


def dot_score(a, b) -> np.ndarray:
    """Dot product of every row of ``a`` with every row of ``b``: (n, m)."""
    return _as_2d(a) @ _as_2d(b).T


class _Progress:
    """A small progress bar on stderr (no dependency on tqdm)."""

    def __init__(self, total: int, enabled: bool, label: str = "Batches") -> None:
        self.total, self.done, self.enabled, self.label = total, 0, enabled, label
        self.start = time.perf_counter()

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        rate = self.done / max(time.perf_counter() - self.start, 1e-9)
        sys.stderr.write(
            f"\r{self.label}: {self.done}/{self.total} [{'#' * filled}{'.' * (width - filled)}] {rate:.1f}/s"
        )
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


class SentenceTransformer:
    """A sentence-embedding model, as ``sentence_transformers.SentenceTransformer``.

    ``model_name_or_path`` is a name lucent knows (``minilm`` = all-MiniLM-L6-v2, also
    accepted as ``all-MiniLM-L6-v2`` / ``sentence-transformers/all-MiniLM-L6-v2``) or a
    local folder in sentence-transformers / Hugging Face layout (config.json,
    model.safetensors, tokenizer.json, modules.json …). ``device`` is accepted for
    compatibility and must be ``None`` or ``"cpu"``. ``n_threads``: kernel threads of a
    runtime of this model's own (``None``: lucent's default runtime, the machine's
    physical cores unless :func:`lucent.set_threads` said otherwise). ``precision``: how
    the encoder's products are computed, ``"exact"`` (sentence-transformers' numbers, the
    default), ``"bf16"`` or ``"int8"`` (faster, their distance to exact in
    docs/precision.md); not ``encode``'s ``precision``, which is about the output.
    """

    _ALIASES = {
        "all-MiniLM-L6-v2": "minilm",
        "sentence-transformers/all-MiniLM-L6-v2": "minilm",
    }

    def __init__(
        self,
        model_name_or_path: str = "minilm",
        device: Optional[str] = None,
        *,
        n_threads: Optional[int] = None,
        precision: str = "exact",
    ) -> None:
        if device not in (None, "cpu"):
            raise ValueError(f"device {device!r}: lucent runs on the CPU; pass device=None or 'cpu'")
        spec = self._ALIASES.get(model_name_or_path, model_name_or_path)
        self._model = _lucent.Embedder(spec, n_threads, precision)
        self.similarity_fn_name = "cosine"

    # -- what the model is -------------------------------------------------------------

    @property
    def max_seq_length(self) -> int:
        """Longest input in tokens (special tokens included); longer inputs are cut."""
        return self._model.max_seq_length

    @property
    def precision(self) -> str:
        """How the encoder's products are computed: ``exact``, ``bf16`` or ``int8``."""
        return self._model.precision

    @property
    def n_threads(self) -> int:
        """Kernel threads this model's calls use."""
        return self._model.n_threads

    @property
    def device(self) -> str:
        """Always ``"cpu"``."""
        return "cpu"

    def get_sentence_embedding_dimension(self) -> int:
        """Embedding width d."""
        return self._model.dim

    def tokenize(self, texts: Sequence[str]) -> List[List[int]]:
        """Token ids of each text as the model reads it (``[CLS] … [SEP]``, truncated)."""
        return self._model.tokenize(list(texts))

    def __repr__(self) -> str:
        m = self._model
        return (
            f"SentenceTransformer({m.name!r}: {m.dim}-d, {m.pooling} pooling"
            f"{', normalised' if m.normalize else ''}, max {m.max_seq_length} tokens)"
        )

    # -- embeddings ----------------------------------------------------------------------

    def encode(
        self,
        sentences: Union[str, Iterable[str]],
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
        batch_size: int = 32,
        show_progress_bar: Optional[bool] = None,
        output_value: Optional[str] = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: Optional[str] = None,
        normalize_embeddings: bool = False,
        **kwargs,
    ) -> Union[np.ndarray, List[np.ndarray]]:
        """Embed one text (a 1-D vector) or many (an (n, d) float32 array).

        Each argument means what it means in sentence-transformers; see the module
        docs. ``convert_to_tensor`` gives the same (n, d) array (lucent has no torch;
        ``torch.from_numpy`` takes it without a copy). ``prompt`` is put in front of
        every text; ``prompt_name`` needs prompts stored with the model, which lucent's
        models have none of.
        """
        if kwargs:
            raise TypeError(f"encode() got unexpected arguments: {sorted(kwargs)}")
        if output_value != "sentence_embedding":
            raise ValueError(
                f"output_value={output_value!r}: lucent returns sentence embeddings "
                "(output_value='sentence_embedding'); use lucent.open(name).trace(text) for token vectors"
            )
        if precision != "float32":
            raise ValueError(f"precision={precision!r}: lucent returns float32 embeddings")
        if device not in (None, "cpu"):
            raise ValueError(f"device {device!r}: lucent runs on the CPU")
        if prompt_name is not None:
            raise ValueError(
                f"prompt_name={prompt_name!r}: this model stores no prompts; pass prompt='…' instead"
            )
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"sentence {i} is a {type(t).__name__}, not a str")
        if prompt:
            texts = [prompt + t for t in texts]
        d = self._model.dim
        if not texts:
            out = np.zeros((0, d), dtype=np.float32)
        elif show_progress_bar:
            # lucent sorts the texts by token count (longest first, stably) and embeds
            # them `batch_size` at a time; chunks of whole batches of that order give the
            # same batches, so the same vectors bit for bit, with progress in between.
            lengths = [len(ids) for ids in self._model.tokenize(texts)]
            order = sorted(range(len(texts)), key=lambda i: -lengths[i])
            bar = _Progress(len(texts), True, "Sentences")
            chunk = batch_size * 4
            out = np.empty((len(texts), d), dtype=np.float32)
            for s in range(0, len(order), chunk):
                idx = order[s : s + chunk]
                out[idx] = self._model.embed([texts[i] for i in idx], batch_size, normalize_embeddings)
                bar.update(len(idx))
        else:
            out = self._model.embed(texts, batch_size, normalize_embeddings)
        if single:
            return out[0]
        if convert_to_numpy or convert_to_tensor:
            return out
        return list(out)

    encode_query = encode
    encode_document = encode

    def similarity(self, embeddings1, embeddings2) -> np.ndarray:
        """The (n, m) similarity of two sets of embeddings, by ``similarity_fn_name``."""
        fn = self.similarity_fn_name
        a, b = _as_2d(embeddings1), _as_2d(embeddings2)
        if fn == "cosine":
            return cos_sim(a, b)
        if fn == "dot":
            return dot_score(a, b)
        if fn == "euclidean":
            return -np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))
        if fn == "manhattan":
            return -np.abs(a[:, None, :] - b[None, :, :]).sum(-1)
        raise ValueError(f"similarity_fn_name {fn!r} is not one of {SIMILARITY_FUNCTIONS}")

    def similarity_pairwise(self, embeddings1, embeddings2) -> np.ndarray:
        """Similarity of row i of one with row i of the other: (n,)."""
        a, b = _as_2d(embeddings1), _as_2d(embeddings2)
        if a.shape != b.shape:
            raise ValueError(f"pairwise similarity needs equal shapes, got {a.shape} and {b.shape}")
        return np.array([self.similarity(x, y)[0, 0] for x, y in zip(a, b)], dtype=np.float32)
