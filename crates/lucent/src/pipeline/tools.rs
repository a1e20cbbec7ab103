//! Tool calls (OpenAI's function calling): the tools a conversation offers are written
//! into its prompt, the model's answer is held to the call syntax with arguments valid
//! for each tool's `parameters` (a [`Constraint`] of the sampler chain), and the answer's
//! text is read back as calls.
//!
//! **The model's own template** renders the tools, the calls and the results where it
//! has a tools section that writes calls in a form lucent reads back ([`CallFormat`],
//! found by [`ChatTemplate::tool_call_format`](crate::pipeline::ChatTemplate::tool_call_format)):
//! the Hermes / Qwen 2.5 form, or Llama 3.x's bare `{"name": …, "parameters": …}`;
//! otherwise the conversation takes the generic form ([`generic_messages`]). The
//! constraint and the reading back then follow that format ([`constraint_in`],
//! [`split_answer_in`], [`AnswerStream::with_format`]); the functions without `_in`
//! are the Hermes form.
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
//! `auto` allows text that nowhere spells `<tool_call>`, or text up to its first
//! `<tool_call>` and then calls, so a call is never written unconstrained. `none`
//! gives no constraint (and the caller writes no tools into the prompt).
//!
//! **Reading back**: [`split_answer`] takes a whole answer apart into its text and its
//! calls; [`AnswerStream`] does it as the text arrives, a call's arguments in pieces.

use serde_json::Value;

use crate::pipeline::chat::Message;
use crate::pipeline::constrain::{Constraint, JSON_WHITESPACE};
use crate::{Error, Result};

/// The text that opens a call.
pub const CALL_OPEN: &str = "<tool_call>";
/// The text that closes a call.
pub const CALL_CLOSE: &str = "</tool_call>";
/// The text after a call's arguments: the call object's `}` and the closing tag.
pub const ARGS_CLOSE: &str = "}\n</tool_call>";
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
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// `messages` in the generic form, for a template that does not render tools itself:
/// each assistant message's calls written after its text ([`assistant_message`]), each
/// tool result a user turn ([`result_message`]), and, when `tools` is not empty, the
/// tools section in the system message ([`with_tools`]).
pub fn generic_messages(messages: &[Message], tools: &[Tool]) -> Vec<Message> {
    let plain: Vec<Message> = messages
        .iter()
        .map(|m| match m.role.as_str() {
            "tool" => result_message(&m.content),
            "assistant" if !m.tool_calls.is_empty() => assistant_message(&m.content, &m.tool_calls),
            _ => m.clone(),
        })
        .collect();
    if tools.is_empty() {
        plain
    } else {
        with_tools(&plain, tools)
    }
}

/// The Lark grammar that holds an answer to the calls `choice` allows of `tools` (one,
/// or with `parallel` one or more); None for [`ToolChoice::None`]. Errors if there are
/// no tools or `choice` names a function that is not one of them.
pub fn constraint(
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
) -> Result<Option<Constraint>> {
    constraint_in(CallFormat::Hermes, tools, choice, parallel)
}

