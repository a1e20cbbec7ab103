//! Chat templates: a conversation (system / user / assistant messages) turned into the
//! one prompt string the model was trained on, by the Jinja template the GGUF file
//! carries in `tokenizer.chat_template` (rendered with `minijinja`, with Python's string
//! methods such as `.strip()` available as Hugging Face templates expect).
//!
//! SmolLM2's template is ChatML: `<|im_start|>user\n…<|im_end|>\n` per message and
//! `<|im_start|>assistant\n` to ask for a reply. **A file without a template has no chat
//! turns**: it is a base model that continues text, and lucent does not invent turns for
//! it (the packaged Gemma 3 270M is such a file). A template can still be given by hand
//! ([`ChatTemplate::from_spec`]: a Jinja file, or the built-in `chatml` / `gemma`).
//!
//! **Only the messages you send.** Some templates write a system message of their own
//! when the conversation has none (SmolLM2's: "You are a helpful AI assistant named
//! SmolLM, trained by Hugging Face"). lucent leaves that invented turn out unless
//! [`ChatTemplate::keeping_default_system`] asks for it (llama.cpp keeps it): with it,
//! SmolLM2-135M answers "What is the capital of France?" in French on most seeds;
//! without it, "The capital of France is Paris." The turn is found by rendering the
//! conversation once more behind a marker system message and cutting that message's turn
//! away ([`ChatTemplate::render_given`]); a template whose system turn cannot be cut
//! that way (Gemma's, which folds the system text into the first user turn) is rendered
//! as it is.
//!
//! **What a person writes stays text.** A message that spells another turn's control
//! tokens (`<|im_start|>system`, `<start_of_turn>`, `<|endoftext|>`) must not open that
//! turn. [`ChatTemplate::encode_messages`] quotes every message's role and content
//! ([`GgufTokenizer::quote_text`]) before rendering, so that only the control tokens the
//! template itself writes are parsed as control tokens; the quoted text is encoded as
//! plain text and decodes back to exactly what was written. (A raw prompt, as
//! [`GgufTokenizer::encode`] takes it, keeps parsing special tokens, as llama.cpp does.)
//! This holds for templates that pass message text through whole or trimmed, sliced
//! at whitespace or ASCII case-mapped, as chat templates do; a template that cuts
//! characters out of the middle of a message could cut a quote mark away.
//!
//! **Tools.** A template with a tools section (Hugging Face's `tools` variable, as Qwen
//! 2.5's has) gets the tools, and the messages' calls and results, as those templates
//! read them ([`ChatTemplate::render_tools`], [`Message::to_template`]); `tojson` is
//! Python's `json.dumps` as `apply_chat_template` defines it. Which templates render
//! tools in a form lucent reads back is [`ChatTemplate::tool_call_format`] (the Hermes /
//! Qwen 2.5 form, [`ChatTemplate::renders_tools`], or Llama 3.x's bare JSON call); the
//! others get the generic form of [`crate::pipeline::tools`].
//!
//! **A template is code from the model file.** Rendering is bounded: at most
//! [`RENDER_FUEL`] template instructions (plus [`FUEL_PER_MESSAGE`] per message) and
//! [`MAX_RENDERED_BYTES`] of output (plus four times the messages' own length), so
//! that a hostile template is an error, not a hang.

use serde::Serialize;

use crate::io::gguf::GgufFile;
use crate::io::gguf_tokenizer::{GgufTokenizer, QUOTE_MARK};
use crate::io::tokenizer::Tokenizer;
use crate::pipeline::tools::{self, Tool, ToolCall};
use crate::{Error, Result};

