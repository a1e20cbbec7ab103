//! Tool calls (OpenAI's function calling): the tools a conversation offers are written
//! into its prompt, the model's answer is held to the call syntax with arguments valid
//! for each tool's `parameters` (a [`Constraint`] of the sampler chain), and the answer's
//! text is read back as calls.
//!
//! **The generic form** (lucent's one documented form, Hermes / Qwen style; see
//! `docs/tool-calls.md`). The tools are listed as JSON in a section of the system
//! message ([`system_section`]; a system message is put in front when the conversation
//! has none), and a call is written as
//!
//! ```text
//! <tool_call>
//! {"name": "get_weather", "arguments": {"city": "Paris"}}
//! </tool_call>
//! ```
//!
//! several calls one after another, separated by a newline ([`call_text`]). An
//! assistant message's earlier calls are written back in that form after its text, and a
//! tool's result is a user turn holding `<tool_response>…</tool_response>`
//! ([`result_message`]): every chat template knows user and assistant turns, so any
//! model's template renders the conversation.
//!
//! **The constraint** ([`constraint`]) is a Lark grammar for llguidance: each tool's call
//! is its fixed opening (`<tool_call>\n{"name": "NAME", "arguments": `) then `%json`
//! with the tool's `parameters` as the schema's root (so its `$ref`s resolve), then
//! `}\n</tool_call>`. `required` allows any tool's call, a named function only its own;
//! `parallel_tool_calls` allows one call or several (at most [`MAX_PARALLEL_CALLS`]).
//! `auto` allows either a call (from the first byte: the answer is calls only) or text
//! that nowhere spells `<tool_call>`, so a call is never written unconstrained. `none`
//! gives no constraint (and the caller writes no tools into the prompt).

use serde_json::Value;

use crate::pipeline::chat::Message;
use crate::pipeline::constrain::{Constraint, JSON_WHITESPACE};
use crate::{Error, Result};

/// The text that opens a call.
pub const CALL_OPEN: &str = "<tool_call>";
/// The text that closes a call.
pub const CALL_CLOSE: &str = "</tool_call>";
/// The most calls one answer may make with `parallel_tool_calls`. Unbounded, a small
/// model at temperature 1 tends to call again and again until `max_tokens` cuts a call
/// in half (SmolLM2-135M did so in the tests); OpenAI sets no number.
pub const MAX_PARALLEL_CALLS: usize = 4;

/// One function the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// Its name: 1 to 64 of `a-z A-Z 0-9 _ -` (OpenAI's rule).
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// A JSON schema of its arguments (an object); `{"type": "object"}` when not given.
    pub parameters: Value,
}

impl Tool {
    /// A tool; errors if `name` breaks OpenAI's rule ([`check_name`]).
    pub fn new(name: &str, description: Option<&str>, parameters: Option<Value>) -> Result<Tool> {
        check_name(name)?;
        Ok(Tool {
            name: name.into(),
            description: description.map(str::to_string),
            parameters: parameters.unwrap_or_else(|| serde_json::json!({"type": "object"})),
        })
    }

    /// OpenAI's shape of it: `{"type": "function", "function": {"name", "description",
    /// "parameters"}}` (as the prompt lists it, and as Hugging Face templates take it).
    pub fn to_openai(&self) -> Value {
        let mut f = serde_json::Map::new();
        f.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            f.insert("description".into(), Value::String(d.clone()));
        }
        f.insert("parameters".into(), self.parameters.clone());
        serde_json::json!({"type": "function", "function": f})
    }
}

/// Errors unless `name` is 1 to 64 characters of `a-z A-Z 0-9 _ -`.
pub fn check_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::Argument(format!(
            "the tool name {name:?} must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -"
        )))
    }
}

/// Which calls the answer may make (OpenAI's `tool_choice`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// Text or calls, as the model chooses (the default when tools are given).
    Auto,
    /// No call: the tools are not even shown to the model.
    None,
    /// One call or more, of any tool.
    Required,
    /// Calls of this function only.
    Function(String),
}

/// One call the model made, read back from its text.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The tool's name (one of those given).
    pub name: String,
    /// Its arguments, as JSON text (compact).
    pub arguments: String,
}

/// The system-message section that lists `tools` and says how to call them.
pub fn system_section(tools: &[Tool]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou can call the functions listed below. Each is described by a JSON object \
         with its name, what it does and a JSON schema of its arguments:\n<tools>\n",
    );
    for t in tools {
        s.push_str(&t.to_openai().to_string());
        s.push('\n');
    }
    s.push_str(
        "</tools>\n\nTo call a function, answer with its name and arguments as a JSON object \
         inside <tool_call></tool_call> tags, one call per tag:\n<tool_call>\n\
         {\"name\": \"function name\", \"arguments\": {\"argument\": \"value\"}}\n</tool_call>",
    );
    s
}

