"""The official `openai` Python client's audio calls against `lucent serve` (run by
tests/serve.rs).

Usage: python openai_audio.py BASE_URL WAV
Prints one JSON object with what each call returned, for the Rust test to compare with
`lucent transcribe --json` (and `--words`).
"""

import json
import sys

import openai
from openai import OpenAI

base, wav = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0, timeout=300)
out = {"openai_version": openai.__version__}

with open(wav, "rb") as f:
    r = client.audio.transcriptions.create(model="whisper-tiny.en", file=f)
out["json"] = {"text": r.text}

with open(wav, "rb") as f:
    r = client.audio.transcriptions.create(
        model="whisper-tiny.en",
        file=f,
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
out["verbose"] = r.model_dump(exclude_none=True)

with open(wav, "rb") as f:
    out["srt"] = client.audio.transcriptions.create(model="whisper-tiny.en", file=f, response_format="srt")
with open(wav, "rb") as f:
    out["vtt"] = client.audio.transcriptions.create(model="whisper-tiny.en", file=f, response_format="vtt")
with open(wav, "rb") as f:
    out["text"] = client.audio.transcriptions.create(model="whisper-tiny.en", file=f, response_format="text")

# Refusals arrive as the client's exceptions, carrying lucent's message.
try:
    with open(wav, "rb") as f:
        client.audio.translations.create(model="whisper-tiny.en", file=f)
    out["translate_english_only"] = "accepted"
except openai.BadRequestError as e:
    out["translate_english_only"] = {"status": e.status_code, "message": e.message}
try:
    client.audio.transcriptions.create(model="whisper-tiny.en", file=("notes.wav", b"not a wav file at all"))
    out["not_a_wav"] = "accepted"
except openai.BadRequestError as e:
    out["not_a_wav"] = {"status": e.status_code, "message": e.message}

print(json.dumps(out))