/// Template instructions a rendering may run, besides [`FUEL_PER_MESSAGE`] per message
/// (the real templates take a few hundred per message).
pub const RENDER_FUEL: u64 = 1_000_000;
/// Template instructions allowed for each message.
pub const FUEL_PER_MESSAGE: u64 = 10_000;
/// Bytes a rendering may write, besides four times the messages' own length.
pub const MAX_RENDERED_BYTES: usize = 1 << 20;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool` (a tool's result).
    pub role: String,
    /// The text.
    pub content: String,
    /// Assistant: the tools it called, after its text (OpenAI's `tool_calls`).
    #[serde(skip)]
    pub tool_calls: Vec<ToolCall>,
    /// Tool: the id of the call this message is the result of (OpenAI's `tool_call_id`).
    #[serde(skip)]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// An assistant message with text `content` (may be empty) that called `calls`.
    pub fn with_calls(content: &str, calls: &[ToolCall]) -> Self {
        Message {
            tool_calls: calls.to_vec(),
            ..Message::new("assistant", content)
        }
    }

    /// A tool's result `content`, for the call `id` if given (role `tool`).
    pub fn tool_result(id: Option<&str>, content: &str) -> Self {
        Message {
            tool_call_id: id.map(str::to_string),
            ..Message::new("tool", content)
        }
    }

    /// Whether the message is part of a tool exchange (a call or a result), which a
    /// template without a tools section cannot render as it is.
    pub fn is_tool_part(&self) -> bool {
        !self.tool_calls.is_empty() || self.role == "tool"
    }

    /// The message as Hugging Face templates read it: `role`, `content`, and where
    /// given `tool_calls` (`[{"id", "type": "function", "function": {"name",
    /// "arguments"}}]`, the arguments an object, as those templates expect) and
    /// `tool_call_id`.
    pub fn to_template(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("role".into(), self.role.clone().into());
        m.insert("content".into(), self.content.clone().into());
        if !self.tool_calls.is_empty() {
            let calls: Vec<serde_json::Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    let args = serde_json::from_str(&c.arguments)
                        .unwrap_or_else(|_| serde_json::Value::String(c.arguments.clone()));
                    serde_json::json!({
                        "type": "function",
                        "function": {"name": c.name, "arguments": args},
                    })
                })
                .collect();
            m.insert("tool_calls".into(), calls.into());
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), id.clone().into());
        }
        serde_json::Value::Object(m)
    }
}

/// ChatML (`<|im_start|>role\n…<|im_end|>`), built in as `--chat-template chatml`.
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Gemma's turn format, built in as `--chat-template gemma`: a system message is put in
/// front of the first user turn; the assistant's role is called `model`.
pub const GEMMA: &str = "{{ bos_token }}{% set sys = namespace(text='') %}{% for message in messages %}{% if message['role'] == 'system' %}{% set sys.text = message['content'] + '\\n\\n' %}{% else %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' }}{% if role == 'user' %}{{ sys.text }}{% set sys.text = '' %}{% endif %}{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";

/// A chat template with the special-token texts it may use.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    bos: String,
    #[cfg_attr(not(feature = "chat-templates"), allow(dead_code))]
    eos: String,
    /// Keep a system message the template writes when the conversation has none.
    keep_default_system: bool,
}

/// The system message's text while [`ChatTemplate::render_given`] looks for its turn (a
/// Unicode noncharacter: no person's text holds it, and U+FDD0 is the quote mark).
const SYSTEM_MARKER: &str = "\u{FDD1}";
/// The BOS token's text while [`ChatTemplate::render_given`] looks for the system turn.
const BOS_MARKER: &str = "\u{FDD2}";

impl ChatTemplate {
    /// From template text and the BOS/EOS token texts.
    pub fn new(source: &str, bos: &str, eos: &str) -> Self {
        ChatTemplate {
            source: source.into(),
            bos: bos.into(),
            eos: eos.into(),
            keep_default_system: false,
        }
    }

    /// The file's `tokenizer.chat_template`; None for a file without one (a base model:
    /// no chat turns are invented for it).
    pub fn from_gguf(f: &GgufFile, tok: &GgufTokenizer) -> Result<Option<Self>> {
        let (bos, eos) = special_texts(tok);
        Ok(f.opt_str("tokenizer.chat_template")?
            .map(|s| ChatTemplate::new(s, &bos, &eos)))
    }

    /// A template named on the command line: `chatml` or `gemma` (built in), or the path
    /// of a Jinja file; `bos` / `eos` are the model's BOS and EOS token texts. Errors
    /// name the file that cannot be read.
    pub fn from_spec(spec: &str, bos: &str, eos: &str) -> Result<Self> {
        let source = match spec {
            "chatml" => CHATML.to_string(),
            "gemma" => GEMMA.to_string(),
            path => std::fs::read_to_string(path).map_err(|e| {
                Error::Argument(format!(
                    "--chat-template {path}: {e} (give a Jinja template file, or chatml / gemma)"
                ))
            })?,
        };
        Ok(ChatTemplate::new(&source, bos, eos))
    }