/// `messages` with the tools section: added to the end of the first system message, or
/// as a system message in front when there is none.
pub fn with_tools(messages: &[Message], tools: &[Tool]) -> Vec<Message> {
    let section = system_section(tools);
    let mut out = messages.to_vec();
    match out.iter_mut().find(|m| m.role == "system") {
        Some(m) if m.content.is_empty() => m.content = section,
        Some(m) => m.content = format!("{}\n\n{section}", m.content),
        None => out.insert(0, Message::new("system", &section)),
    }
    out
}

/// One call as the generic form writes it (`arguments` is JSON text).
pub fn call_text(name: &str, arguments: &str) -> String {
    format!(
        "{CALL_OPEN}\n{{\"name\": {}, \"arguments\": {arguments}}}\n{CALL_CLOSE}",
        Value::String(name.into())
    )
}

/// An assistant message that made `calls` after its text `content` (either may be
/// empty), as the generic form writes it.
pub fn assistant_message(content: &str, calls: &[ToolCall]) -> Message {
    let mut parts: Vec<String> = Vec::new();
    if !content.is_empty() {
        parts.push(content.to_string());
    }
    parts.extend(calls.iter().map(|c| call_text(&c.name, &c.arguments)));
    Message::new("assistant", &parts.join("\n"))
}

/// A tool's result as the generic form writes it: a user turn with the content inside
/// `<tool_response>` tags.
pub fn result_message(content: &str) -> Message {
    Message::new(
        "user",
        &format!("<tool_response>\n{content}\n</tool_response>"),
    )
}

/// The Lark grammar that holds an answer to the calls `choice` allows of `tools` (one,
/// or with `parallel` one or more); None for [`ToolChoice::None`]. Errors if there are
/// no tools or `choice` names a function that is not one of them.
pub fn constraint(
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
) -> Result<Option<Constraint>> {
    if *choice == ToolChoice::None {
        return Ok(None);
    }
    if tools.is_empty() {
        return Err(Error::Argument(
            "a tool choice needs at least one tool".into(),
        ));
    }
    let allowed: Vec<(usize, &Tool)> = match choice {
        ToolChoice::Function(name) => {
            let Some(i) = tools.iter().position(|t| &t.name == name) else {
                return Err(Error::Argument(format!(
                    "the tool choice names the function {name:?}, which is not one of the tools ({})",
                    tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                )));
            };
            vec![(i, &tools[i])]
        }
        _ => tools.iter().enumerate().collect(),
    };
    let mut g = String::new();
    g.push_str(match choice {
        ToolChoice::Auto => "start: TEXT | calls\n",
        _ => "start: calls\n",
    });
    // One call, or up to MAX_PARALLEL_CALLS: call ("\n" call ("\n" call)?)?
    let mut calls = String::from("call");
    if parallel {
        for _ in 1..MAX_PARALLEL_CALLS {
            calls = format!("call (\"\\n\" {calls})?");
        }
    }
    g.push_str(&format!("calls: {calls}\n"));
    let alts: Vec<String> = allowed.iter().map(|(i, _)| format!("call_{i}")).collect();
    g.push_str(&format!("call: {}\n", alts.join(" | ")));
    for (i, t) in &allowed {
        let open = format!("{CALL_OPEN}\n{{\"name\": \"{}\", \"arguments\": ", t.name);
        let close = format!("}}\n{CALL_CLOSE}");
        g.push_str(&format!(
            "call_{i}: {} args_{i} {}\n",
            Value::String(open),
            Value::String(close)
        ));
        let mut schema = t.parameters.clone();
        if let Value::Object(o) = &mut schema {
            o.entry("x-guidance")
                .or_insert_with(|| serde_json::json!({"whitespace_pattern": JSON_WHITESPACE}));
        }
        g.push_str(&format!("args_{i}: %json {schema}\n"));
    }
    if *choice == ToolChoice::Auto {
        g.push_str("TEXT: /(?s:.+)/ & ~/(?s:.*<tool_call>.*)/\n");
    }
    Ok(Some(Constraint::Lark(g)))
}

/// The calls in an answer's `text`, when the whole text (around whitespace) is one or
/// more calls in the generic form, each naming one of `tools` with arguments that are a
/// JSON object; None when it is anything else (a text answer).
pub fn parse_calls(text: &str, tools: &[Tool]) -> Option<Vec<ToolCall>> {
    let mut rest = text.trim();
    let mut calls = Vec::new();
    while !rest.is_empty() {
        let body = rest.strip_prefix(CALL_OPEN)?;
        let end = body.find(CALL_CLOSE)?;
        let v: Value = serde_json::from_str(body[..end].trim()).ok()?;
        let o = v.as_object()?;
        let name = o.get("name")?.as_str()?;
        let args = o.get("arguments")?;
        if !args.is_object() || !tools.iter().any(|t| t.name == name) {
            return None;
        }
        calls.push(ToolCall {
            name: name.to_string(),
            arguments: args.to_string(),
        });
        rest = body[end + CALL_CLOSE.len()..].trim_start();
    }
    (!calls.is_empty()).then_some(calls)
}

/// A fresh call id, `call_` and 24 letters and digits (OpenAI's form), unique with
/// overwhelming odds.
pub fn call_id() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    format!("call_{}", Alphanumeric.sample_string(&mut rand::rng(), 24))
}
