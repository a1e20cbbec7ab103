#!/usr/bin/env python3
"""Reference renderings of conversations with tools through a chat template that has a
tools section (tests/data/chat_templates/qwen25_tools.jinja), made with Python's jinja2
set up as Hugging Face transformers' apply_chat_template sets it up: a sandboxed
environment with trim_blocks and lstrip_blocks, the loopcontrols extension, and `tojson`
as json.dumps(x, ensure_ascii=False, indent=indent) (keys in their given order, ", " and
": " between items). Tools are OpenAI's list (examples/tools.json without "strict"), an
assistant's calls carry their arguments as objects, as those templates expect.

    python scripts/chat_tools_reference.py   # writes tests/data/chat_tools_reference.json
                                             # and tests/data/chat_tools_reference_llama32.json

The second file renders Meta's Llama 3.2 Instruct template
(tests/data/chat_templates/llama32_tools.jinja, copied from llama.cpp's
models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja, which is the template in the
Llama 3.2 Instruct GGUF files) with bos_token "<|begin_of_text|>", no strftime_now (so
its date is the template's default "26 Jul 2024"), tools in the first user message (the
template's default) and one call per assistant turn (the template refuses several):
a call is written as {"name": NAME, "parameters": ARGS} and a result under the ipython
header.

crates/lucent/tests/tools.rs (template_renders_tools_as_jinja2_does) renders the same
cases with lucent's ChatTemplate::render_tools and compares the text.
"""
import json
import pathlib

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATE = "tests/data/chat_templates/qwen25_tools.jinja"
LLAMA32 = "tests/data/chat_templates/llama32_tools.jinja"


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def render(source, messages, tools, add_generation_prompt, bos="", eos="<|im_end|>"):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    kw = {"messages": messages, "add_generation_prompt": add_generation_prompt,
          "bos_token": bos, "eos_token": eos}
    if tools:
        kw["tools"] = tools
    return env.from_string(source).render(**kw)


def main():
    source = (ROOT / TEMPLATE).read_text()
    tools = []
    for t in json.loads((ROOT / "examples/tools.json").read_text()):
        f = t["function"]
        fn = {"name": f["name"]}
        if "description" in f:
            fn["description"] = f["description"]
        fn["parameters"] = f["parameters"]
        tools.append({"type": "function", "function": fn})
    # Non-ASCII text and characters jinja2's own tojson would escape.
    tools.append({"type": "function", "function": {
        "name": "note", "description": "Écrit une note <courte> & datée.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}})

    def call(cid, name, args):
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}

    exchange = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and Lima?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            call("call_1", "get_weather", {"city": "Oslo", "unit": "celsius"}),
            call("call_2", "get_weather", {"city": "Lima", "unit": "fahrenheit"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": -3}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "{\"temp\": 70}"},
        {"role": "assistant", "content": "Oslo -3 °C, Lima 70 °F."},
        {"role": "user", "content": "Note that."},
        {"role": "assistant", "content": "", "tool_calls": [
            call("call_3", "note", {"text": "Oslo −3 °C"})]},
        {"role": "tool", "tool_call_id": "call_3", "content": "ok"},
    ]
    cases = [
        {"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
         "tools": tools, "add_generation_prompt": True},
        {"messages": exchange, "tools": tools, "add_generation_prompt": True},
        # Calls and results in the history, no tools offered now.
        {"messages": exchange, "tools": [], "add_generation_prompt": False},
    ]
    for c in cases:
        c["rendered"] = render(source, c["messages"], c["tools"], c["add_generation_prompt"])
    out = {"template": TEMPLATE, "renderer": f"jinja2 {jinja2.__version__}", "cases": cases}
    path = ROOT / "tests/data/chat_tools_reference.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {path}")

    # Llama 3.2: one call per assistant turn, results as role "tool" (ipython header).
    source = (ROOT / LLAMA32).read_text()
    llama_exchange = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            call("call_1", "get_weather", {"city": "Oslo", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": -3}"},
        {"role": "assistant", "content": "Oslo -3 °C."},
        {"role": "user", "content": "Note that."},
        {"role": "assistant", "content": "", "tool_calls": [
            call("call_2", "note", {"text": "Oslo −3 °C"})]},
        {"role": "tool", "tool_call_id": "call_2", "content": "ok"},
    ]
    cases = [
        {"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
         "tools": tools, "add_generation_prompt": True},
        {"messages": llama_exchange, "tools": tools, "add_generation_prompt": True},
        {"messages": llama_exchange, "tools": [], "add_generation_prompt": False},
    ]
    for c in cases:
        c["rendered"] = render(source, c["messages"], c["tools"], c["add_generation_prompt"],
                               bos="<|begin_of_text|>", eos="<|eot_id|>")
    out = {"template": LLAMA32, "renderer": f"jinja2 {jinja2.__version__}",
           "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "cases": cases}
    path = ROOT / "tests/data/chat_tools_reference_llama32.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
