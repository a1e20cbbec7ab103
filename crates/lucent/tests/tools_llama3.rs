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

// ------------------------------------------------ the Llama 3.x call form, end to end
//
// The grammar of `tools::constraint_in(CallFormat::Llama3Json, …)` on SmolLM2's
// (byte-level BPE) and Gemma 3's (SentencePiece) vocabularies; the reading back
// (`parse_calls_in`, `split_answer_in`, `AnswerStream::with_format`) of bare calls; and
// SmolLM2 prompted through the Llama 3.2 template (its token ids those of the jinja2
// reference text) answering `required` greedily with a call whose arguments the tool's
// schema accepts. The models come from the cache (`lucent::io::fetch::ensure`).

use std::sync::OnceLock;

use lucent::io::fetch::{self, Silent};
use lucent::pipeline::constrain::Constraint;
use lucent::pipeline::generate::TextModel;
use lucent::pipeline::tools::{self, AnswerStream, CallFormat, StreamPart, ToolChoice};
use lucent::pipeline::Sampling;

const LLAMA: CallFormat = CallFormat::Llama3Json;

fn load(name: &str) -> TextModel {
    TextModel::load(&fetch::ensure(name, &mut Silent).expect("fetch")).expect("load")
}

fn smollm2() -> &'static TextModel {
    static M: OnceLock<TextModel> = OnceLock::new();
    M.get_or_init(|| load("smollm2"))
}

/// Gemma 3 270M with the built-in `gemma` template.
fn gemma3() -> &'static TextModel {
    static M: OnceLock<TextModel> = OnceLock::new();
    M.get_or_init(|| {
        load("gemma3")
            .with_chat_template("gemma")
            .expect("gemma template")
    })
}

/// The tools of `examples/tools.json`.
fn example_tools() -> Vec<Tool> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tools.json");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON");
    tools_of(&v)
}