    /// The same template, keeping (`true`) or leaving out (`false`, the default) a system
    /// message the template writes on its own when the conversation has none (module
    /// docs). `true` renders as llama.cpp does.
    pub fn keeping_default_system(mut self, keep: bool) -> Self {
        self.keep_default_system = keep;
        self
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The BOS token's text (`<bos>`), which a template may write itself.
    pub fn bos(&self) -> &str {
        &self.bos
    }

    /// The EOS token's text (`<eos>`), which a template may write itself.
    pub fn eos(&self) -> &str {
        &self.eos
    }

    /// Render `messages` as [`ChatTemplate::render`] does, but without a system turn the
    /// template invents when `messages` has no system message (unless
    /// [`ChatTemplate::keeping_default_system`]). The invented turn is found by rendering
    /// the conversation behind a marker system message (and a marker BOS): when the
    /// marker's turn alone is a prefix of that rendering, what follows it is the
    /// conversation's own turns, and the result is those turns behind the BOS the
    /// template writes in front of the turn, if any. Otherwise (a
    /// template that folds the system text into a user turn, or refuses a lone system
    /// message) the plain rendering stands.
    pub fn render_given(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let plain = self.render(messages, add_generation_prompt)?;
        if self.keep_default_system || messages.iter().any(|m| m.role == "system") {
            return Ok(plain);
        }
        // Rendered with a marker for BOS too, so that the BOS the template writes is told
        // apart from a turn opener spelled the same (SmolLM2's BOS is `<|im_start|>`).
        let probe = ChatTemplate {
            bos: BOS_MARKER.into(),
            ..self.clone()
        };
        let mut marked = vec![Message::new("system", SYSTEM_MARKER)];
        marked.extend(messages.iter().cloned());
        let (Ok(probe_plain), Ok(whole), Ok(turn)) = (
            probe.render(messages, add_generation_prompt),
            probe.render(&marked, add_generation_prompt),
            probe.render(&marked[..1], false),
        ) else {
            return Ok(plain);
        };
        let once = |text: &str| text.matches(SYSTEM_MARKER).count() == 1;
        if !(once(&turn) && once(&whole) && whole.starts_with(&turn)) {
            return Ok(plain);
        }
        let own_turns = &whole[turn.len()..];
        if !probe_plain.ends_with(own_turns) {
            return Ok(plain);
        }
        let bos = if turn.starts_with(BOS_MARKER) {
            BOS_MARKER
        } else {
            ""
        };
        Ok(format!("{bos}{own_turns}").replace(BOS_MARKER, &self.bos))
    }

    /// Render `messages`; with `add_generation_prompt`, end with the assistant's cue.
    /// A template that runs out of its instruction budget or writes more than its output
    /// budget (module docs) is an error.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_tools(messages, &[], add_generation_prompt)
    }

    /// Render `messages` with `tools` in the template's `tools` variable (OpenAI's list,
    /// `[{"type": "function", "function": {...}}]`, as Hugging Face templates take it;
    /// undefined when `tools` is empty) and the messages' calls and results as those
    /// templates read them ([`Message::to_template`]). Whether the template writes them
    /// in a form lucent reads back is [`ChatTemplate::renders_tools`].
    pub fn render_tools(
        &self,
        messages: &[Message],
        tools: &[Tool],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let tools: Vec<serde_json::Value> = tools.iter().map(Tool::to_openai).collect();
        self.render_values(messages, &tools, add_generation_prompt)
    }

    /// Whether the template renders tools itself, in a form lucent reads back: it has a
    /// tools section (Hugging Face's `tools` variable) and writes an assistant's calls
    /// and a tool's results, the calls in the Hermes / Qwen 2.5 form that is also
    /// lucent's generic form (`<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`).
    /// Found by rendering a probe conversation (a marker tool, a call of it and its
    /// result) and looking for each part. A template that writes calls another way
    /// (Llama 3.1's bare JSON with `"parameters"`), or none, is false; which templates
    /// render the conversation themselves is [`ChatTemplate::tool_call_format`] (Hermes
    /// or Llama 3.x), the others get the generic form ([`tools::generic_messages`]).
    pub fn renders_tools(&self) -> bool {
        self.tool_call_format() == Some(tools::CallFormat::Hermes)
    }

