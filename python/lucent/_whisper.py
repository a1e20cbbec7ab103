"""``Whisper``: speech to text with openai-whisper's ``transcribe`` API.

``Whisper(name).transcribe(audio)`` returns the dict openai-whisper's ``transcribe``
returns: ``text``, ``language`` and ``segments`` (each with ``id``, ``start``, ``end``,
``text``, ``tokens``, ``temperature``, ``avg_logprob``, ``compression_ratio``,
``no_speech_prob``). The numbers are lucent's (the same as ``lucent transcribe --json``):
greedy tokens equal CTranslate2's (faster-whisper's engine) on the reference clips.

The arguments keep openai-whisper's names and meaning: ``language`` (None: detected in
the first 30-second window for multilingual models), ``task`` (``transcribe`` or
``translate``), ``temperature`` (one value or the fallback sequence), the three
fallback thresholds, ``beam_size``, ``without_timestamps``. ``audio`` is a path to a WAV
file (8–48 kHz, mono or stereo, 8/16/24/32-bit integer or 32-bit float samples), or a
1-D float32 numpy array of 16 kHz mono samples as ``whisper.load_audio`` gives.

Where the two differ, on purpose: no model hub (``name_or_path`` is a name lucent knows,
``whisper-tiny.en`` / ``whisper-base``, fetched from the package registry on first use,
or a CTranslate2 Whisper folder); only WAV files are read (no ffmpeg); options lucent does
not implement (``condition_on_previous_text=True``, ``initial_prompt``, ``best_of``, …) are
refused by name when set, never ignored — lucent decodes each window without the previous
window's text, as ``condition_on_previous_text=False`` does.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np

from lucent import _lucent

__all__ = ["Whisper"]

# openai-whisper's options lucent does not implement, with their "off" value.
_UNSUPPORTED_OFF = {
    "condition_on_previous_text": False,
    "initial_prompt": None,
    "carry_initial_prompt": False,
    "best_of": None,
    "patience": None,
    "length_penalty": None,
    "prompt": None,
    "prefix": None,
    "suppress_blank": True,
    "suppress_tokens": "-1",
    "clip_timestamps": "0",
    "hallucination_silence_threshold": None,
    "fp16": None,
}

_DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def _refuse_unsupported(options: Dict[str, Any]) -> None:
    for name, value in options.items():
        if name not in _UNSUPPORTED_OFF:
            raise TypeError(f"unexpected argument {name!r}")
        if name == "fp16":
            continue  # a precision hint: lucent computes in f32 on the CPU either way
        if value != _UNSUPPORTED_OFF[name]:
            raise ValueError(
                f"{name}={value!r} is not supported by lucent; leave it at {_UNSUPPORTED_OFF[name]!r}"
            )


def _write_wav_f32(path: str, samples: np.ndarray) -> None:
    """A 16 kHz mono 32-bit float WAV (format 3, IEEE float) holding ``samples``."""
    data = np.ascontiguousarray(samples, dtype="<f4").tobytes()
    rate, channels, bits = 16000, 1, 32
    fmt = struct.pack("<HHIIHH", 3, channels, rate, rate * channels * bits // 8, channels * bits // 8, bits)
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 4 + (8 + len(fmt)) + (8 + len(data))) + b"WAVE")
        f.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt)
        f.write(b"data" + struct.pack("<I", len(data)) + data)


class Whisper:
    """A Whisper speech-to-text model, as ``whisper.load_model(name)``.

    ``name_or_path``: ``whisper-tiny.en`` (English), ``whisper-base`` (multilingual), or a
    CTranslate2 Whisper folder. ``n_threads``: kernel threads of a runtime of this model's
    own (``None``: lucent's default runtime). ``precision``: ``"exact"`` (default,
    CTranslate2 float32's numbers), ``"bf16"`` or ``"int8"`` (docs/precision.md). Threads
    may share one ``Whisper``: each call decodes with its own caches, and the GIL is
    released while it computes.
    """

    def __init__(
        self,
        name_or_path: str = "whisper-tiny.en",
        *,
        n_threads: Optional[int] = None,
        precision: Optional[str] = None,
    ) -> None:
        self._core = _lucent.Transcriber(str(name_or_path), n_threads, precision)

    @property
    def precision(self) -> str:
        """How the model's products are computed: ``exact``, ``bf16`` or ``int8``."""
        return self._core.precision

    @property
    def name(self) -> str:
        """The model's name."""
        return self._core.name

    @property
    def n_threads(self) -> int:
        """The kernel threads this model's calls use."""
        return self._core.n_threads

    @property
    def is_multilingual(self) -> bool:
        """Whether the model reads language and task tokens (and detects the language)."""
        return self._core.is_multilingual

    @property
    def n_mels(self) -> int:
        """Mel bins of the front-end (80, or 128 for the large-v3 models)."""
        return self._core.n_mels

    def __repr__(self) -> str:
        return f"Whisper({self.name!r}, n_threads={self.n_threads})"

    def transcribe(
        self,
        audio: Union[str, "os.PathLike[str]", np.ndarray],
        *,
        verbose: Optional[bool] = None,
        language: Optional[str] = None,
        task: str = "transcribe",
        temperature: Union[float, Sequence[float]] = _DEFAULT_TEMPERATURES,
        compression_ratio_threshold: Optional[float] = 2.4,
        logprob_threshold: Optional[float] = -1.0,
        no_speech_threshold: Optional[float] = 0.6,
        beam_size: Optional[int] = None,
        without_timestamps: bool = False,
        word_timestamps: bool = False,
        seed: int = 0,
        **unsupported: Any,
    ) -> Dict[str, Any]:
        """Transcribe ``audio`` (a WAV path, or 16 kHz mono float samples) in 30-second
        windows; the dict openai-whisper returns.

        ``temperature``: decoded at the first value; while a window's text repeats itself
        (compression ratio above ``compression_ratio_threshold``) or its average
        log-probability is below ``logprob_threshold``, it is decoded again at the next
        (sampled with ``seed``). ``beam_size``: beams at temperature 0 (None or 1: greedy).
        A window whose ``<|nospeech|>`` probability exceeds ``no_speech_threshold`` while
        its log-probability is low is skipped as silence. ``without_timestamps``: one
        segment per window instead of the model's timed segments. ``word_timestamps``:
        each segment gets ``words`` (``word``, ``start``, ``end``, ``probability``), from
        the cross-attention of the model's alignment heads and dynamic time warping, as
        openai-whisper computes them. ``verbose=True`` prints
        each segment as ``[start --> end] text`` when the transcript is done.
        """
        _refuse_unsupported(unsupported)
        temps = [float(temperature)] if isinstance(temperature, (int, float)) else [float(t) for t in temperature]
        beams = 1 if beam_size is None else int(beam_size)
        if isinstance(audio, np.ndarray):
            if audio.ndim != 1:
                raise ValueError(f"audio samples must be 1-D (16 kHz mono), got shape {audio.shape}")
            fd, tmp = tempfile.mkstemp(suffix=".wav", prefix="lucent-audio-")
            os.close(fd)
            try:
                _write_wav_f32(tmp, audio.astype(np.float32, copy=False))
                raw = self._run(tmp, language, task, without_timestamps, beams, temps,
                                compression_ratio_threshold, logprob_threshold, no_speech_threshold, seed, word_timestamps)
            finally:
                os.unlink(tmp)
        else:
            raw = self._run(os.fspath(audio), language, task, without_timestamps, beams, temps,
                            compression_ratio_threshold, logprob_threshold, no_speech_threshold, seed, word_timestamps)
        t = json.loads(raw)
        segments = []
        for i, s in enumerate(t["segments"]):
            seg = {
                "id": i,
                "start": s["start"],
                "end": s["end"],
                "text": s["text"],
                "tokens": s["tokens"],
                "temperature": s["temperature"],
                "avg_logprob": s["avg_logprob"],
                "compression_ratio": s["compression_ratio"],
                "no_speech_prob": s["no_speech_prob"],
            }
            if s.get("words") is not None:
                seg["words"] = s["words"]
            segments.append(seg)
        if verbose:
            for s in segments:
                print(f"[{_hms(s['start'])} --> {_hms(s['end'])}] {s['text'].strip()}", file=sys.stdout)
        return {"text": t["text"], "segments": segments, "language": t["language"], "duration": t["duration"]}

    def _run(self, path, language, task, without_timestamps, beams, temps, crt, lpt, nst, seed, words) -> str:
        return self._core.transcribe_json(
            path,
            language=language,
            task=task,
            timestamps=not without_timestamps,
            beam_size=beams,
            temperatures=temps,
            compression_ratio_threshold=crt,
            logprob_threshold=lpt,
            no_speech_threshold=nst,
            seed=seed,
            word_timestamps=words,
        )


def _hms(t: float) -> str:
    ms = round(t * 1000)
    return f"{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"