/// [`constraint`] for calls written in `format`. [`CallFormat::Hermes`] is
/// [`constraint`]'s grammar. [`CallFormat::Llama3Json`]: a call is the bare object
/// `{"name": "NAME", "parameters": ARGS}` (ARGS by `%json` with the tool's
/// `parameters`, as the Hermes grammar does), and the answer is one call from its first
/// byte (`required`, a named function) or, for `auto`, one call or text whose first
/// byte is not `{`. Llama 3.x templates write one call per assistant turn, so
/// `parallel` allows no second call in that form.
pub fn constraint_in(
    format: CallFormat,
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
    if format == CallFormat::Llama3Json {
        return Ok(Some(llama3_grammar(&allowed, choice)));
    }
    // `auto`: text that nowhere spells `<tool_call>` (the whole answer), or text up to
    // its first `<tool_call>` (PRELUDE, empty or not; one lexeme, so the lexer never has
    // to take back text it gave TEXT) followed by that call's rest and maybe more calls.
    // Otherwise: calls from the first byte.
    // Further calls with parallel_tool_calls, up to MAX_PARALLEL_CALLS in all:
    // ("\n" call ("\n" call)?)?
    let mut more = String::new();
    if parallel {
        for _ in 1..MAX_PARALLEL_CALLS {
            more = format!(" (\"\\n\" call{more})?");
        }
    }
    let mut g = match choice {
        ToolChoice::Auto => format!("start: TEXT | PRELUDE first{more}\n"),
        _ => format!("start: call{more}\n"),
    };
    g.push_str(&format!("call: {}\n", alternatives(&allowed, "call")));
    if *choice == ToolChoice::Auto {
        g.push_str(&format!("first: {}\n", alternatives(&allowed, "body")));
    }
    for (i, t) in &allowed {
        let open = format!("\n{{\"name\": \"{}\", \"arguments\": ", t.name);
        g.push_str(&format!(
            "call_{i}: {} body_{i}\nbody_{i}: {} args_{i} {}\n",
            Value::String(CALL_OPEN.into()),
            Value::String(open),
            Value::String(ARGS_CLOSE.into())
        ));
        g.push_str(&format!("args_{i}: %json {}\n", args_schema(t)));
    }
    if *choice == ToolChoice::Auto {
        g.push_str("TEXT: /(?s:.+)/ & ~/(?s:.*<tool_call>.*)/\n");
        g.push_str("PRELUDE: /(?s:.*<tool_call>)/ & ~/(?s:.*<tool_call>.+)/\n");
    }
    Ok(Some(Constraint::Lark(g)))
}

/// The grammar rule alternatives `PREFIX_i | PREFIX_j | …`, one per allowed tool (its
/// index among the request's tools).
fn alternatives(allowed: &[(usize, &Tool)], prefix: &str) -> String {
    allowed
        .iter()
        .map(|(i, _)| format!("{prefix}_{i}"))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A tool's `parameters` as the `%json` schema of its arguments: JSON whitespace held
/// to [`JSON_WHITESPACE`] unless the schema says otherwise.
fn args_schema(t: &Tool) -> Value {
    let mut schema = t.parameters.clone();
    if let Value::Object(o) = &mut schema {
        o.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({"whitespace_pattern": JSON_WHITESPACE}));
    }
    schema
}

/// The Llama 3.x grammar of [`constraint_in`]: one bare call of an `allowed` tool
/// (`{"name": "NAME", "parameters": ` ARGS `}`), or for `auto` that or TEXT, one or
/// more characters of which the first is not `{` (the two differ at the first byte,
/// so the lexer never takes back text).
fn llama3_grammar(allowed: &[(usize, &Tool)], choice: &ToolChoice) -> Constraint {
    let mut g = match choice {
        ToolChoice::Auto => "start: TEXT | call\n".to_string(),
        _ => "start: call\n".to_string(),
    };
    g.push_str(&format!("call: {}\n", alternatives(allowed, "call")));
    for (i, t) in allowed {
        g.push_str(&format!(
            "call_{i}: {} args_{i} \"}}\"\nargs_{i}: %json {}\n",
            Value::String(llama3_head(&t.name)),
            args_schema(t)
        ));
    }
    if *choice == ToolChoice::Auto {
        g.push_str("TEXT: /[^{](?s:.*)/\n");
    }
    Constraint::Lark(g)
}

/// A Llama 3.x call up to its arguments, as the template and the grammar write it:
/// `{"name": "NAME", "parameters": `.
fn llama3_head(name: &str) -> String {
    format!(
        "{{\"name\": {}, \"parameters\": ",
        Value::String(name.into())
    )
}