    /// Which form the template writes an assistant's call in, found by the same probe
    /// render as [`ChatTemplate::renders_tools`] (a marker tool, a call of it with
    /// arguments `{"k": "v"}` and its result): [`tools::CallFormat::Hermes`] when the
    /// call appears as `<tool_call>` text, [`tools::CallFormat::Llama3Json`] when it
    /// appears as the bare object `{"name": "…", "parameters": {"k": "v"}}` (Llama
    /// 3.1 / 3.2 / 3.3), `None` for a template without a tools section, or one that
    /// writes calls in a form lucent does not read (those get the generic form, whose
    /// calls are in the Hermes form). A template with a format renders tools, calls and
    /// results itself ([`ChatTemplate::encode_tools`]), and the answer is held to and
    /// read back in that format ([`tools::constraint_in`], [`tools::split_answer_in`],
    /// [`tools::AnswerStream::with_format`]).
    pub fn tool_call_format(&self) -> Option<tools::CallFormat> {
        const NAME: &str = "lucent_probe_function";
        const DESCRIPTION: &str = "\u{FDD3}";
        const RESULT: &str = "\u{FDD4}";
        let tool = Tool::new(NAME, Some(DESCRIPTION), None).ok()?;
        let call = ToolCall {
            name: NAME.into(),
            arguments: r#"{"k": "v"}"#.into(),
        };
        let msgs = [
            Message::new("user", "u"),
            Message::with_calls("", std::slice::from_ref(&call)),
            Message::tool_result(Some("call_0"), RESULT),
        ];
        let out = self.render_tools(&msgs, &[tool], true).ok()?;
        if !(out.contains(DESCRIPTION) && out.contains(RESULT)) {
            return None;
        }
        if out.contains(&tools::call_text(NAME, r#"{"k": "v"}"#)) {
            Some(tools::CallFormat::Hermes)
        } else if out.contains(&format!(
            r#"{{"name": "{NAME}", "parameters": {{"k": "v"}}}}"#
        )) {
            Some(tools::CallFormat::Llama3Json)
        } else {
            None
        }
    }

    /// [`ChatTemplate::render_tools`] with the tools already in OpenAI's shape.
    #[cfg(feature = "chat-templates")]
    fn render_values(
        &self,
        messages: &[Message],
        tools: &[serde_json::Value],
        add_generation_prompt: bool,
    ) -> Result<String> {
        use minijinja::{context, Environment};
        let n = messages.len() as u64;
        let text_bytes: usize = messages
            .iter()
            .map(|m| {
                m.role.len()
                    + m.content.len()
                    + m.tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            })
            .sum::<usize>()
            + tools.iter().map(|t| t.to_string().len()).sum::<usize>();
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_filter("tojson", python_tojson);
        env.set_fuel(Some(
            RENDER_FUEL.saturating_add(FUEL_PER_MESSAGE.saturating_mul(n)),
        ));
        let tmpl = env
            .template_from_str(&self.source)
            .map_err(|e| Error::Tokenizer(format!("chat template does not parse: {e}")))?;
        let limit = MAX_RENDERED_BYTES.saturating_add(text_bytes.saturating_mul(4));
        let mut out = Bounded {
            bytes: Vec::new(),
            limit,
            over: false,
        };
        tmpl.render_captured_to(
            context! {
                messages => messages.iter().map(Message::to_template).collect::<Vec<_>>(),
                tools => (!tools.is_empty()).then_some(tools),
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos,
                eos_token => self.eos,
            },
            &mut out,
        )
        .map_err(|e| {
            if out.over {
                Error::Tokenizer(format!(
                    "chat template writes more than {limit} bytes for {n} messages of {text_bytes} bytes; \
                     the model file's tokenizer.chat_template is not a usable chat template"
                ))
            } else {
                Error::Tokenizer(format!("chat template failed to render: {e}"))
            }
        })?;
        String::from_utf8(out.bytes)
            .map_err(|e| Error::Tokenizer(format!("chat template wrote invalid UTF-8: {e}")))
    }

    /// Render `messages` with tools (this build has no `chat-templates` feature: an
    /// error).
    #[cfg(not(feature = "chat-templates"))]
    fn render_values(
        &self,
        _messages: &[Message],
        _tools: &[serde_json::Value],
        _add_generation_prompt: bool,
    ) -> Result<String> {
        Err(Error::Tokenizer(
            "this build of lucent has no `chat-templates` feature (Jinja chat templates); \
             give a raw prompt, or build with the feature"
                .into(),
        ))
    }

    /// Token ids of a conversation, ready for the model: the template rendered around
    /// the messages, with every role and content quoted so that control-token text in
    /// them stays text (module docs); BOS is added as the tokenizer's flags say unless
    /// the template wrote it. With `add_generation_prompt`, ends with the assistant's cue.
    /// Calls and tool results among the messages are written as
    /// [`ChatTemplate::encode_tools`] writes them.
    pub fn encode_messages(
        &self,
        tok: &dyn Tokenizer,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        self.encode_tools(tok, messages, &[], add_generation_prompt)
    }

    /// Token ids of a conversation that offers `tools` (may be empty) or carries calls
    /// and tool results: where the template renders tools itself in a form lucent reads
    /// back ([`ChatTemplate::tool_call_format`]: Hermes / Qwen 2.5 or Llama 3.x) it gets them, the calls and the results (their
    /// text quoted like the messages'); otherwise they are written in lucent's generic
    /// form ([`tools::generic_messages`]) into plain system, user and assistant turns.
    /// The rest is [`ChatTemplate::encode_messages`].
    pub fn encode_tools(
        &self,
        tok: &dyn Tokenizer,
        messages: &[Message],
        tools: &[Tool],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        if [&self.source, &self.bos, &self.eos]
            .iter()
            .any(|s| s.contains(QUOTE_MARK))
        {
            return Err(Error::Tokenizer(
                "the chat template (or its BOS/EOS text) contains U+FDD0, which lucent reserves for quoting message text"
                    .into(),
            ));
        }
        let with_tools = !tools.is_empty() || messages.iter().any(Message::is_tool_part);
        let own = with_tools && self.tool_call_format().is_some();
        let generic;
        let messages = if with_tools && !own {
            generic = tools::generic_messages(messages, tools);
            &generic[..]
        } else {
            messages
        };
        // Quoting JSON text keeps it JSON: marks go only in front of control-token
        // spellings, which JSON holds only inside strings.
        let quoted: Vec<Message> = messages
            .iter()
            .map(|m| Message {
                role: tok.quote_text(&m.role),
                content: tok.quote_text(&m.content),
                tool_calls: m
                    .tool_calls
                    .iter()
                    .map(|c| ToolCall {
                        name: tok.quote_text(&c.name),
                        arguments: tok.quote_text(&c.arguments),
                    })
                    .collect(),
                tool_call_id: m.tool_call_id.as_deref().map(|id| tok.quote_text(id)),
            })
            .collect();
        let rendered = if own {
            let tools: Vec<serde_json::Value> = tools
                .iter()
                .map(|t| {
                    serde_json::from_str(&tok.quote_text(&t.to_openai().to_string()))
                        .map_err(|e| Error::Tokenizer(format!("tool {:?}: {e}", t.name)))
                })
                .collect::<Result<_>>()?;
            // The template's own system turn holds the tools section: rendered as it is.
            self.render_values(&quoted, &tools, add_generation_prompt)?
        } else {
            self.render_given(&quoted, add_generation_prompt)?
        };
        let has_bos = !self.bos.is_empty() && rendered.starts_with(&self.bos);
        tok.encode_quoted(&rendered, !has_bos)
    }

    /// Token ids of rendered text, every special token in it parsed: only for text you
    /// trust entirely (a conversation goes through [`ChatTemplate::encode_messages`],
    /// which keeps the messages' text in its place). BOS is added as the tokenizer's
    /// flags say unless the template already wrote it.
    pub fn encode(&self, tok: &dyn Tokenizer, rendered: &str) -> Result<Vec<u32>> {
        let has_bos = !self.bos.is_empty() && rendered.starts_with(&self.bos);
        tok.encode_ids(rendered, !has_bos, true)
    }
}

/// The BOS and EOS token texts of a GGUF vocabulary (empty where it has none).
pub fn special_texts(tok: &GgufTokenizer) -> (String, String) {
    let text = |id: Option<u32>| {
        id.and_then(|i| tok.token_text(i))
            .unwrap_or_default()
            .to_string()
    };
    (text(tok.bos_id()), text(tok.eos_id()))
}

/// Jinja's `tojson` as Hugging Face's `apply_chat_template` defines it (Python's
/// `json.dumps(x, ensure_ascii=False, indent=indent)`): `", "` and `": "` between items,
/// keys in their given order, non-ASCII text as it is, no HTML escaping; with `indent`,
/// one item a line. (minijinja's own filter writes compact JSON with `<` escaped, which
/// no model was trained on.)
#[cfg(feature = "chat-templates")]
fn python_tojson(
    value: &minijinja::Value,
    indent: Option<minijinja::Value>,
    args: minijinja::value::Kwargs,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    use minijinja::{Error as JinjaError, ErrorKind};
    let indent = match indent {
        Some(i) => Some(i),
        None => args.get::<Option<minijinja::Value>>("indent")?,
    };
    args.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v).map_err(|_| {
            JinjaError::new(
                ErrorKind::InvalidOperation,
                "tojson: indent must be a number",
            )
        })?),
    };
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let pad = " ".repeat(n);
            let f = serde_json::ser::PrettyFormatter::with_indent(pad.as_bytes());
            serde::Serialize::serialize(
                value,
                &mut serde_json::Serializer::with_formatter(&mut out, f),
            )
        }
        None => serde::Serialize::serialize(
            value,
            &mut serde_json::Serializer::with_formatter(&mut out, PythonFormatter),
        ),
    };
    written.map_err(|e| {
        JinjaError::new(ErrorKind::InvalidOperation, "tojson: cannot write as JSON").with_source(e)
    })?;
    let text = String::from_utf8(out).map_err(|e| {
        JinjaError::new(ErrorKind::InvalidOperation, "tojson: not UTF-8").with_source(e)
    })?;
    Ok(minijinja::Value::from_safe_string(text))
}