/// The bare call Llama 3.x templates write.
fn llama_call(name: &str, args: &str) -> String {
    format!(r#"{{"name": "{name}", "parameters": {args}}}"#)
}

/// The first of `ids` that `c` does not allow (fed one by one to the compiled mask), or
/// None if it allows them all.
fn first_refused(tm: &TextModel, c: &Constraint, ids: &[u32]) -> Option<usize> {
    let mut mask = tm.compile(c).expect("compile");
    let v = tm.model.config.vocab_size;
    for (k, &id) in ids.iter().enumerate() {
        let mut z = vec![0.0f32; v];
        mask.apply(&mut z).expect("mask");
        if z[id as usize] == f32::NEG_INFINITY {
            return Some(k);
        }
        mask.accept(id).expect("accept");
    }
    None
}

fn llama_grammar(tools: &[Tool], choice: ToolChoice, parallel: bool) -> Constraint {
    tools::constraint_in(LLAMA, tools, &choice, parallel)
        .expect("constraint")
        .expect("a grammar")
}

#[test]
fn llama3_grammar_allows_one_bare_call_or_text() {
    let tools = example_tools();
    let call = llama_call("get_weather", r#"{"city": "Paris", "unit": "celsius"}"#);
    let kelvin = llama_call("get_weather", r#"{"city": "Paris", "unit": "kelvin"}"#);
    let hermes = tools::call_text("get_weather", r#"{"city": "Paris", "unit": "celsius"}"#);
    for tm in [smollm2(), gemma3()] {
        let ids = |t: &str| tm.tokenizer.encode_ids(t, false, false).expect("encode");
        let required = llama_grammar(&tools, ToolChoice::Required, true);
        let named = llama_grammar(&tools, ToolChoice::Function("set_alarm".into()), false);
        let auto = llama_grammar(&tools, ToolChoice::Auto, true);
        assert_eq!(first_refused(tm, &required, &ids(&call)), None, "{call}");
        assert_eq!(first_refused(tm, &auto, &ids(&call)), None, "{call}");
        for text in ["Just text.", "It is {sunny}.", "\n{not a call"] {
            assert_eq!(first_refused(tm, &auto, &ids(text)), None, "{text}");
        }
        // Text, the Hermes form, a second call (even with parallel_tool_calls: one call
        // per turn), the other tool under a named choice, arguments the schema refuses,
        // `arguments` for `parameters`.
        for bad in [
            "Just text.".to_string(),
            hermes.clone(),
            format!("{call}\n{call}"),
            kelvin.clone(),
            call.replace("parameters", "arguments"),
        ] {
            assert!(first_refused(tm, &required, &ids(&bad)).is_some(), "{bad}");
        }
        assert!(first_refused(tm, &named, &ids(&call)).is_some());
        // auto: a `{` first is a call, so JSON that is not one is refused.
        for bad in [kelvin.clone(), r#"{"answer": 1}"#.to_string()] {
            assert!(first_refused(tm, &auto, &ids(&bad)).is_some(), "{bad}");
        }
    }
}

/// Every way of cutting `text` in two or three pieces, streamed: the parts joined.
fn streamed(text: &str, tools: &[Tool], cuts: &[usize]) -> (String, Vec<(String, String)>) {
    let mut s = AnswerStream::with_format(tools, LLAMA);
    let mut parts = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&text.len())) {
        parts.extend(s.feed(&text[at..c]));
        at = c;
    }
    let (rest, _) = s.finish();
    parts.extend(rest);
    let mut content = String::new();
    let mut calls: Vec<(String, String)> = Vec::new();
    for p in parts {
        match p {
            StreamPart::Content(t) => content.push_str(&t),
            StreamPart::CallStart { index, name } => {
                assert_eq!(index, calls.len());
                calls.push((name, String::new()));
            }
            StreamPart::Arguments { index, text } => calls[index].1.push_str(&text),
        }
    }
    (content, calls)
}

#[test]
fn llama3_calls_read_back_whole_and_streamed() {
    let tools = example_tools();
    let weather = llama_call(
        "get_weather",
        "{\"city\": \"Paris\",\n  \"unit\": \"celsius\"}",
    );
    let alarm = llama_call(
        "set_alarm",
        r#"{"time": "07:30", "days": ["mon", "tue"], "label": "a } b "}"#,
    );
    // Whole answers: a call is content "" and the call, its arguments compacted.
    let (content, calls) = tools::split_answer_in(LLAMA, &weather, &tools).expect("a call");
    assert_eq!(content, "");
    assert_eq!(
        calls,
        vec![ToolCall {
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris","unit":"celsius"}"#.into()
        }]
    );
    for not_calls in [
        "It is sunny.".to_string(),
        format!("Text first {weather}"),
        format!("{weather}\n{weather}"),
        llama_call("no_such_tool", "{}"),
        llama_call("get_weather", "[1]"),
        weather.replace("parameters", "arguments"),
        weather[..weather.len() - 1].to_string(),
        tools::call_text("get_weather", "{}"),
    ] {
        assert_eq!(
            tools::split_answer_in(LLAMA, &not_calls, &tools),
            None,
            "{not_calls}"
        );
    }
    // The Hermes functions are unchanged by the format's existence.
    assert_eq!(tools::split_answer(&weather, &tools), None);
    // Streamed: cut at every place (and every pair of places), the parts join to the
    // whole answer's reading. (Not for text after a call, which no grammar allows: the
    // stream has said the call by then.)
    let texts = [
        "It is sunny in Paris.".to_string(),
        weather.clone(),
        alarm.clone(),
        format!("\n {alarm}\n"),
        "{\"answer\": 1}".to_string(),
        llama_call("no_such_tool", "{}"),
        "  ".to_string(),
    ];
    for text in &texts {
        let want = match tools::split_answer_in(LLAMA, text, &tools) {
            Some((c, calls)) => (
                c.to_string(),
                calls.into_iter().map(|c| (c.name, c.arguments)).collect(),
            ),
            None => (text.trim_start().to_string(), Vec::new()),
        };
        let bounds: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for &a in &bounds {
            for &b in bounds.iter().filter(|&&b| b >= a) {
                let (content, calls) = streamed(text, &tools, &[a, b]);
                let got = if calls.is_empty() {
                    (content.trim_start().to_string(), calls)
                } else {
                    (content, calls)
                };
                assert_eq!(got, want, "{text:?} cut at {a}, {b}");
            }
        }
    }
}

/// Llama 3.2's template (a file given as `--chat-template` is) on SmolLM2's weights.
fn smollm2_llama32() -> TextModel {
    smollm2()
        .with_chat_template(LLAMA32_TOOLS)
        .expect("template")
}

#[test]
fn smollm2_with_the_llama32_template_is_prompted_as_jinja2_renders() {
    let r = reference();
    let tm = smollm2_llama32();
    assert_eq!(tm.tool_call_format(), LLAMA);
    assert_eq!(smollm2().tool_call_format(), CallFormat::Hermes);
    let t = tm.template.as_ref().expect("template");
    let ref_bos = r["bos_token"].as_str().expect("bos");
    let mut n = 0;
    for (k, case) in r["cases"].as_array().expect("cases").iter().enumerate() {
        if !case["add_generation_prompt"].as_bool().expect("flag") {
            continue;
        }
        let ids = tm
            .encode_chat_tools(&messages_of(&case["messages"]), &tools_of(&case["tools"]))
            .expect("encode");
        // jinja2 wrote Llama's BOS text where the template writes `bos_token`: the same
        // text with SmolLM2's.
        let text = case["rendered"].as_str().expect("text");
        let text = text.replacen(ref_bos, t.bos(), 1);
        let want = t
            .encode(tm.tokenizer.as_ref(), &text)
            .expect("encode reference");
        assert_eq!(ids, want, "case {k}");
        n += 1;
    }
    assert!(n > 0, "no reference case ends with the generation prompt");
}

#[test]
fn smollm2_with_the_llama32_template_answers_required_with_a_valid_call() {
    let tm = smollm2_llama32();
    let tools = example_tools();
    let c = llama_grammar(&tools, ToolChoice::Required, true);
    for q in [
        "What is the weather in Paris?",
        "Wake me up at 7:30 on Mondays.",
        "How warm is it in Tokyo, in fahrenheit?",
        "Set an alarm for six in the morning.",
    ] {
        let prompt = tm
            .encode_chat_tools(&[Message::new("user", q)], &tools)
            .expect("prompt");
        let s = Sampling {
            constrain: Some(c.clone()),
            ..Sampling::greedy().max_tokens(300)
        };
        let mut cache = tm.new_cache(prompt.len() + s.max_tokens + 1);
        let g = tm
            .generate(&prompt, &s, &mut cache, &mut |_| {})
            .expect("generate");
        let (content, calls) = tools::split_answer_in(LLAMA, &g.text, &tools)
            .unwrap_or_else(|| panic!("{q}: not a call ({:?}): {:?}", g.stop, g.text));
        assert_eq!((content, calls.len()), ("", 1), "{q}: {:?}", g.text);
        // OpenAI's `tool_calls` shape: the arguments are JSON text of an object.
        let call = &calls[0];
        let shaped = serde_json::json!({"id": tools::call_id(), "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}});
        let args: Value = serde_json::from_str(
            shaped["function"]["arguments"]
                .as_str()
                .expect("arguments text"),
        )
        .expect("arguments are JSON");
        assert!(args.is_object(), "{q}: {args}");
        // The tool's schema accepts them: a whole object that the schema's own
        // grammar takes token by token (a missing required key, a wrong enum value or
        // type is refused at the latest at its closing brace).
        let tool = tools
            .iter()
            .find(|t| t.name == call.name)
            .expect("a given tool");
        let schema = Constraint::JsonSchema(tool.parameters.clone());
        let ids = tm
            .tokenizer
            .encode_ids(&call.arguments, false, false)
            .expect("encode");
        assert_eq!(
            first_refused(&tm, &schema, &ids),
            None,
            "{q}: {} refused by {}",
            call.arguments,
            tool.parameters
        );
        // And the stream of the same text says the same call.
        let (content, streamed_calls) = streamed(&g.text, &tools, &[g.text.len() / 2]);
        assert_eq!(content, "");
        assert_eq!(
            streamed_calls,
            vec![(call.name.clone(), call.arguments.clone())]
        );
    }
}
