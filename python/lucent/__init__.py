"""lucent: a Transformer engine you can see inside, from Python.

The engine is Rust (no torch, no C++ build); this package calls it through
``lucent._lucent`` and speaks the APIs Python users already know:

- :class:`SentenceTransformer` — ``encode`` / ``similarity`` as in sentence-transformers;
- :class:`Llama` — ``create_completion`` / ``create_chat_completion`` returning the
  OpenAI-shaped dicts llama-cpp-python returns, ``tokenize`` / ``detokenize``;
- :func:`open` — any model lucent runs; ``open(name).trace(text)`` gives every
  intermediate of a forward pass as numpy arrays (attention ``[layers, heads, t, t]``,
  Q/K/V, the residual stream);
- :class:`Whisper` — ``transcribe`` returning the dict openai-whisper returns (text,
  timed segments, language);
- :mod:`lucent.tools` — the guides' tools as plain functions (``params``, ``shapes``,
  ``memory``, masks, position tables, ``softmax``).

Every call that computes releases the GIL, so Python threads run lucent in parallel.
Errors are :class:`LucentError` carrying lucent's message (which names the file, key or
argument at fault and what to do).
"""

from __future__ import annotations

from lucent._lucent import LucentError, __version__, known_models, set_threads, threads
from lucent._embed import SentenceTransformer, cos_sim, dot_score
from lucent._llama import Llama
from lucent._model import Intervened, Model, Trace, open
from lucent._whisper import Whisper
from lucent import tools

__all__ = [
    "Intervened",
    "LucentError",
    "Llama",
    "Model",
    "SentenceTransformer",
    "Trace",
    "__version__",
    "cos_sim",
    "dot_score",
    "known_models",
    "open",
    "set_threads",
    "threads",
    "tools",
    "Whisper",
]

