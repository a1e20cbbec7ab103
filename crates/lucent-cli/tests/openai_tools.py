"""Tool calls through the official `openai` client against `lucent serve` (run by
tests/serve.rs).

Usage: python openai_tools.py BASE_URL MODEL N TOOLS_FILE
Prints one JSON object: N sampled answers (temperature 1, `tool_choice: "required"`, the
tools of TOOLS_FILE; every tenth with `parallel_tool_calls` true, the others false) with
every call checked (a given tool's name, arguments that validate with `jsonschema`
against its `parameters`, a unique `call_…` id, `content` null, `finish_reason`
"tool_calls"; exactly one call where `parallel_tool_calls` is false); answers to a
named `tool_choice`; a streamed answer assembled from its `delta.tool_calls` (the
arguments arrive in pieces: how many chunks carried them) beside the plain answer of
the same seed; a follow-up with the assistant's `tool_calls` and a `role: "tool"`
result; `auto` and `none`; and the errors for bad input.

Every request goes through one pool of 8 clients (the server's 8 slots stay busy),
the longest first (streamed and plain, named, parallel calls), so that the short
answers fill the slots the long ones leave. `timing` reports the wall-clock seconds,
the sampled answers' tokens and how many of their prompt tokens the prompt cache held
(an indication, never asserted).
"""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
from openai import OpenAI

base, model, count, tools_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
client = OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0, timeout=300)
tools = json.load(open(tools_file))
params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
out = {"openai_version": openai.__version__}
t_start = time.monotonic()

questions = [
    "What is the weather in Oslo?",
    "Book a flight from Paris (CDG) to Tokyo (HND) for Ann, 34.",
    "Wake me up at 7:30 on weekdays.",
    "Is it raining in Lima? Use fahrenheit.",
]


def ask(q):
    return [{"role": "user", "content": q}]


def check(r, only=None, text_first=False):
    """What is wrong with a tool-call answer (an empty list if nothing). `text_first`:
    `tool_choice: "auto"`, where text before the calls is allowed (it goes to `content`)."""
    c = r.choices[0]
    m = c.message
    wrong = []
    if c.finish_reason != "tool_calls":
        wrong.append(f"finish_reason {c.finish_reason}: {m.content!r}")
    if m.content is not None and not text_first:
        wrong.append(f"content {m.content!r}")
    for call in m.tool_calls or []:
        name = call.function.name
        if name not in params or (only and name != only):
            wrong.append(f"name {name}")
            continue
        if not call.id.startswith("call_") or call.type != "function":
            wrong.append(f"id {call.id} type {call.type}")
        try:
            jsonschema.validate(json.loads(call.function.arguments), params[name])
        except Exception as e:  # noqa: BLE001 - reported, not raised
            wrong.append(f"{name} {call.function.arguments}: {str(e).splitlines()[0]}")
    if not m.tool_calls:
        wrong.append("no tool_calls")
    return wrong


def parallel(i):
    """Whether sampled answer `i` may make several calls (every tenth: at temperature 1
    the small models then call again and again up to the limit of four)."""
    return i % 10 == 0


def sampled(i):
    r = client.chat.completions.create(
        model=model,
        messages=ask(questions[i % len(questions)]),
        tools=tools,
        tool_choice="required",
        parallel_tool_calls=parallel(i),
        temperature=1,
        seed=100 + i,
        max_tokens=400,
    )
    calls = r.choices[0].message.tool_calls or []
    u = r.usage
    return {"i": i, "wrong": check(r), "calls": len(calls), "ids": [c.id for c in calls],
            "names": [c.function.name for c in calls], "tokens": u.completion_tokens,
            "prompt": u.prompt_tokens, "cached": u.prompt_tokens_details.cached_tokens}


def named(i):
    r = client.chat.completions.create(
        model=model,
        messages=ask(questions[i % len(questions)]),
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "set_alarm"}},
        temperature=1,
        seed=200 + i,
        max_tokens=400,
    )
    return check(r, only="set_alarm")


# The same seed streamed and not: the deltas assemble into the same calls.
req = dict(model=model, messages=ask(questions[1]), tools=tools, tool_choice="required",
           temperature=1, seed=7, max_tokens=400)


def streamed():
    calls = {}
    finish = None
    argument_chunks = 0
    for chunk in client.chat.completions.create(stream=True, **req):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            assert ch.delta.content in (None, ""), ch.delta.content
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                c["id"] = d.id or c["id"]
                if d.function is not None:
                    c["name"] += d.function.name or ""
                    c["arguments"] += d.function.arguments or ""
                    argument_chunks += bool(d.function.arguments)
    return [calls[k] for k in sorted(calls)], finish, argument_chunks


def auto():
    """auto: text or calls, as the model chooses."""
    r = client.chat.completions.create(model=model, messages=ask(questions[0]), tools=tools,
                                       parallel_tool_calls=False, temperature=0, max_tokens=400)
    m = r.choices[0].message
    return {"finish_reason": r.choices[0].finish_reason, "content": m.content,
            "wrong": check(r, text_first=True) if m.tool_calls else []}


