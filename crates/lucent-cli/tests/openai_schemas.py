"""Twenty schemas, each sampled PER times at temperature 1 through the official `openai`
client against `lucent serve` (run by tests/serve.rs).

Usage: python openai_schemas.py BASE_URL MODEL PER SCHEMAS_FILE
SCHEMAS_FILE (tests/structured_schemas.json) lists {name, prompt, schema}: simple to
nested, with enums, arrays, anyOf, $ref, required and optional keys, string patterns,
every string and array bounded so that an answer ends. Each schema is asked PER times
(8 requests at a time, seeds 1..), with max_tokens far above the longest answer.
An answer fails unless it finished with "stop", parses as JSON and validates with
`jsonschema`. Prints one JSON object: the count, the failures (each with its text and
error) and the completion tokens in all.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
from openai import OpenAI

base, model, per, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
schemas = json.load(open(path))
client = OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0, timeout=300)
# Every schema is a valid JSON schema (so that a failure is the answer's, not the test's).
for s in schemas:
    jsonschema.Draft202012Validator.check_schema(s["schema"])


def ask(i):
    s = schemas[i % len(schemas)]
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": s["prompt"]}],
        temperature=1.0,
        seed=1 + i,
        max_tokens=512,
        response_format={"type": "json_schema", "json_schema": {"name": s["name"], "schema": s["schema"], "strict": True}},
    )
    c = r.choices[0]
    fail = {"i": i, "schema": s["name"], "text": c.message.content, "finish_reason": c.finish_reason}
    if c.finish_reason != "stop":
        return r.usage.completion_tokens, dict(fail, error="the answer did not finish")
    try:
        jsonschema.validate(json.loads(c.message.content), s["schema"])
        return r.usage.completion_tokens, None
    except Exception as e:  # a parse or validation error: the test prints it
        return r.usage.completion_tokens, dict(fail, error=repr(e))


with ThreadPoolExecutor(8) as pool:
    results = list(pool.map(ask, range(per * len(schemas))))
print(
    json.dumps(
        {
            "schemas": len(schemas),
            "count": len(results),
            "failures": [f for _, f in results if f is not None],
            "completion_tokens": sum(t for t, _ in results),
        }
    )
)
