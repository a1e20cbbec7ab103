"""Llama: llama-cpp-python's API and dicts, held to `lucent generate` at temperature 0."""

from __future__ import annotations

import numpy as np
import pytest

import lucent
from conftest import run_cli, run_cli_json

CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def test_chat_at_temperature_0_equals_lucent_generate(smollm2):
    cli = run_cli_json(
        "generate", "-m", "smollm2", "--chat", "--temperature", "0", "-n", "40", "--json",
        CHAT[0]["content"],
    )
    r = smollm2.create_chat_completion(CHAT, temperature=0, max_tokens=40)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    choice = r["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": cli["text"]}
    assert choice["finish_reason"] == cli["finish_reason"]
    assert r["usage"]["prompt_tokens"] == len(cli["prompt_ids"])
    assert r["usage"]["completion_tokens"] == len(cli["ids"])
    assert r["usage"]["total_tokens"] == len(cli["prompt_ids"]) + len(cli["ids"])
    assert set(r) == {"id", "object", "created", "model", "choices", "usage"}


def test_streaming_yields_the_same_text(smollm2):
    whole = smollm2.create_chat_completion(CHAT, temperature=0, max_tokens=40)
    chunks = list(smollm2.create_chat_completion(CHAT, temperature=0, max_tokens=40, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_completion_equals_lucent_generate_raw(smollm2):
    prompt = "The capital of France is"
    cli = run_cli_json("generate", "-m", "smollm2", "--raw", "--temperature", "0", "-n", "12", "--json", prompt)
    r = smollm2.create_completion(prompt, temperature=0, max_tokens=12)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    assert r["choices"][0]["text"] == cli["text"]
    assert r["choices"][0]["finish_reason"] == "length"
    assert smollm2(prompt, temperature=0, max_tokens=12)["choices"][0]["text"] == cli["text"]
    streamed = "".join(c["choices"][0]["text"] for c in smollm2.create_completion(prompt, temperature=0, max_tokens=12, stream=True))
    assert streamed == cli["text"]
    echo = smollm2.create_completion(prompt, temperature=0, max_tokens=12, echo=True)
    assert echo["choices"][0]["text"] == prompt + cli["text"]


def test_logprobs_have_llama_cpp_pythons_shapes(smollm2):
    r = smollm2.create_completion("The capital of France is", temperature=0, max_tokens=5, logprobs=3)
    lp = r["choices"][0]["logprobs"]
    assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 5
    assert "".join(lp["tokens"]) == r["choices"][0]["text"]
    for tok, p, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert p <= 0.0 and tok in top and top[tok] == p
        # Greedy: the chosen token is the most likely one.
        assert p == max(top.values())
    c = smollm2.create_chat_completion(CHAT, temperature=0, max_tokens=6, logprobs=True, top_logprobs=2)
    content = c["choices"][0]["logprobs"]["content"]
    assert len(content) == 6
    assert set(content[0]) == {"token", "bytes", "logprob", "top_logprobs"}
    assert len(content[0]["top_logprobs"]) >= 2
    assert set(content[0]["top_logprobs"][0]) == {"token", "logprob", "bytes"}
    assert "".join(t["token"] for t in content) == c["choices"][0]["message"]["content"]


def test_sampling_is_seeded_and_stops(smollm2):
    a = smollm2.create_completion("Once upon a time", temperature=0.9, max_tokens=16, seed=7)
    b = smollm2.create_completion("Once upon a time", temperature=0.9, max_tokens=16, seed=7)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    greedy = smollm2.create_completion("The capital of France is", temperature=0, max_tokens=12)["choices"][0]["text"]
    cut = greedy.strip().split(" ")[1]
    s = smollm2.create_completion("The capital of France is", temperature=0, max_tokens=12, stop=[cut])
    assert s["choices"][0]["finish_reason"] == "stop"
    assert cut not in s["choices"][0]["text"]


def test_tokenize_detokenize(smollm2):
    ids = smollm2.tokenize(b"Hello world")
    assert smollm2.detokenize(ids) == b"Hello world"
    special = smollm2.tokenize(b"<|im_start|>user", add_bos=False, special=True)
    plain = smollm2.tokenize(b"<|im_start|>user", add_bos=False, special=False)
    assert len(special) < len(plain)
    assert smollm2.detokenize(special, special=True) == b"<|im_start|>user"
    assert smollm2.n_vocab() == 49152 and smollm2.n_ctx() >= 2048


def test_context_and_unsupported_options_are_refused(tiny_run):
    small = lucent.Llama(str(tiny_run), n_ctx=8)
    with pytest.raises(ValueError, match="exceed context window of 8"):
        small.create_completion("the " * 5)
    r = small.create_completion("the ", temperature=0, max_tokens=100)
    assert r["usage"]["total_tokens"] <= 8 and r["choices"][0]["finish_reason"] == "length"
    with pytest.raises(ValueError, match="grammar"):
        small.create_completion("the ", grammar="root ::= x")
    with pytest.raises(ValueError, match="mirostat_mode"):
        small.create_completion("the ", mirostat_mode=2)
    with pytest.raises(lucent.LucentError, match="chat template"):
        small.create_chat_completion(CHAT)


def test_a_trained_model_completes_as_the_cli_does(tiny_run):
    llm = lucent.Llama(str(tiny_run), n_ctx=0)
    cli = run_cli_json("generate", "-m", str(tiny_run), "--temperature", "0", "-n", "20", "--json", "the ")
    r = llm.create_completion("the ", temperature=0, max_tokens=20)
    assert r["choices"][0]["text"] == cli["text"]


def test_export_hf_round_trip(tiny_run, tmp_path):
    """`lucent export hf` writes a Hugging Face GPT-2 folder (PyTorch's logits for it are
    checked by crates/lucent/tests/export_hf.rs); lucent reads it back as the gpt2
    family with the run's logits and the run's greedy text."""
    out = tmp_path / "hf"
    run_cli("export", "hf", str(tiny_run), str(out))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    run, hf = lucent.open(str(tiny_run)), lucent.open(str(out))
    assert hf.kind == "decoder" and hf.config["family"] == "gpt2"
    a, b = run.trace("the cat")["logits"], hf.trace("the cat")["logits"]
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5, np.abs(a - b).max()
    want = lucent.Llama(str(tiny_run), n_ctx=0).create_completion("the ", temperature=0, max_tokens=20)
    got = lucent.Llama(str(out), n_ctx=0).create_completion("the ", temperature=0, max_tokens=20)
    assert got["choices"][0]["text"] == want["choices"][0]["text"]


def test_response_format_and_logit_bias_equal_lucent_generate(smollm2):
    import json
    from pathlib import Path

    schema_file = Path(__file__).resolve().parents[2] / "examples" / "city.schema.json"
    ask = [{"role": "user", "content": "Describe Paris as JSON."}]
    cli = run_cli_json(
        "generate", "-m", "smollm2", "--temperature", "0", "-n", "200", "--json-schema", str(schema_file),
        "--json", ask[0]["content"],
    )
    schema = json.loads(schema_file.read_text())
    for fmt in (
        {"type": "json_object", "schema": schema},  # llama-cpp-python's shape
        {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},  # OpenAI's
    ):
        r = smollm2.create_chat_completion(ask, temperature=0, max_tokens=200, response_format=fmt)
        text = r["choices"][0]["message"]["content"]
        assert text == cli["text"]
        assert set(json.loads(text)) == set(schema["required"])
        assert r["choices"][0]["finish_reason"] == "stop"
    capital = [{"role": "user", "content": 'Give the capital of France as a JSON object with the keys "city" and "country".'}]
    obj = smollm2.create_chat_completion(capital, temperature=0, max_tokens=200, response_format={"type": "json_object"})
    assert obj["choices"][0]["finish_reason"] == "stop"
    assert isinstance(json.loads(obj["choices"][0]["message"]["content"]), dict)
    streamed = smollm2.create_chat_completion(
        ask, temperature=0, max_tokens=200, stream=True, response_format={"type": "json_schema", "json_schema": {"schema": schema}}
    )
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in streamed) == cli["text"]
    with pytest.raises(lucent.LucentError, match="uniqueItems"):
        smollm2.create_chat_completion(
            ask, max_tokens=8, response_format={"type": "json_object", "schema": {"type": "array", "uniqueItems": True}}
        )
    with pytest.raises(ValueError, match="response_format"):
        smollm2.create_chat_completion(ask, response_format={"type": "yaml"})
    # logit_bias bans the greedy first token, as `lucent generate --logit-bias` does.
    free = run_cli_json("generate", "-m", "smollm2", "--chat", "--temperature", "0", "-n", "12", "--json", CHAT[0]["content"])
    first = free["ids"][0]
    banned = run_cli_json(
        "generate", "-m", "smollm2", "--chat", "--temperature", "0", "-n", "12", "--logit-bias", f"{first}=-100",
        "--json", CHAT[0]["content"],
    )
    r = smollm2.create_chat_completion(CHAT, temperature=0, max_tokens=12, logit_bias={first: -100})
    assert r["choices"][0]["message"]["content"] == banned["text"] != free["text"]
    raw = run_cli_json(
        "generate", "-m", "smollm2", "--raw", "--temperature", "0", "-n", "4", "--logit-bias", f"{first}=-100",
        "--json", "The capital of France is",
    )
    c = smollm2.create_completion("The capital of France is", temperature=0, max_tokens=4, logit_bias={str(first): -100})
    assert c["choices"][0]["text"] == raw["text"]


def test_tool_calls_in_openai_shape(smollm2):
    import json
    import pathlib

    tools = json.loads((pathlib.Path(__file__).parents[2] / "examples" / "tools.json").read_text())
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    ask = [{"role": "user", "content": "Book a flight from Paris (CDG) to Tokyo (HND) for Ann, 34."}]
    for seed in range(5):
        r = smollm2.create_chat_completion(
            ask, tools=tools, tool_choice="required", temperature=1, seed=seed, max_tokens=300,
            parallel_tool_calls=seed % 2 == 0,
        )
        choice = r["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice
        assert choice["message"]["content"] is None
        calls = choice["message"]["tool_calls"]
        assert calls and (seed % 2 == 0 or len(calls) == 1), calls
        for c in calls:
            assert c["id"].startswith("call_") and c["type"] == "function"
            schema = params[c["function"]["name"]]
            args = json.loads(c["function"]["arguments"])
            assert set(schema["required"]) <= set(args) <= set(schema["properties"]), args
    # A named function is the one called; a stream gives the same calls as the same seed.
    kw = dict(tools=tools, tool_choice={"type": "function", "function": {"name": "set_alarm"}},
              temperature=1, seed=3, max_tokens=300)
    plain = smollm2.create_chat_completion(ask, **kw)
    calls = plain["choices"][0]["message"]["tool_calls"]
    assert {c["function"]["name"] for c in calls} == {"set_alarm"}
    chunks = list(smollm2.create_chat_completion(ask, stream=True, **kw))
    streamed = [d for ch in chunks for d in ch["choices"][0]["delta"].get("tool_calls", [])]
    assert [(d["index"], d["function"]) for d in streamed] == [(k, c["function"]) for k, c in enumerate(calls)]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # The calls and their results go back into the conversation; tool_choice "none" is text.
    follow = ask + [plain["choices"][0]["message"]] + [
        {"role": "tool", "tool_call_id": c["id"], "content": '{"ok": true}'} for c in calls
    ]
    r = smollm2.create_chat_completion(follow, tools=tools, tool_choice="none", temperature=0, max_tokens=20)
    assert isinstance(r["choices"][0]["message"]["content"], str)
    assert "tool_calls" not in r["choices"][0]["message"]
    with pytest.raises(ValueError, match="tool_choice"):
        smollm2.create_chat_completion(ask, tool_choice="required")
    with pytest.raises(ValueError, match="name"):
        smollm2.create_chat_completion(ask, tools=[{"type": "function", "function": {"name": "bad name"}}])
