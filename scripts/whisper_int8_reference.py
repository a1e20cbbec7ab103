#!/usr/bin/env python3
"""How often CTranslate2's int8 Whisper gives the same greedy ids as its float32, on the
suite's clips: the bar lucent's int8 and bf16 Whisper must clear
(crates/lucent/tests/whisper_precision.rs, issue #32 item 4).

Run once, in a venv with ctranslate2==4.8.5, numpy and safetensors==0.8.0 (the
transcription benchmark's, $HOME/.cache/lucent/bench-venv-ct2, has them):

    ~/.cache/lucent/bench-venv-ct2/bin/python scripts/whisper_int8_reference.py \\
        tests/data/whisper ~/.cache/lucent

For every clip of tests/data/whisper/clips.json, the first 30-s window exactly as
scripts/whisper_reference.py fed it to CTranslate2 (the stored log-mel `CLIP/mel80`,
then zeros to 3000 frames), each model of lucent's cache in compute_type "float32" and
"int8" (1 thread, beam 1 = greedy, max_length 448, CTranslate2's default Whisper rules),
with the no-timestamps prompt (tiny.en: <|startoftranscript|> <|notimestamps|>; base:
<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>). Writes
ct2_int8_reference.json: per model and clip the generated ids of both compute types,
and how many clips have int8 ids equal to float32's.
"""
import json
import os
import sys

import ctranslate2
import numpy as np
from safetensors.numpy import load_file

N_FRAMES = 3000


def main():
    data, cache = sys.argv[1], sys.argv[2]
    meta = json.load(open(os.path.join(data, "clips.json")))
    mels = load_file(os.path.join(data, "mel_reference.safetensors"))
    keys = [os.path.splitext(os.path.basename(c["file"]))[0] for c in meta["clips"]]
    windows = {}
    for key in keys:
        mel = mels[f"{key}/mel80"]
        w = np.zeros((1, mel.shape[0], N_FRAMES), dtype=np.float32)
        n = min(mel.shape[1], N_FRAMES)
        w[0, :, :n] = mel[:, :n]
        windows[key] = w
    out = {
        "ctranslate2": ctranslate2.__version__,
        "compute_types": ["float32", "int8"],
        "prompt": "notimestamps",
        "models": {},
    }
    for name in ["whisper-tiny.en", "whisper-base"]:
        folder = os.path.join(cache, "models", name)
        tok = json.load(open(os.path.join(folder, "tokenizer.json")))
        special = {t["content"]: t["id"] for t in tok["added_tokens"]}
        runs = {}
        for compute in out["compute_types"]:
            model = ctranslate2.models.Whisper(
                folder, device="cpu", compute_type=compute, intra_threads=1
            )
            if model.is_multilingual:
                prompt = [special["<|startoftranscript|>"], special["<|en|>"], special["<|transcribe|>"]]
            else:
                prompt = [special["<|startoftranscript|>"]]
            prompt.append(special["<|notimestamps|>"])
            ids = {}
            for key in keys:
                r = model.generate(
                    ctranslate2.StorageView.from_array(windows[key]),
                    [prompt],
                    beam_size=1,
                    max_length=448,
                )[0]
                ids[key] = [int(t) for t in r.sequences_ids[0]]
            runs[compute] = (prompt, ids)
        prompt, f32 = runs["float32"]
        _, i8 = runs["int8"]
        clips = {k: {"float32": f32[k], "int8": i8[k]} for k in keys}
        equal = sum(f32[k] == i8[k] for k in keys)
        out["models"][name] = {
            "prompt": prompt,
            "clips": clips,
            "int8_equal_float32": equal,
            "clips_count": len(keys),
        }
        print(name, f"int8 ids equal float32 on {equal} of {len(keys)} clips", flush=True)
    with open(os.path.join(data, "ct2_int8_reference.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
