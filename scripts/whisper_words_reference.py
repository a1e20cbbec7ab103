"""Word-level times of faster-whisper (CTranslate2's Whisper, the same algorithm as
openai-whisper's `word_timestamps`) on the reference clips, for lucent's --words test.

    ~/.cache/lucent/bench-venv-ct2/bin/pip install faster-whisper==1.2.1
    ~/.cache/lucent/bench-venv-ct2/bin/python scripts/whisper_words_reference.py

Reads the CTranslate2 folders lucent fetched (~/.cache/lucent/models/whisper-*), runs
every clip of tests/data/whisper/clips.json with lucent's defaults (language en, greedy,
timestamps, temperature fallback 0.0…1.0 on the same thresholds, each window without the
previous text, no VAD), float32, and writes tests/data/whisper/words_reference.json:
{model: {clip: {"text": ..., "words": [[word, start, end], ...]}}}.
"""

import json
import os
from pathlib import Path

import faster_whisper
from faster_whisper import WhisperModel

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "whisper"


def main() -> None:
    clips = json.loads((DATA / "clips.json").read_text())["clips"]
    out = {"faster_whisper": faster_whisper.__version__, "models": {}}
    for name in ["whisper-tiny.en", "whisper-base"]:
        folder = os.path.expanduser(f"~/.cache/lucent/models/{name}")
        model = WhisperModel(folder, device="cpu", compute_type="float32", cpu_threads=2)
        per = {}
        for clip in clips:
            segments, _ = model.transcribe(
                str(DATA / clip["file"]),
                language="en",
                beam_size=1,
                temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
                compression_ratio_threshold=2.4,
                log_prob_threshold=-1.0,
                no_speech_threshold=0.6,
                condition_on_previous_text=False,
                word_timestamps=True,
                vad_filter=False,
            )
            segments = list(segments)
            per[clip["file"]] = {
                "text": "".join(s.text for s in segments),
                "words": [[w.word, round(float(w.start), 2), round(float(w.end), 2)] for s in segments for w in s.words],
            }
        out["models"][name] = per
    (DATA / "words_reference.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
