//! Tool calls (`lucent::pipeline::tools`): the generic form written and read back, and
//! its grammar on SmolLM2 (GGUF byte-level BPE) and Gemma 3 (GGUF SentencePiece, with
//! the built-in `gemma` chat template), held to the unconstrained run of the same model:
//!
//! - calls written in the generic form are read back as the same calls; text, unknown
//!   tools, arguments that are not an object and unclosed calls are not calls; names
//!   follow OpenAI's rule; the tools section goes into the system message;
//! - the grammar of every choice (`auto`, `required`, a named function; one call or
//!   several) compiles on both vocabularies for the tools of `examples/tools.json`
//!   (nested objects, arrays, enums, patterns, `anyOf`);
//! - greedy: a tool-constrained answer has exactly the free answer's ids up to the first
//!   one the grammar refuses (found by feeding the free ids to the compiled mask), and
//!   another id there;
//! - sampled at temperature 1: every `required` answer is calls that name a given tool
//!   (the server test validates their arguments with `jsonschema`), a named choice
//!   always names its function.
//!
//! The models come from the cache (`lucent::io::fetch::ensure`, fetching if needed).

use std::sync::OnceLock;

use lucent::io::fetch::{self, Silent};
use lucent::pipeline::constrain::Constraint;
use lucent::pipeline::generate::TextModel;
use lucent::pipeline::tools::{self, Tool, ToolCall, ToolChoice};
use lucent::pipeline::{Message, Sampling};
use serde_json::Value;

fn load(name: &str) -> TextModel {
    TextModel::load(&fetch::ensure(name, &mut Silent).expect("fetch")).expect("load")
}

fn smollm2() -> &'static TextModel {
    static M: OnceLock<TextModel> = OnceLock::new();
    M.get_or_init(|| load("smollm2"))
}

/// Gemma 3 270M (a base file without a template) with the built-in `gemma` template.
fn gemma3() -> &'static TextModel {
    static M: OnceLock<TextModel> = OnceLock::new();
    M.get_or_init(|| {
        load("gemma3")
            .with_chat_template("gemma")
            .expect("gemma template")
    })
}

/// The tools of `examples/tools.json` (OpenAI's shape).
fn example_tools() -> Vec<Tool> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tools.json");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON");
    v.as_array()
        .expect("a list")
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

fn weather() -> Tool {
    example_tools().remove(0)
}

/// The prompt of one user message with the tools section.
fn prompt(tm: &TextModel, tools: &[Tool], text: &str) -> Vec<u32> {
    tm.encode_chat(&tools::with_tools(&[Message::new("user", text)], tools))
        .expect("chat prompt")
}