/// serde_json's compact form with Python's default separators (`", "`, `": "`).
#[cfg(feature = "chat-templates")]
struct PythonFormatter;

#[cfg(feature = "chat-templates")]
impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// A writer that refuses to grow past `limit` bytes (`over` says that it refused).
#[cfg(feature = "chat-templates")]
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
    over: bool,
}

#[cfg(feature = "chat-templates")]
impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.limit {
            self.over = true;
            return Err(std::io::Error::other("rendered text over its limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn chatml_and_gemma_render() -> TestResult {
        let msgs = [
            Message::new("system", "Be brief."),
            Message::new("user", " Hi "),
        ];
        let c = ChatTemplate::new(CHATML, "", "");
        assert_eq!(
            c.render(&msgs, true)?,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n"
        );
        let g = ChatTemplate::new(GEMMA, "<bos>", "<eos>");
        assert_eq!(
            g.render(&msgs[1..], true)?,
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(
            g.render(&msgs, false)?,
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        );
        Ok(())
    }

    /// A template that writes a system message of its own, as SmolLM2's does, with BOS
    /// spelled like its turn opener.
    const SELF_SYSTEM: &str = "{{ bos_token }}{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nI am the default.<|im_end|>\n' }}{% endif %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn only_the_messages_given_unless_the_default_is_kept() -> TestResult {
        let user = [Message::new("user", "Hi")];
        let with_system = [
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
        ];
        for bos in ["", "<s>", "<|im_start|>"] {
            let t = ChatTemplate::new(SELF_SYSTEM, bos, "");
            assert_eq!(
                t.render_given(&user, true)?,
                format!("{bos}<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
            );
            // Kept on request: the template's own rendering.
            let kept = t.clone().keeping_default_system(true);
            assert_eq!(kept.render_given(&user, true)?, t.render(&user, true)?);
            assert!(t.render(&user, true)?.contains("I am the default."));
            // A system message given is the template's own rendering either way.
            assert_eq!(
                t.render_given(&with_system, false)?,
                t.render(&with_system, false)?
            );
        }
        // Templates that invent nothing render as they are; Gemma's, which folds the
        // system text into the first user turn, too.
        for (src, bos) in [(CHATML, ""), (GEMMA, "<bos>")] {
            let t = ChatTemplate::new(src, bos, "<eos>");
            for msgs in [&user[..], &with_system[..]] {
                assert_eq!(t.render_given(msgs, true)?, t.render(msgs, true)?);
            }
        }
        Ok(())
    }

    #[test]
    fn built_in_templates_by_name_and_files_by_path() -> TestResult {
        let c = ChatTemplate::from_spec("chatml", "", "")?;
        assert_eq!(c.source(), CHATML);
        assert_eq!(
            ChatTemplate::from_spec("gemma", "<bos>", "<eos>")?.source(),
            GEMMA
        );
        let e = ChatTemplate::from_spec("/no/such/template.jinja", "", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--chat-template /no/such/template.jinja"), "{e}");
        Ok(())
    }

    #[test]
    fn python_string_methods_work() -> TestResult {
        let t = ChatTemplate::new("{{ messages[0]['content'].strip().upper() }}", "", "");
        assert_eq!(t.render(&[Message::new("user", "  hi ")], false)?, "HI");
        Ok(())
    }

    #[test]
    fn broken_template_is_an_error() {
        let t = ChatTemplate::new("{% for %}", "", "");
        assert!(t.render(&[], true).is_err());
    }
}
