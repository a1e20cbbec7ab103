//! Tool calls in Llama 3.x's own form: Meta's Llama 3.2 Instruct chat template
//! (`tests/data/chat_templates/llama32_tools.jinja`, the template of the Llama 3.2
//! Instruct GGUF files) renders tools, an assistant's call (`{"name": NAME,
//! "parameters": ARGS}`) and a tool result (under the `ipython` header) through lucent
//! exactly as Python's jinja2 renders them (`scripts/chat_tools_reference.py`, output
//! `tests/data/chat_tools_reference_llama32.json`). No model is needed.

use lucent::pipeline::tools::{Tool, ToolCall};
use lucent::pipeline::{ChatTemplate, Message};
use serde_json::Value;

/// Meta's Llama 3.2 Instruct template (copied from llama.cpp's
/// `models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja`).
const LLAMA32_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/chat_templates/llama32_tools.jinja"
);

/// The reference renderings of `scripts/chat_tools_reference.py`.
fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/chat_tools_reference_llama32.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON")
}

/// A conversation in OpenAI's shape as lucent's messages.
fn messages_of(v: &Value) -> Vec<Message> {
    v.as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let content = m["content"].as_str().unwrap_or("");
            match m["role"].as_str().expect("role") {
                "tool" => Message::tool_result(m["tool_call_id"].as_str(), content),
                "assistant" if m.get("tool_calls").is_some() => {
                    let calls: Vec<ToolCall> = m["tool_calls"]
                        .as_array()
                        .expect("calls")
                        .iter()
                        .map(|c| ToolCall {
                            name: c["function"]["name"].as_str().expect("name").into(),
                            arguments: c["function"]["arguments"].to_string(),
                        })
                        .collect();
                    Message::with_calls(content, &calls)
                }
                role => Message::new(role, content),
            }
        })
        .collect()
}

/// Tools in OpenAI's shape as lucent's tools.
fn tools_of(v: &Value) -> Vec<Tool> {
    v.as_array()
        .expect("tools")
        .iter()
        .map(|t| {
            let f = &t["function"];
            Tool::new(
                f["name"].as_str().expect("name"),
                f["description"].as_str(),
                Some(f["parameters"].clone()),
            )
            .expect("tool")
        })
        .collect()
}

#[test]
fn llama32_template_renders_tools_calls_and_results_as_jinja2_does() {
    let r = reference();
    let t = ChatTemplate::from_spec(
        LLAMA32_TOOLS,
        r["bos_token"].as_str().expect("bos"),
        r["eos_token"].as_str().expect("eos"),
    )
    .expect("template");
    for (k, case) in r["cases"].as_array().expect("cases").iter().enumerate() {
        let rendered = t
            .render_tools(
                &messages_of(&case["messages"]),
                &tools_of(&case["tools"]),
                case["add_generation_prompt"].as_bool().expect("flag"),
            )
            .expect("render");
        assert_eq!(
            rendered,
            case["rendered"].as_str().expect("text"),
            "case {k}"
        );
    }
}

#[test]
fn the_call_format_is_detected_from_the_template() {
    use lucent::pipeline::tools::CallFormat;
    let llama = ChatTemplate::from_spec(LLAMA32_TOOLS, "<|begin_of_text|>", "<|eot_id|>")
        .expect("template");
    assert_eq!(llama.tool_call_format(), Some(CallFormat::Llama3Json));
    assert!(!llama.renders_tools());
    let qwen = ChatTemplate::from_spec(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/chat_templates/qwen25_tools.jinja"
        ),
        "",
        "<|im_end|>",
    )
    .expect("template");
    assert_eq!(qwen.tool_call_format(), Some(CallFormat::Hermes));
    assert!(qwen.renders_tools());
    for src in [
        lucent::pipeline::chat::CHATML,
        lucent::pipeline::chat::GEMMA,
    ] {
        assert_eq!(ChatTemplate::new(src, "", "").tool_call_format(), None);
    }
}