/// Generate from `prompt` with `s` (a fresh cache each time).
fn run(tm: &TextModel, prompt: &[u32], s: &Sampling) -> lucent::Generation {
    let mut cache = tm.new_cache(prompt.len() + s.max_tokens + 1);
    tm.generate(prompt, s, &mut cache, &mut |_| {})
        .expect("generate")
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

fn grammar(tools: &[Tool], choice: ToolChoice, parallel: bool) -> Constraint {
    tools::constraint(tools, &choice, parallel)
        .expect("constraint")
        .expect("a grammar")
}

#[test]
fn names_follow_openai_rule() {
    for ok in ["a", "get_weather", "A-1", &"x".repeat(64)] {
        assert!(tools::check_name(ok).is_ok(), "{ok}");
    }
    for bad in ["", "has space", "dot.ted", "é", &"x".repeat(65)] {
        assert!(tools::check_name(bad).is_err(), "{bad}");
        assert!(Tool::new(bad, None, None).is_err(), "{bad}");
    }
}

#[test]
fn calls_written_are_calls_read() {
    let tools = [weather()];
    let one = tools::call_text("get_weather", r#"{"city":"Paris"}"#);
    assert_eq!(
        one,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"
    );
    let two = format!(
        "{one}\n{}",
        tools::call_text("get_weather", r#"{"city": "Oslo"}"#)
    );
    let calls = tools::parse_calls(&two, &tools).expect("calls");
    let call = |city: &str| ToolCall {
        name: "get_weather".into(),
        arguments: format!(r#"{{"city":"{city}"}}"#),
    };
    assert_eq!(calls, [call("Paris"), call("Oslo")]);
    // A string argument may spell the closing tag: the call's JSON is read as JSON.
    let tag = tools::call_text("get_weather", r#"{"city": "a}}</tool_call> b"}"#);
    assert_eq!(
        tools::parse_calls(&format!("{tag}\n{one}"), &tools).expect("calls"),
        [call("a}}</tool_call> b"), call("Paris")]
    );
    // An assistant message's calls are written in the same form, after its text.
    let m = tools::assistant_message("", &calls);
    assert_eq!(
        tools::parse_calls(&m.content, &tools).expect("calls"),
        calls
    );
    assert_eq!(m.role, "assistant");
    // Text, an unknown tool, arguments that are not an object, text before a call, an
    // unclosed call: no calls.
    for text in [
        "Hello",
        &tools::call_text("nope", "{}"),
        &tools::call_text("get_weather", "[1]"),
        &format!("Sure. {one}"),
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}",
    ] {
        assert_eq!(tools::parse_calls(text, &tools), None, "{text}");
    }
    // Ids are OpenAI's form and differ.
    let (a, b) = (tools::call_id(), tools::call_id());
    assert!(a.starts_with("call_") && a.len() == 29, "{a}");
    assert_ne!(a, b);
}

#[test]
fn the_section_goes_into_the_system_message() {
    let tools = [weather()];
    let m = tools::with_tools(&[Message::new("user", "Hi")], &tools);
    assert_eq!(m[0].role, "system");
    assert!(
        m[0].content.contains(r#""name":"get_weather""#),
        "{}",
        m[0].content
    );
    assert!(m[0].content.contains("<tool_call>"), "{}", m[0].content);
    assert_eq!(m[1], Message::new("user", "Hi"));
    let given = [
        Message::new("system", "Be brief."),
        Message::new("user", "Hi"),
    ];
    let m = tools::with_tools(&given, &tools);
    assert_eq!(m.len(), 2);
    assert!(
        m[0].content.starts_with("Be brief.\n\n# Tools"),
        "{}",
        m[0].content
    );
    // A tool's result is a user turn.
    let r = tools::result_message("{\"temp\": 21}");
    assert_eq!(
        r,
        Message::new("user", "<tool_response>\n{\"temp\": 21}\n</tool_response>")
    );
}

#[test]
fn choices_refuse_what_they_cannot_name() {
    let tools = [weather()];
    assert_eq!(
        tools::constraint(&tools, &ToolChoice::None, true).expect("none"),
        None
    );
    assert!(tools::constraint(&[], &ToolChoice::Required, true).is_err());
    let e = tools::constraint(&tools, &ToolChoice::Function("nope".into()), true).unwrap_err();
    assert!(e.to_string().contains("get_weather"), "{e}");
}

#[test]
fn every_choice_compiles_on_both_vocabularies() {
    let tools = example_tools();
    for tm in [smollm2(), gemma3()] {
        for choice in [
            ToolChoice::Auto,
            ToolChoice::Required,
            ToolChoice::Function("book_flight".into()),
        ] {
            for parallel in [false, true] {
                let c = grammar(&tools, choice.clone(), parallel);
                tm.compile(&c)
                    .unwrap_or_else(|e| panic!("{choice:?} {parallel}: {e}"));
            }
        }
        // A call written by hand passes the mask of `required`; text does not.
        let call = tools::call_text("get_weather", r#"{"city": "Paris", "unit": "celsius"}"#);
        let ids = tm
            .tokenizer
            .encode_ids(&call, false, false)
            .expect("encode");
        let c = grammar(&tools, ToolChoice::Required, false);
        assert_eq!(first_refused(tm, &c, &ids), None, "{call}");
        let ids = tm
            .tokenizer
            .encode_ids("It is sunny.", false, false)
            .expect("encode");
        assert_eq!(first_refused(tm, &c, &ids), Some(0));
        // `auto` allows that text, but not a call with arguments its schema refuses.
        let a = grammar(&tools, ToolChoice::Auto, false);
        assert_eq!(first_refused(tm, &a, &ids), None);
        let bad = tools::call_text("get_weather", r#"{"city": "Paris", "unit": "kelvin"}"#);
        let ids = tm.tokenizer.encode_ids(&bad, false, false).expect("encode");
        assert!(first_refused(tm, &a, &ids).is_some(), "{bad}");
    }
}

#[test]
fn greedy_constrained_answers_keep_the_free_tokens_the_grammar_allows() {
    let tools = example_tools();
    for (tm, name) in [(smollm2(), "smollm2"), (gemma3(), "gemma3")] {
        let p = prompt(
            tm,
            &tools,
            "What is the weather in Paris? Answer in celsius.",
        );
        let free = run(tm, &p, &Sampling::greedy().max_tokens(200));
        for choice in [ToolChoice::Auto, ToolChoice::Required] {
            let c = grammar(&tools, choice.clone(), false);
            let g = run(
                tm,
                &p,
                &Sampling {
                    constrain: Some(c.clone()),
                    ..Sampling::greedy().max_tokens(200)
                },
            );
            match first_refused(tm, &c, &free.ids) {
                None => assert_eq!(g.ids, free.ids, "{name} {choice:?}: {:?}", g.text),
                Some(k) => {
                    assert_eq!(
                        g.ids[..k],
                        free.ids[..k],
                        "{name} {choice:?}: steps before {k}"
                    );
                    assert_ne!(g.ids.get(k), free.ids.get(k), "{name} {choice:?}: step {k}");
                }
            }
            if choice == ToolChoice::Required {
                let calls = tools::parse_calls(&g.text, &tools)
                    .unwrap_or_else(|| panic!("{name}: not calls: {:?}", g.text));
                assert!(!calls.is_empty());
            }
        }
    }
}

#[test]
fn sampled_required_answers_are_calls_of_given_tools() {
    let tools = example_tools();
    let questions = [
        "What is the weather in Oslo?",
        "Book a flight from Paris (CDG) to Tokyo (HND) for Ann, 34.",
        "Wake me up at 7:30 on weekdays.",
        "Is it raining in Lima, in fahrenheit?",
    ];
    for (tm, name) in [(smollm2(), "smollm2"), (gemma3(), "gemma3")] {
        for i in 0..20u64 {
            let named = i % 4 == 3;
            let choice = if named {
                ToolChoice::Function("set_alarm".into())
            } else {
                ToolChoice::Required
            };
            let p = prompt(tm, &tools, questions[i as usize % questions.len()]);
            let s = Sampling {
                temperature: 1.0,
                seed: 1000 + i,
                constrain: Some(grammar(&tools, choice, i % 4 == 0)),
                ..Sampling::greedy().max_tokens(400)
            };
            let g = run(tm, &p, &s);
            let calls = tools::parse_calls(&g.text, &tools).unwrap_or_else(|| {
                panic!("{name} seed {i}: not calls ({:?}): {:?}", g.stop, g.text)
            });
            for c in &calls {
                let args: Value = serde_json::from_str(&c.arguments).expect("JSON arguments");
                assert!(args.is_object(), "{name}: {args}");
                if named {
                    assert_eq!(c.name, "set_alarm", "{name}: {:?}", g.text);
                }
            }
            assert!(
                calls.len() <= tools::MAX_PARALLEL_CALLS,
                "{name}: {:?}",
                g.text
            );
            assert!(
                i % 4 == 0 || calls.len() == 1,
                "{name}: one call only: {:?}",
                g.text
            );
        }
    }
}

/// The template with a tools section that the reference renderings use.
const QWEN25_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/chat_templates/qwen25_tools.jinja"
);

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

/// The cases of `scripts/chat_tools_reference.py` (Python jinja2, set up as Hugging
/// Face's apply_chat_template).
fn reference_cases() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/chat_tools_reference.json"
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("JSON");
    v["cases"].as_array().expect("cases").clone()
}

#[test]
fn a_template_renders_tools_calls_and_results_as_jinja2_does() {
    let t = lucent::pipeline::ChatTemplate::from_spec(QWEN25_TOOLS, "", "<|im_end|>")
        .expect("template");
    assert!(t.renders_tools());
    for (k, case) in reference_cases().iter().enumerate() {
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
    // Templates without a tools section (ChatML, Gemma's, SmolLM2's own) get the
    // generic form.
    for src in [
        lucent::pipeline::chat::CHATML,
        lucent::pipeline::chat::GEMMA,
    ] {
        assert!(!lucent::pipeline::ChatTemplate::new(src, "", "").renders_tools());
    }
    assert!(!smollm2()
        .template
        .as_ref()
        .expect("SmolLM2's template")
        .renders_tools());
}

#[test]
fn a_model_with_a_tools_template_is_prompted_by_it() {
    let tm = smollm2()
        .with_chat_template(QWEN25_TOOLS)
        .expect("template");
    let t = tm.template.as_ref().expect("template");
    for (k, case) in reference_cases().iter().enumerate() {
        if !case["add_generation_prompt"].as_bool().expect("flag") {
            continue;
        }
        let ids = tm
            .encode_chat_tools(&messages_of(&case["messages"]), &tools_of(&case["tools"]))
            .expect("encode");
        let want = t
            .encode(
                tm.tokenizer.as_ref(),
                case["rendered"].as_str().expect("text"),
            )
            .expect("encode reference");
        assert_eq!(ids, want, "case {k}");
    }
    // SmolLM2's own template has no tools section: the generic form, as before.
    let tools = example_tools();
    let msgs = [Message::new("user", "Hi")];
    assert_eq!(
        smollm2().encode_chat_tools(&msgs, &tools).expect("encode"),
        smollm2()
            .encode_chat(&tools::with_tools(&msgs, &tools))
            .expect("encode")
    );
}

#[test]
fn streamed_parts_join_to_the_whole_answer() {
    let tools = example_tools();
    let weather = tools::call_text(
        "get_weather",
        "{\"city\": \"Paris\",\n  \"unit\": \"celsius\"}",
    );
    let alarm = tools::call_text(
        "set_alarm",
        r#"{"time": "07:30", "days": ["mon", "tue"], "label": "a } b"}"#,
    );
    let texts = [
        "It is sunny in Paris.".to_string(),
        weather.clone(),
        format!("{weather}\n{alarm}"),
        format!("Let me check <tool_c first.\n{weather}\n{alarm}"),
        format!("\n\n{weather}"),
        "Almost a call: <tool_cal".to_string(),
        // Gemma 3's sampled answer 96 of openai_tools.py: the closing tag inside a string.
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"(object|array)(){}}</tool_call> # and [\"\n, \"unit\": \"celsius\"\n\n  }}\n</tool_call>".to_string(),
    ];
    for text in &texts {
        let whole = tools::split_answer(text, &tools);
        for size in [1usize, 2, 3, 5, 8, 13, 1000] {
            let mut reader = tools::AnswerStream::new(&tools);
            let mut parts = Vec::new();
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(size) {
                parts.extend(reader.feed(&piece.iter().collect::<String>()));
            }
            let (rest, made_calls) = reader.finish();
            parts.extend(rest);
            let mut content = String::new();
            let mut calls: Vec<ToolCall> = Vec::new();
            let mut argument_parts = 0;
            for p in parts {
                match p {
                    tools::StreamPart::Content(t) => content.push_str(&t),
                    tools::StreamPart::CallStart { index, name } => {
                        assert_eq!(index, calls.len());
                        calls.push(ToolCall {
                            name,
                            arguments: String::new(),
                        });
                    }
                    tools::StreamPart::Arguments { index, text } => {
                        calls[index].arguments.push_str(&text);
                        argument_parts += 1;
                    }
                }
            }
            match &whole {
                Some((before, want)) => {
                    let before = if before.trim().is_empty() { "" } else { before };
                    assert_eq!(content, before, "{text:?} by {size}");
                    assert_eq!(&calls, want, "{text:?} by {size}");
                    assert!(made_calls);
                    if size == 1 {
                        assert!(
                            argument_parts > calls.len(),
                            "{text:?}: arguments in pieces"
                        );
                    }
                }
                None => {
                    assert_eq!(&content, text, "{text:?} by {size}");
                    assert!(calls.is_empty() && !made_calls);
                }
            }
        }
    }
    // The arguments are the model's, compacted, keys in its order.
    let (before, calls) = tools::split_answer(&texts[3], &tools).expect("calls");
    assert_eq!(before, "Let me check <tool_c first.\n");
    assert_eq!(calls[0].arguments, r#"{"city":"Paris","unit":"celsius"}"#);
    assert_eq!(
        calls[1].arguments,
        r#"{"time":"07:30","days":["mon","tue"],"label":"a } b"}"#
    );
    let (_, calls) = tools::split_answer(&texts[6], &tools).expect("calls");
    assert_eq!(
        calls[0].arguments,
        r#"{"city":"(object|array)(){}}</tool_call> # and [","unit":"celsius"}"#
    );
}

#[test]
fn auto_allows_text_then_calls() {
    let tools = example_tools();
    let call = tools::call_text("get_weather", r#"{"city": "Paris", "unit": "celsius"}"#);
    for tm in [smollm2(), gemma3()] {
        let auto = grammar(&tools, ToolChoice::Auto, true);
        let one = grammar(&tools, ToolChoice::Auto, false);
        let ids = |t: &str| tm.tokenizer.encode_ids(t, false, false).expect("encode");
        for ok in [
            "Just text.".to_string(),
            call.clone(),
            format!("I will look it up.\n{call}"),
            format!("First <tool_ this.\n{call}\n{call}"),
        ] {
            assert_eq!(first_refused(tm, &auto, &ids(&ok)), None, "{ok}");
        }
        // Not two calls without parallel_tool_calls; nothing but a call after its tag;
        // arguments its schema refuses.
        for bad in [
            format!("{call}\n{call}"),
            "Text <tool_call> text".to_string(),
            format!(
                "Hi {}",
                tools::call_text("get_weather", r#"{"city": "Paris", "unit": "kelvin"}"#)
            ),
        ] {
            let c = if bad.starts_with('<') { &one } else { &auto };
            assert!(first_refused(tm, c, &ids(&bad)).is_some(), "{bad}");
        }
    }
}

#[test]
/// Greedy `auto` after a history of text-then-call answers keeps every free token the
/// grammar allows. (SmolLM2-135M then writes a sentence and a made-up
/// `<tool_response>`, not a call: a greedy case of text then a call is still wanted.)
fn auto_after_text_keeps_the_free_tokens() {
    let tools = example_tools();
    let qwen = smollm2()
        .with_chat_template(QWEN25_TOOLS)
        .expect("template");
    // A history in which the assistant answered with a sentence and then a call, so
    // that the model does so again.
    let call = |city: &str| ToolCall {
        name: "get_weather".into(),
        arguments: format!(r#"{{"city": "{city}", "unit": "celsius"}}"#),
    };
    let primed = |q: &str| {
        vec![
            Message::new("user", "What is the weather in Oslo?"),
            Message::with_calls("Let me check the weather in Oslo.", &[call("Oslo")]),
            Message::tool_result(Some("call_1"), r#"{"temp": -3}"#),
            Message::new("assistant", "It is -3 degrees in Oslo."),
            Message::new("user", "What is the weather in Rome?"),
            Message::with_calls("Let me check the weather in Rome.", &[call("Rome")]),
            Message::tool_result(Some("call_2"), r#"{"temp": 18}"#),
            Message::new("assistant", "It is 18 degrees in Rome."),
            Message::new("user", q),
        ]
    };
    for (name, tm) in [("smollm2", smollm2()), ("smollm2+qwen25_tools", &qwen)] {
        for q in [
            "What is the weather in Paris?",
            "What is the weather in Lima?",
        ] {
            let p = tm
                .encode_chat_tools(&primed(q), &tools)
                .expect("chat prompt");
            let free = run(tm, &p, &Sampling::greedy().max_tokens(80));
            let c = grammar(&tools, ToolChoice::Auto, false);
            let g = run(
                tm,
                &p,
                &Sampling {
                    constrain: Some(c.clone()),
                    ..Sampling::greedy().max_tokens(80)
                },
            );
            println!("{name} {q:?}: free {:?}, auto {:?}", free.text, g.text);
            match first_refused(tm, &c, &free.ids) {
                None => assert_eq!(g.ids, free.ids, "{name} {q}"),
                Some(k) => {
                    assert_eq!(g.ids[..k], free.ids[..k], "{name} {q}: before {k}");
                    assert_ne!(g.ids.get(k), free.ids.get(k), "{name} {q}: step {k}");
                }
            }
        }
    }
}