/// [`parse_calls`] for calls written in `format`. For [`CallFormat::Llama3Json`] the
/// whole text (around whitespace) must be one bare call `{"name": NAME, "parameters":
/// ARGS}` naming one of `tools`, ARGS a JSON object; its arguments are ARGS as the model
/// wrote them (compacted) where the call has the grammar's form, else as parsed.
pub fn parse_calls_in(format: CallFormat, text: &str, tools: &[Tool]) -> Option<Vec<ToolCall>> {
    if format == CallFormat::Hermes {
        return parse_calls(text, tools);
    }
    let text = text.trim();
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let v = values.next()?.ok()?;
    if !text[values.byte_offset()..].trim().is_empty() {
        return None;
    }
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?;
    let args = o.get("parameters")?;
    if !args.is_object() || !tools.iter().any(|t| t.name == name) {
        return None;
    }
    let arguments = text
        .strip_prefix(&llama3_head(name))
        .and_then(|r| r.strip_suffix('}'))
        .map_or_else(|| args.to_string(), compact_json);
    Some(vec![ToolCall {
        name: name.to_string(),
        arguments,
    }])
}

/// [`split_answer`] for calls written in `format`. For [`CallFormat::Llama3Json`] an
/// answer is a call or text, never both: the whole answer when it is one call
/// ([`parse_calls_in`]), with content `""`; None otherwise.
pub fn split_answer_in<'a>(
    format: CallFormat,
    text: &'a str,
    tools: &[Tool],
) -> Option<(&'a str, Vec<ToolCall>)> {
    match format {
        CallFormat::Hermes => split_answer(text, tools),
        CallFormat::Llama3Json => parse_calls_in(format, text, tools).map(|c| ("", c)),
    }
}

/// The calls in an answer's `text`, when the whole text (around whitespace) is one or
/// more calls in the generic form, each naming one of `tools` with arguments that are a
/// JSON object; None when it is anything else (a text answer). A call's JSON is read as
/// JSON up to its end, so a string argument may spell `</tool_call>` (the grammar
/// allows it, and Gemma 3 at temperature 1 writes it).
pub fn parse_calls(text: &str, tools: &[Tool]) -> Option<Vec<ToolCall>> {
    let mut rest = text.trim();
    let mut calls = Vec::new();
    while !rest.is_empty() {
        let body = rest.strip_prefix(CALL_OPEN)?;
        let mut values = serde_json::Deserializer::from_str(body).into_iter::<Value>();
        let v = values.next()?.ok()?;
        let end = values.byte_offset();
        let after = body[end..].trim_start().strip_prefix(CALL_CLOSE)?;
        let written = body[..end].trim();
        let o = v.as_object()?;
        let name = o.get("name")?.as_str()?;
        let args = o.get("arguments")?;
        if !args.is_object() || !tools.iter().any(|t| t.name == name) {
            return None;
        }
        // The arguments as the model wrote them (compacted), where the call has the
        // form the grammar writes; else as parsed.
        let arguments = written
            .strip_prefix(&call_head(name))
            .and_then(|r| r.strip_suffix('}'))
            .map_or_else(|| args.to_string(), compact_json);
        calls.push(ToolCall {
            name: name.to_string(),
            arguments,
        });
        rest = after.trim_start();
    }
    (!calls.is_empty()).then_some(calls)
}

/// An answer's text read as `auto` allows it: the text before its first `<tool_call>`
/// (`content`, as written) and the calls from there on, when they are calls
/// ([`parse_calls`]); None for an answer without calls, or whose calls do not read.
pub fn split_answer<'a>(text: &'a str, tools: &[Tool]) -> Option<(&'a str, Vec<ToolCall>)> {
    let at = text.find(CALL_OPEN)?;
    let calls = parse_calls(&text[at..], tools)?;
    Some((&text[..at], calls))
}

/// A call's JSON up to its arguments, as the grammar writes it after `<tool_call>\n`:
/// `{"name": "NAME", "arguments": `.
fn call_head(name: &str) -> String {
    format!(
        "{{\"name\": {}, \"arguments\": ",
        Value::String(name.into())
    )
}

/// `json` without the whitespace between its tokens (whitespace inside strings stays).
pub fn compact_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    JsonCompactor::default().push(json, &mut out);
    out
}

