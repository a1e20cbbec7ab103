"""Whisper.transcribe against `lucent transcribe --json` (equal segments, tokens and
times) and the openai-whisper result shape; samples given as numpy equal the file;
bad input raises lucent's or Python's error; threads share one model."""

from __future__ import annotations

import json
import threading
import wave

import numpy as np
import pytest

import lucent
from conftest import DATA, run_cli

CLIPS = DATA / "whisper" / "clips"


@pytest.fixture(scope="session")
def tiny():
    return lucent.Whisper("whisper-tiny.en", n_threads=1)


def _cli(model: str, clip, *extra: str) -> dict:
    return json.loads(run_cli("transcribe", "-m", model, str(clip), "--json", *extra))


def _same_segments(got: dict, cli: dict) -> None:
    assert got["text"] == cli["text"] or got["text"].strip() == cli["text"]
    assert got["language"] == cli["language"]
    assert len(got["segments"]) == len(cli["segments"]) >= 1
    for i, (g, c) in enumerate(zip(got["segments"], cli["segments"])):
        assert g["id"] == i
        for k in ("start", "end", "text", "tokens"):
            assert g[k] == c[k], (k, g[k], c[k])
        # f32 fields: the CLI's JSON prints them widened to f64, the package's at f32's
        # shortest form; the same f32 either way.
        for k in ("temperature", "avg_logprob", "compression_ratio", "no_speech_prob"):
            assert np.float32(g[k]) == np.float32(c[k]), (k, g[k], c[k])


@pytest.mark.parametrize("clip", ["00.wav", "07.wav", "stereo22k.wav"])
def test_transcribe_equals_the_cli(tiny, clip):
    got = tiny.transcribe(CLIPS / clip)
    _same_segments(got, _cli("whisper-tiny.en", CLIPS / clip))
    assert set(got) >= {"text", "segments", "language"}
    seg = got["segments"][0]
    assert set(seg) >= {"id", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                        "compression_ratio", "no_speech_prob"}
    assert 0.0 <= seg["start"] < seg["end"]


def test_without_timestamps_and_beam_equal_the_cli(tiny):
    clip = CLIPS / "02.wav"
    got = tiny.transcribe(str(clip), without_timestamps=True)
    _same_segments(got, _cli("whisper-tiny.en", clip, "--no-timestamp-tokens"))
    beam = tiny.transcribe(clip, beam_size=3)
    _same_segments(beam, _cli("whisper-tiny.en", clip, "--beam", "3"))


def test_multilingual_model_detects_the_language_as_the_cli():
    base = lucent.Whisper("whisper-base")
    assert base.is_multilingual and base.n_mels == 80
    clip = CLIPS / "05.wav"
    got = base.transcribe(clip)
    assert got["language"] == "en"
    _same_segments(got, _cli("whisper-base", clip))
    _same_segments(base.transcribe(clip, language="en"), _cli("whisper-base", clip, "--language", "en"))


def test_word_timestamps_equal_the_cli(tiny):
    clip = CLIPS / "00.wav"
    got = tiny.transcribe(clip, word_timestamps=True)
    cli = _cli("whisper-tiny.en", clip, "--words")
    _same_segments(got, cli)
    for g, c in zip(got["segments"], cli["segments"]):
        assert [w["word"] for w in g["words"]] == [w["word"] for w in c["words"]]
        assert [(w["start"], w["end"]) for w in g["words"]] == [(w["start"], w["end"]) for w in c["words"]]
        assert all(0.0 <= w["probability"] <= 1.0 for w in g["words"])
    assert "words" not in tiny.transcribe(clip)["segments"][0]


def test_numpy_samples_equal_the_file(tiny):
    clip = CLIPS / "03.wav"
    with wave.open(str(clip)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    samples = pcm.astype(np.float32) / 32768.0
    assert tiny.transcribe(samples) == tiny.transcribe(clip)


def test_bad_input_is_a_clear_error(tiny, tmp_path):
    not_wav = tmp_path / "notes.wav"
    not_wav.write_text("this is not audio")
    with pytest.raises(lucent.LucentError, match="WAV|RIFF|wav"):
        tiny.transcribe(not_wav)
    with pytest.raises(lucent.LucentError):
        tiny.transcribe(tmp_path / "missing.wav")
    with pytest.raises(ValueError, match="condition_on_previous_text"):
        tiny.transcribe(CLIPS / "00.wav", condition_on_previous_text=True)
    with pytest.raises(TypeError, match="no_such_option"):
        tiny.transcribe(CLIPS / "00.wav", no_such_option=1)
    with pytest.raises(ValueError, match="task"):
        tiny.transcribe(CLIPS / "00.wav", task="summarise")
    with pytest.raises(ValueError, match="1-D"):
        tiny.transcribe(np.zeros((2, 16000), dtype=np.float32))
    with pytest.raises(lucent.LucentError, match="speech model"):
        lucent.Whisper("minilm")


def test_threads_share_one_model(tiny):
    clips = [CLIPS / "04.wav", CLIPS / "09.wav"]
    alone = [tiny.transcribe(c) for c in clips]
    got = [None, None]

    def work(i):
        got[i] = tiny.transcribe(clips[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == alone