def none():
    """none: text."""
    r = client.chat.completions.create(model=model, messages=ask(questions[0]), tools=tools, tool_choice="none",
                                       temperature=0, max_tokens=40)
    return {"finish_reason": r.choices[0].finish_reason, "content": r.choices[0].message.content,
            "tool_calls": r.choices[0].message.tool_calls}


# One pool for every request, the longest first.
with ThreadPoolExecutor(8) as pool:
    plain_f = pool.submit(client.chat.completions.create, **req)
    streamed_f = pool.submit(streamed)
    named_f = [pool.submit(named, i) for i in range(6)]
    order = sorted(range(count), key=lambda i: not parallel(i))
    sampled_f = {i: pool.submit(sampled, i) for i in order}
    auto_f = pool.submit(auto)
    none_f = pool.submit(none)
    plain = plain_f.result()
    pm = plain.choices[0].message
    # A follow-up: the assistant's calls and each call's result, then an answer.
    history = ask(questions[1]) + [
        {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in pm.tool_calls or []]},
    ] + [
        {"role": "tool", "tool_call_id": c.id, "content": json.dumps({"booked": True, "reference": "LX42"})}
        for c in pm.tool_calls or []
    ]
    follow_f = pool.submit(client.chat.completions.create, model=model, messages=history, tools=tools,
                           temperature=0, max_tokens=40)
    follow_plain_f = pool.submit(client.chat.completions.create, model=model, messages=history, temperature=0,
                                 max_tokens=40)
    runs = [sampled_f[i].result() for i in range(count)]
    named_wrong = [f.result() for f in named_f]
    calls, finish, argument_chunks = streamed_f.result()
    r = follow_f.result()
    out["follow_up"] = {
        "finish_reason": r.choices[0].finish_reason,
        "content": r.choices[0].message.content,
        "tool_calls": len(r.choices[0].message.tool_calls or []),
        "prompt_tokens": r.usage.prompt_tokens,
    }
    r = follow_plain_f.result()
    out["follow_up_without_tools"] = {"finish_reason": r.choices[0].finish_reason,
                                      "content": r.choices[0].message.content}
    out["auto"] = auto_f.result()
    out["none"] = none_f.result()

ids = [i for r in runs for i in r["ids"]]
out["sampled"] = {
    "count": len(runs),
    "failures": [r for r in runs if r["wrong"]],
    "single_with_one_call": all(r["calls"] == 1 for r in runs if not parallel(r["i"])),
    "parallel": sum(parallel(r["i"]) for r in runs),
    "ids_unique": len(ids) == len(set(ids)),
    "names": sorted({n for r in runs for n in r["names"]}),
}
out["named"] = {"count": len(named_wrong), "failures": [w for w in named_wrong if w]}
out["stream"] = {
    "plain": [{"name": c.function.name, "arguments": c.function.arguments} for c in pm.tool_calls or []],
    "streamed": [{"name": c["name"], "arguments": c["arguments"]} for c in calls],
    "ids": all((c["id"] or "").startswith("call_") for c in calls),
    "finish_reason": [plain.choices[0].finish_reason, finish],
    "argument_chunks": argument_chunks,
}
out["timing"] = {
    "seconds": round(time.monotonic() - t_start, 1),
    "sampled_tokens": sum(r["tokens"] for r in runs),
    "parallel_tokens": sum(r["tokens"] for r in runs if parallel(r["i"])),
    "prompt_tokens": sum(r["prompt"] for r in runs),
    "cached_tokens": sum(r["cached"] for r in runs),
}


def error(call):
    try:
        call()
    except openai.APIStatusError as e:
        err = (e.body or {}) if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "param": err.get("param"), "message": err.get("message")}
    return {"status": 200}


fn = lambda name, parameters: [{"type": "function", "function": {"name": name, "parameters": parameters}}]  # noqa: E731
chat = lambda **kw: client.chat.completions.create(model=model, messages=ask("Hi"), max_tokens=5, **kw)  # noqa: E731
out["bad"] = {
    "no_name": error(lambda: chat(tools=[{"type": "function", "function": {"parameters": {"type": "object"}}}])),
    "bad_name": error(lambda: chat(tools=fn("get weather", {"type": "object"}))),
    "bad_schema": error(lambda: chat(tools=[tools[0]] + fn("pick", {"type": "object", "properties": {
        "xs": {"type": "array", "uniqueItems": True}}}))),
    "unknown_choice": error(lambda: chat(tools=tools, tool_choice={"type": "function", "function": {"name": "fly"}})),
    "choice_without_tools": error(lambda: chat(tool_choice="required")),
    "bad_call_arguments": error(lambda: client.chat.completions.create(model=model, max_tokens=5, messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{not json"}}]}])),
    "completions": error(lambda: client.completions.create(model=model, prompt="Hi", max_tokens=5,
                                                           extra_body={"tools": tools})),
}
print(json.dumps(out))