/// [`compact_json`] for JSON text that arrives in pieces.
#[derive(Clone, Debug, Default)]
pub struct JsonCompactor {
    in_string: bool,
    escaped: bool,
}

impl JsonCompactor {
    /// Append `piece` to `out` without the whitespace outside strings.
    pub fn push(&mut self, piece: &str, out: &mut String) {
        for c in piece.chars() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.in_string = false;
                }
            } else if c == '"' {
                self.in_string = true;
            } else if matches!(c, ' ' | '\t' | '\n' | '\r') {
                continue;
            }
            out.push(c);
        }
    }
}

/// What a streamed answer says so far, piece by piece ([`AnswerStream`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamPart {
    /// Text of the answer (what `auto` allows before a call, or a text answer).
    Content(String),
    /// Call `index` begins: its function's name.
    CallStart {
        /// Which call of the answer (0, 1, …).
        index: usize,
        /// The function called.
        name: String,
    },
    /// A piece of call `index`'s arguments (compact JSON text; the pieces joined are
    /// [`parse_calls`]' `arguments`).
    Arguments {
        /// Which call of the answer.
        index: usize,
        /// The piece.
        text: String,
    },
}

/// Reads an answer with tools offered as its text arrives, and says as soon as it can
/// what it is: text goes out as [`StreamPart::Content`] except while it may be the start
/// of `<tool_call>` (held) or is whitespace only (held until there is more, so that an
/// answer of calls only sends no content); a call goes out as its name once its head
/// `<tool_call>\n{"name": "…", "arguments": ` is complete, then its arguments piece by
/// piece as they come (held only while they may be the start of the closing
/// `}\n</tool_call>`). Joined, the parts equal [`split_answer`] of the whole text
/// (content `None` where it is whitespace), for every way of cutting the text.
///
/// In the Llama 3.x form ([`AnswerStream::with_format`]) an answer whose first
/// character other than whitespace is `{` is read as one call: its name once the head
/// `{"name": "…", "parameters": ` is complete, then its arguments as they come (the
/// last `}` and whitespace after it held, as they may end the call); any other answer
/// is content from there on. (Text after a call, which the grammar does not allow,
/// goes out as more arguments: the stream has said the call by then, while
/// [`split_answer_in`] of the whole reads such an answer as text.)
#[derive(Clone, Debug)]
pub struct AnswerStream {
    format: CallFormat,
    tools: Vec<String>,
    held: String,
    state: StreamState,
    /// Content sent so far (something other than whitespace).
    said: bool,
    calls: usize,
    compactor: JsonCompactor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamState {
    /// Text, or not known yet.
    Text,
    /// In a call's head (`held` starts with `<tool_call>`).
    Head,
    /// In a call's arguments.
    Arguments,
    /// After a call: another, or the end.
    Between,
    /// Calls not in the grammar's form: read whole at the end.
    Whole,
    /// Text to the end (Llama 3.x form: the answer does not start with `{`).
    Prose,
}

impl AnswerStream {
    /// A reader for an answer that may call `tools`, in the Hermes form.
    pub fn new(tools: &[Tool]) -> Self {
        Self::with_format(tools, CallFormat::Hermes)
    }

    /// A reader for an answer that may call `tools`, written in `format`.
    pub fn with_format(tools: &[Tool], format: CallFormat) -> Self {
        AnswerStream {
            format,
            tools: tools.iter().map(|t| t.name.clone()).collect(),
            held: String::new(),
            state: StreamState::Text,
            said: false,
            calls: 0,
            compactor: JsonCompactor::default(),
        }
    }

