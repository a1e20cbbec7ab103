#!/usr/bin/env python3
"""Reference values for lucent's Whisper front-end and (phase 2) its decoder.

Run by scripts/whisper-reference.sh in a venv holding openai-whisper==20250625 (with
torch) and ctranslate2==4.8.5; the outputs are committed under tests/data/whisper/.

For every clip of clips.json (made by whisper_clips.py):

* openai-whisper's log-mel, as its transcriber makes it: the samples (16-bit clips are
  read as int16 / 32768, which is what whisper.audio.load_audio gives for them; the
  22.05 kHz stereo clip goes through load_audio itself, i.e. ffmpeg's down-mix and
  resampler), `log_mel_spectrogram(audio, 80, padding=N_SAMPLES)`, of which the
  `content_frames = frames - 3000` frames of audio are stored (mel_reference.safetensors,
  `CLIP/mel80`, shape (80, content_frames), f32); clip 00 also as 128 bins (`00/mel128`).
  The stereo clip's 16 kHz samples from ffmpeg are stored too (`stereo22k/audio16k`).
* the first 30-s window fed to CTranslate2: those frames, then zeros to 3000
  (`pad_or_trim(mel[:, :content_frames], 3000)`, as whisper.transcribe cuts it).
* CTranslate2 (compute_type float32, 1 thread, beam 1 = greedy, its default Whisper
  rules: suppress_blank, config.json's suppress_ids, max_initial_timestamp_index 50) on
  that window, for each model in the lucent cache:
    - prompts: tiny.en  [<|startoftranscript|>] (+ <|notimestamps|>);
               base     [<|startoftranscript|>, <|en|>, <|transcribe|>] (+ <|notimestamps|>);
    - greedy token ids (the generated part, without the prompt) in both modes;
    - the first step's logits as CTranslate2 returns them (return_logits_vocab: after
      its logits processors, so suppressed ids hold -3.4e38): the top 20 (ids, values)
      and the values at every 1000th id (0, 1000, ..., 51000) that is not suppressed;
      full rows (51864 floats) would be 200 KB each;
    - base: detect_language's top 5 on the same window, and the greedy ids with the
      detected language in the prompt.
Writes ct2_reference.json.
"""
import json
import os
import sys
import wave

import ctranslate2
import numpy as np
import torch
import whisper
from safetensors.numpy import save_file
from whisper.audio import N_FRAMES, N_SAMPLES, load_audio, log_mel_spectrogram, pad_or_trim

TOP_K = 20
SAMPLE_STEP = 1000


def read_int16(path):
    with wave.open(path, "rb") as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1 and w.getframerate() == 16000
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0


def first_step(logits_row):
    row = np.asarray(logits_row, dtype=np.float32)
    order = np.argsort(-row, kind="stable")[:TOP_K]
    ids = list(range(0, len(row), SAMPLE_STEP))
    ids = [i for i in ids if row[i] > -1e30]
    return {
        "top_ids": [int(i) for i in order],
        "top_logits": [float(row[i]) for i in order],
        "sampled_ids": ids,
        "sampled_logits": [float(row[i]) for i in ids],
        "suppressed": int((row < -1e30).sum()),
    }


def generate(model, features, prompt):
    r = model.generate(
        features,
        [prompt],
        beam_size=1,
        max_length=448,
        return_scores=True,
        return_logits_vocab=True,
    )[0]
    return {
        "prompt": prompt,
        "ids": [int(t) for t in r.sequences_ids[0]],
        "score": float(r.scores[0]),
        "first_step": first_step(np.array(r.logits[0][0])),
    }


def main():
    data = sys.argv[1]
    cache = sys.argv[2]
    meta = json.load(open(os.path.join(data, "clips.json")))
    torch.set_num_threads(1)
    tensors = {}
    windows = {}
    for c in meta["clips"]:
        key = os.path.splitext(os.path.basename(c["file"]))[0]
        path = os.path.join(data, c["file"])
        if c["sample_rate"] == 16000 and c["channels"] == 1:
            audio = read_int16(path)
            assert np.array_equal(audio, load_audio(path)), "ffmpeg changed a 16 kHz clip"
        else:
            audio = load_audio(path)
            tensors[f"{key}/audio16k"] = audio.astype(np.float32)
        mel = log_mel_spectrogram(torch.from_numpy(audio), 80, padding=N_SAMPLES)
        content = mel.shape[-1] - N_FRAMES
        tensors[f"{key}/mel80"] = mel[:, :content].numpy().astype(np.float32).copy()
        if key == "00":
            mel128 = log_mel_spectrogram(torch.from_numpy(audio), 128, padding=N_SAMPLES)
            tensors[f"{key}/mel128"] = mel128[:, :content].numpy().astype(np.float32).copy()
        windows[key] = pad_or_trim(mel[:, :content], N_FRAMES).numpy()[None].astype(np.float32).copy()
        c["content_frames"] = int(content)
    save_file(tensors, os.path.join(data, "mel_reference.safetensors"))

    out = {
        "ctranslate2": ctranslate2.__version__,
        "openai_whisper": "20250625",
        "torch": torch.__version__,
        "compute_type": "float32",
        "top_k": TOP_K,
        "sample_step": SAMPLE_STEP,
        "models": {},
    }
    for name in ["whisper-tiny.en", "whisper-base"]:
        folder = os.path.join(cache, "models", name)
        model = ctranslate2.models.Whisper(folder, device="cpu", compute_type="float32", intra_threads=1)
        tok = json.load(open(os.path.join(folder, "tokenizer.json")))
        special = {t["content"]: t["id"] for t in tok["added_tokens"]}
        sot = special["<|startoftranscript|>"]
        nots = special["<|notimestamps|>"]
        if model.is_multilingual:
            base_prompt = [sot, special["<|en|>"], special["<|transcribe|>"]]
        else:
            base_prompt = [sot]
        clips = {}
        for c in meta["clips"]:
            key = os.path.splitext(os.path.basename(c["file"]))[0]
            features = ctranslate2.StorageView.from_array(windows[key])
            entry = {
                "notimestamps": generate(model, features, base_prompt + [nots]),
                "timestamps": generate(model, features, base_prompt),
            }
            text_tok = whisper.tokenizer.get_tokenizer(multilingual=model.is_multilingual)
            words = [t for t in entry["notimestamps"]["ids"] if t < text_tok.eot]
            entry["text"] = text_tok.decode(words)
            if model.is_multilingual:
                langs = model.detect_language(features)[0][:5]
                entry["detected"] = [[l, float(p)] for l, p in langs]
                lang_id = special[langs[0][0]]
                prompt = [sot, lang_id, special["<|transcribe|>"], nots]
                entry["detected_notimestamps"] = generate(model, features, prompt)
            clips[key] = entry
            print(name, key, repr(entry["text"]), flush=True)
        out["models"][name] = {
            "multilingual": bool(model.is_multilingual),
            "prompt_notimestamps": base_prompt + [nots],
            "prompt_timestamps": base_prompt,
            "clips": clips,
        }
    with open(os.path.join(data, "ct2_reference.json"), "w") as f:
        json.dump(out, f)
    with open(os.path.join(data, "clips.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
