"""Structured outputs through the official `openai` client against `lucent serve` (run by
tests/serve.rs).

Usage: python openai_structured.py BASE_URL N
Prints one JSON object with what each call returned: a Pydantic model parsed by
`chat.completions.parse`, a streamed `json_schema` answer and whether `jsonschema`
validates it, N sampled answers (temperature 1, several schemas, 8 at a time) each
validated with `jsonschema`, a `json_object` answer, completions with a schema, and the
error for a schema the engine cannot use.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import List, Literal, Optional

import jsonschema
import openai
from openai import OpenAI
from pydantic import BaseModel, Field

base, count = sys.argv[1], int(sys.argv[2])
client = OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0, timeout=120)
out = {"openai_version": openai.__version__, "jsonschema_version": jsonschema.__version__}


class City(BaseModel):
    name: str = Field(max_length=30)
    country: str = Field(max_length=30)
    population: int = Field(ge=0)
    landmarks: List[str] = Field(max_length=3)


ask = [{"role": "user", "content": "Describe Paris as JSON."}]
r = client.chat.completions.parse(model="smollm2", messages=ask, response_format=City, temperature=0, max_tokens=200)
m = r.choices[0].message
out["parsed"] = {
    "is_city": isinstance(m.parsed, City),
    "parsed": m.parsed.model_dump() if m.parsed else None,
    "content": m.content,
    "finish_reason": r.choices[0].finish_reason,
}

# The same schema as a file (examples/city.schema.json) for `lucent generate --json-schema`.
city_file = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else None
if city_file is not None:
    r = client.chat.completions.create(
        model="smollm2",
        messages=ask,
        temperature=0,
        max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": city_file, "strict": True}},
    )
    out["city_file"] = r.choices[0].message.content

schemas = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "role": {"enum": ["student", "teacher", "engineer"]},
        },
        "required": ["name", "age", "role"],
        "additionalProperties": False,
    },
    "colours": {
        "type": "object",
        "properties": {
            "colours": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3}
        },
        "required": ["colours"],
        "additionalProperties": False,
    },
    "book": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 40},
            "author": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 30},
                    "born": {"anyOf": [{"type": "integer", "minimum": 1000, "maximum": 2025}, {"type": "null"}]},
                },
                "required": ["name", "born"],
                "additionalProperties": False,
            },
        },
        "required": ["title", "author"],
        "additionalProperties": False,
    },
    "weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 24},
            "sky": {"enum": ["sunny", "cloudy", "rainy", "snowy"]},
            "temperature_c": {"type": "number", "minimum": -50, "maximum": 50},
            "date": {"type": "string", "pattern": "^2026-[01][0-9]-[0-3][0-9]$"},
        },
        "required": ["city", "sky", "temperature_c", "date"],
        "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {"sku": {"type": "string", "maxLength": 10}, "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                    "required": ["sku", "qty"],
                    "additionalProperties": False,
                },
            },
            "paid": {"type": "boolean"},
        },
        "required": ["id", "items", "paid"],
        "additionalProperties": False,
    },
}
prompts = {
    "person": "Describe a person as JSON.",
    "colours": "List some colours as JSON.",
    "book": "Describe a book and its author as JSON.",
    "weather": "Give a weather report as JSON.",
    "order": "Write a shop order as JSON.",
}

# A streamed json_schema answer, validated.
text, finish = "", None
for chunk in client.chat.completions.create(
    model="smollm2",
    messages=[{"role": "user", "content": prompts["order"]}],
    temperature=0,
    max_tokens=200,
    stream=True,
    response_format={"type": "json_schema", "json_schema": {"name": "order", "schema": schemas["order"], "strict": True}},
):
    if chunk.choices:
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
try:
    jsonschema.validate(json.loads(text), schemas["order"])
    valid = True
except Exception as e:  # a parse or validation error: the test prints it
    valid = repr(e)
out["stream"] = {"text": text, "finish_reason": finish, "valid": valid}


def sampled(i):
    name = list(schemas)[i % len(schemas)]
    r = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": prompts[name]}],
        temperature=1.0,
        seed=1000 + i,
        max_tokens=300,
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schemas[name], "strict": True}},
    )
    c = r.choices[0]
    try:
        jsonschema.validate(json.loads(c.message.content), schemas[name])
        return None
    except Exception as e:
        return {"i": i, "schema": name, "text": c.message.content, "finish_reason": c.finish_reason, "error": repr(e)}


with ThreadPoolExecutor(8) as pool:
    failures = [f for f in pool.map(sampled, range(count)) if f is not None]
out["sampled"] = {"count": count, "failures": failures}

r = client.chat.completions.create(
    model="smollm2",
    messages=[{"role": "user", "content": "Describe a cat as JSON."}],
    temperature=0,
    max_tokens=200,
    response_format={"type": "json_object"},
)
try:
    out["json_object"] = isinstance(json.loads(r.choices[0].message.content), dict)
except ValueError as e:
    out["json_object"] = repr(e) + ": " + r.choices[0].message.content

# Completions take response_format too (an extension of OpenAI's: passed in the body).
r = client.completions.create(
    model="smollm2",
    prompt="The weather today, as JSON:",
    temperature=0,
    max_tokens=200,
    extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": schemas["weather"]}}},
)
try:
    jsonschema.validate(json.loads(r.choices[0].text), schemas["weather"])
    out["completion"] = True
except Exception as e:
    out["completion"] = repr(e) + ": " + r.choices[0].text

try:
    client.chat.completions.create(
        model="smollm2",
        messages=ask,
        response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": {
            "type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}},
    )
except openai.BadRequestError as err:
    out["bad_schema"] = {"status": err.status_code, "param": err.param, "message": err.message}
try:
    client.chat.completions.create(model="smollm2", messages=ask, response_format={"type": "yaml"})
except openai.BadRequestError as err:
    out["bad_type"] = {"status": err.status_code, "param": err.param}

print(json.dumps(out))