    /// Calls begun so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Take the next piece of the answer's text: what can be said now.
    pub fn feed(&mut self, piece: &str) -> Vec<StreamPart> {
        self.held.push_str(piece);
        let mut out = Vec::new();
        loop {
            let before = (self.state, self.held.len());
            let llama = self.format == CallFormat::Llama3Json;
            match self.state {
                StreamState::Text if llama => self.read_text_llama3(),
                StreamState::Head if llama => self.read_head_llama3(&mut out),
                StreamState::Arguments if llama => self.read_arguments_llama3(&mut out),
                StreamState::Prose => {
                    if !self.held.is_empty() {
                        out.push(StreamPart::Content(std::mem::take(&mut self.held)));
                    }
                }
                StreamState::Text => self.read_text(&mut out),
                StreamState::Head => self.read_head(&mut out),
                StreamState::Arguments => self.read_arguments(&mut out),
                StreamState::Between => {
                    let t = self.held.trim_start();
                    if t.starts_with(CALL_OPEN) {
                        self.held = t.to_string();
                        self.state = StreamState::Head;
                    } else if !CALL_OPEN.starts_with(t) {
                        self.state = StreamState::Whole;
                    }
                }
                StreamState::Whole => {}
            }
            if (self.state, self.held.len()) == before {
                return out;
            }
        }
    }

    /// The end of the answer: what is left to say, and whether the answer made calls.
    pub fn finish(&mut self) -> (Vec<StreamPart>, bool) {
        let mut out = Vec::new();
        match self.state {
            StreamState::Text | StreamState::Prose if !self.held.is_empty() => {
                out.push(StreamPart::Content(std::mem::take(&mut self.held)));
            }
            // Llama 3.x: the call ends with the answer, at its last `}`.
            StreamState::Arguments
                if self.format == CallFormat::Llama3Json && self.held.trim() == "}" =>
            {
                self.held.clear();
                self.calls += 1;
            }
            StreamState::Whole => {
                let names: Vec<Tool> = self
                    .tools
                    .iter()
                    .filter_map(|n| Tool::new(n, None, None).ok())
                    .collect();
                let text = std::mem::take(&mut self.held);
                match parse_calls_in(self.format, &text, &names) {
                    Some(calls) => {
                        for c in calls {
                            let index = self.calls;
                            self.calls += 1;
                            out.push(StreamPart::CallStart {
                                index,
                                name: c.name,
                            });
                            out.push(StreamPart::Arguments {
                                index,
                                text: c.arguments,
                            });
                        }
                    }
                    None if self.calls == 0 => out.push(StreamPart::Content(text)),
                    None => {}
                }
            }
            _ => {}
        }
        (out, self.calls > 0)
    }

    fn read_text(&mut self, out: &mut Vec<StreamPart>) {
        if let Some(at) = self.held.find(CALL_OPEN) {
            let text: String = self.held.drain(..at).collect();
            if self.said || !text.trim().is_empty() {
                out.push(StreamPart::Content(text));
            }
            self.state = StreamState::Head;
            return;
        }
        let keep = longest_suffix_prefix(&self.held, CALL_OPEN);
        let ready = &self.held[..self.held.len() - keep];
        if !ready.is_empty() && (self.said || !ready.trim().is_empty()) {
            out.push(StreamPart::Content(ready.to_string()));
            self.said = true;
            self.held.drain(..ready.len());
        }
    }

    fn read_head(&mut self, out: &mut Vec<StreamPart>) {
        let rest = &self.held[CALL_OPEN.len()..];
        let open = "\n{\"name\": \"";
        if rest.len() < open.len() {
            if !open.starts_with(rest) {
                self.state = StreamState::Whole;
            }
            return;
        }
        let Some(name_and_more) = rest.strip_prefix(open) else {
            self.state = StreamState::Whole;
            return;
        };
        let Some(q) = name_and_more.find('"') else {
            return;
        };
        let name = &name_and_more[..q];
        let head = format!("\n{}", call_head(name));
        if rest.len() < head.len() {
            if !head.starts_with(rest) {
                self.state = StreamState::Whole;
            }
            return;
        }
        if !rest.starts_with(&head) || !self.tools.iter().any(|t| t == name) {
            self.state = StreamState::Whole;
            return;
        }
        out.push(StreamPart::CallStart {
            index: self.calls,
            name: name.to_string(),
        });
        self.held.drain(..CALL_OPEN.len() + head.len());
        self.compactor = JsonCompactor::default();
        self.state = StreamState::Arguments;
    }

