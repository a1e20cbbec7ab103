#!/usr/bin/env python3
"""Speak the Whisper test sentences with espeak-ng and write the clips lucent tests on.

Run by scripts/whisper-reference.sh (once; the outputs are committed). For each sentence
it calls libespeak-ng through ctypes (the library, not the CLI, because only the
library reports where each word starts in the audio: espeakEVENT_WORD, in ms), so the
audio and the word times come from one synthesis. espeak-ng (1.51) is not deterministic: the same call gives clips a few
samples apart, so the clips are committed rather than made again in the tests. espeak-ng speaks at 22050 Hz mono,
16-bit; sox (`rate -v`, no dither) converts each clip to 16 kHz mono 16-bit, the form
Whisper reads. One clip is also kept at 22050 Hz in stereo (left: the voice, right: the
voice at 0.6 and delayed by 1 ms) to test lucent's down-mix and resampler against
Whisper's own loader (ffmpeg).

Writes into OUT (default tests/data/whisper):
  clips/NN.wav          16 kHz mono 16-bit
  clips/stereo22k.wav   22050 Hz stereo 16-bit
  clips.json            per clip: file, text, voice, speed (wpm), samples, and the word
                        list [{word, start, end}] in seconds (end = the next word's start,
                        or the end of the speech for the last word)

It also synthesises every sentence twice and reports whether espeak-ng is deterministic.
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import wave

import numpy as np

# (text, voice, words per minute): two voices × two speeds, three sentences each.
SENTENCES = [
    ("The quick brown fox jumps.", "en-us", 160),
    ("Can you hear me now?", "en-us", 160),
    ("She sells seashells by the sea.", "en-us", 160),
    ("The meeting starts at nine thirty.", "en-us", 220),
    ("Turn left at the second light.", "en-us", 220),
    ("It was the best of times.", "en-us", 220),
    ("Rain is expected tomorrow.", "en+f3", 160),
    ("Please call Stella today.", "en+f3", 160),
    ("Attention relates every word.", "en+f3", 160),
    ("My number is five five five.", "en+f3", 220),
    ("How much wood?", "en+f3", 220),
    ("Computers are changing everything.", "en+f3", 220),
]
STEREO_INDEX = 10  # which sentence is also kept as the 22050 Hz stereo clip

AUDIO_OUTPUT_SYNCHRONOUS = 2
EVENT_WORD, EVENT_END, EVENT_MSG_TERMINATED = 1, 5, 6
POS_CHARACTER = 1
ESPEAK_RATE = 1


class EspeakEvent(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(EspeakEvent)
)


class Espeak:
    def __init__(self):
        self.lib = ctypes.CDLL("libespeak-ng.so.1")
        self.rate = self.lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 500, None, 0)
        if self.rate <= 0:
            sys.exit("espeak_Initialize failed")
        self.samples = []
        self.events = []
        self.cb = CALLBACK(self._callback)
        self.lib.espeak_SetSynthCallback(self.cb)

    def _callback(self, wav, n, events):
        if n > 0:
            self.samples.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        i = 0
        while events[i].type != 0:  # espeakEVENT_LIST_TERMINATED
            e = events[i]
            self.events.append((e.type, e.text_position, e.length, e.audio_position))
            i += 1
        return 0

    def speak(self, text, voice, wpm):
        """Returns (int16 samples at self.rate, [(char_pos, length, ms)] word events)."""
        self.samples, self.events = [], []
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
            sys.exit(f"espeak-ng has no voice {voice}")
        self.lib.espeak_SetParameter(ESPEAK_RATE, wpm, 0)
        data = text.encode()
        rc = self.lib.espeak_Synth(data, len(data) + 1, 0, POS_CHARACTER, 0, 0, None, None)
        if rc != 0:
            sys.exit(f"espeak_Synth failed ({rc})")
        self.lib.espeak_Synchronize()
        audio = np.concatenate(self.samples) if self.samples else np.zeros(0, np.int16)
        words = [(p, n, ms) for (t, p, n, ms) in self.events if t == EVENT_WORD]
        return audio.astype(np.int16), words


def write_wav(path, samples, rate, channels=1):
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())


def read_wav(path):
    with wave.open(path, "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2"), w.getframerate()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/whisper"
    os.makedirs(os.path.join(out, "clips"), exist_ok=True)
    es = Espeak()
    clips = []
    deterministic = True
    for i, (text, voice, wpm) in enumerate(SENTENCES):
        audio, words = es.speak(text, voice, wpm)
        again, words2 = es.speak(text, voice, wpm)
        if not (np.array_equal(audio, again) and words == words2):
            deterministic = False
        # Speech ends at the last non-silent sample; keep 0.15 s of silence after it.
        loud = np.nonzero(np.abs(audio.astype(np.int32)) > 64)[0]
        speech_end = (loud[-1] + 1) if len(loud) else len(audio)
        audio = audio[: min(len(audio), speech_end + int(0.15 * es.rate))]
        name = f"{i:02d}.wav"
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, "raw.wav")
            write_wav(raw, audio, es.rate)
            dst = os.path.join(out, "clips", name)
            subprocess.run(
                ["sox", "-D", raw, "-r", "16000", "-b", "16", "-c", "1", dst, "rate", "-v"],
                check=True,
            )
        n16, rate16 = read_wav(dst)
        assert rate16 == 16000
        word_list = []
        for j, (pos, length, ms) in enumerate(words):
            # text_position counts characters from 1.
            word = text.encode()[pos - 1 : pos - 1 + length].decode()
            end = words[j + 1][2] / 1000 if j + 1 < len(words) else speech_end / es.rate
            word_list.append({"word": word, "start": ms / 1000, "end": round(end, 3)})
        clips.append(
            {
                "file": f"clips/{name}",
                "text": text,
                "voice": voice,
                "wpm": wpm,
                "sample_rate": 16000,
                "channels": 1,
                "samples": int(len(n16)),
                "words": word_list,
            }
        )
        if i == STEREO_INDEX:
            left = audio.astype(np.float64)
            delay = int(0.001 * es.rate)
            right = np.concatenate([np.zeros(delay), left[:-delay]]) * 0.6
            stereo = np.stack([left, right], axis=1).round().astype(np.int16).reshape(-1)
            write_wav(os.path.join(out, "clips", "stereo22k.wav"), stereo, es.rate, channels=2)
            clips.append(
                {
                    "file": "clips/stereo22k.wav",
                    "text": text,
                    "voice": voice,
                    "wpm": wpm,
                    "sample_rate": es.rate,
                    "channels": 2,
                    "samples": int(len(left)),
                    "words": word_list,
                }
            )
    meta = {
        "espeak_ng": subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout.strip(),
        "espeak_rate": es.rate,
        "resampler": "sox -D IN -r 16000 -b 16 -c 1 OUT rate -v",
        "deterministic": deterministic,
        "clips": clips,
    }
    with open(os.path.join(out, "clips.json"), "w") as f:
        json.dump(meta, f, indent=1)
    total = sum(os.path.getsize(os.path.join(out, c["file"])) for c in clips)
    print(f"{len(clips)} clips, {total / 1024:.0f} KiB of audio; espeak-ng deterministic: {deterministic}")


if __name__ == "__main__":
    main()
