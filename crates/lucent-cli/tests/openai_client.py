"""The official `openai` Python client against `lucent serve` (run by tests/serve.rs).

Usage: python openai_client.py BASE_URL
Prints one JSON object with what each call returned, for the Rust test to compare with
`lucent generate` and `lucent embed`.
"""

import json
import sys

import openai
from openai import OpenAI

base = sys.argv[1]
client = OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0, timeout=120)
out = {"openai_version": openai.__version__}

question = [{"role": "user", "content": "What is the capital of France?"}]

r = client.chat.completions.create(model="smollm2", messages=question, temperature=0, max_tokens=24)
out["chat"] = {
    "object": r.object,
    "text": r.choices[0].message.content,
    "role": r.choices[0].message.role,
    "finish_reason": r.choices[0].finish_reason,
    "usage": r.usage.model_dump(exclude_none=True),
}

text, finish, usage, chunks = "", None, None, 0
stream = client.chat.completions.create(
    model="smollm2",
    messages=question,
    temperature=0,
    max_tokens=24,
    stream=True,
    stream_options={"include_usage": True},
    logprobs=True,
    top_logprobs=3,
)
logprobs = []
for chunk in stream:
    chunks += 1
    if chunk.choices:
        c = chunk.choices[0]
        text += c.delta.content or ""
        finish = c.finish_reason or finish
        if c.logprobs and c.logprobs.content:
            for t in c.logprobs.content:
                logprobs.append({"token": t.token, "bytes": t.bytes, "logprob": t.logprob, "top": len(t.top_logprobs)})
    if chunk.usage:
        usage = chunk.usage.model_dump(exclude_none=True)
out["chat_stream"] = {"text": text, "finish_reason": finish, "usage": usage, "chunks": chunks, "logprobs": logprobs}

r = client.completions.create(model="smollm2", prompt="The capital of France is", temperature=0, max_tokens=16, logprobs=2)
c = r.choices[0]
out["completion"] = {
    "object": r.object,
    "text": c.text,
    "finish_reason": c.finish_reason,
    "tokens": c.logprobs.tokens,
    "token_logprobs": c.logprobs.token_logprobs,
    "top_logprobs": c.logprobs.top_logprobs,
    "usage": r.usage.model_dump(exclude_none=True),
}

text = ""
for chunk in client.completions.create(model="smollm2", prompt="The capital of France is", temperature=0, max_tokens=16, stream=True):
    text += chunk.choices[0].text if chunk.choices else ""
out["completion_stream"] = {"text": text}

texts = ["A cat sat on the mat.", "Dogs bark at night."]
e = client.embeddings.create(model="minilm", input=texts)  # the client asks for base64
out["embeddings"] = [d.embedding for d in e.data]
out["embeddings_usage"] = e.usage.model_dump()
f = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
out["embeddings_float"] = [d.embedding for d in f.data]

out["models"] = sorted(m.id for m in client.models.list().data)

try:
    client.chat.completions.create(model="no-such-model", messages=question)
except openai.NotFoundError as err:
    out["not_found"] = {"status": err.status_code, "code": err.code}
try:
    client.chat.completions.create(model="smollm2", messages=question, temperature=5)
except openai.BadRequestError as err:
    out["bad_request"] = {"status": err.status_code, "param": err.param}

print(json.dumps(out))