    /// Llama 3.x: whitespace is held; then `{` begins a call, anything else is text.
    fn read_text_llama3(&mut self) {
        let t = self.held.trim_start();
        if t.starts_with('{') {
            self.held = t.to_string();
            self.state = StreamState::Head;
        } else if !t.is_empty() {
            self.state = StreamState::Prose;
        }
    }

    /// Llama 3.x: `held` starts with `{`; the call's name once its head is complete.
    fn read_head_llama3(&mut self, out: &mut Vec<StreamPart>) {
        let open = "{\"name\": \"";
        if self.held.len() < open.len() {
            if !open.starts_with(self.held.as_str()) {
                self.state = StreamState::Whole;
            }
            return;
        }
        let Some(name_and_more) = self.held.strip_prefix(open) else {
            self.state = StreamState::Whole;
            return;
        };
        let Some(q) = name_and_more.find('"') else {
            return;
        };
        let name = &name_and_more[..q];
        let head = llama3_head(name);
        if self.held.len() < head.len() {
            if !head.starts_with(self.held.as_str()) {
                self.state = StreamState::Whole;
            }
            return;
        }
        if !self.held.starts_with(&head) || !self.tools.iter().any(|t| t == name) {
            self.state = StreamState::Whole;
            return;
        }
        out.push(StreamPart::CallStart {
            index: self.calls,
            name: name.to_string(),
        });
        self.held.drain(..head.len());
        self.compactor = JsonCompactor::default();
        self.state = StreamState::Arguments;
    }

    /// Llama 3.x: the arguments so far, less the last `}` and whitespace after it (they
    /// may be the call's end, known only at the end of the answer).
    fn read_arguments_llama3(&mut self, out: &mut Vec<StreamPart>) {
        let end = self.held.trim_end();
        let upto = end.strip_suffix('}').unwrap_or(end).len();
        let mut text = String::new();
        self.compactor.push(&self.held[..upto], &mut text);
        if !text.is_empty() {
            out.push(StreamPart::Arguments {
                index: self.calls,
                text,
            });
        }
        self.held.drain(..upto);
    }

    fn read_arguments(&mut self, out: &mut Vec<StreamPart>) {
        let (upto, done) = match self.held.find(ARGS_CLOSE) {
            Some(at) => (at, true),
            None => (
                self.held.len() - longest_suffix_prefix(&self.held, ARGS_CLOSE),
                false,
            ),
        };
        let mut text = String::new();
        self.compactor.push(&self.held[..upto], &mut text);
        if !text.is_empty() {
            out.push(StreamPart::Arguments {
                index: self.calls,
                text,
            });
        }
        if done {
            self.held.drain(..upto + ARGS_CLOSE.len());
            self.calls += 1;
            self.state = StreamState::Between;
        } else {
            self.held.drain(..upto);
        }
    }
}

/// The length of the longest end of `text` that is a start of `pattern` (shorter than
/// `pattern`), in bytes.
fn longest_suffix_prefix(text: &str, pattern: &str) -> usize {
    (1..pattern.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && pattern.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// A fresh call id, `call_` and 24 letters and digits (OpenAI's form), unique with
/// overwhelming odds.
pub fn call_id() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    format!("call_{}", Alphanumeric.sample_string(&mut rand::rng(), 24))
}

/// The form a chat template writes an assistant's tool call in
/// ([`crate::pipeline::ChatTemplate::tool_call_format`] detects it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallFormat {
    /// Hermes / Qwen 2.5: `<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>`,
    /// also lucent's generic form.
    Hermes,
    /// Llama 3.1 / 3.2 / 3.3: a bare object `{"name": NAME, "parameters": ARGS}`, one
    /// call per assistant turn, results under the `ipython` header.
    Llama3Json,
}
