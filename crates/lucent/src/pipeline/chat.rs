//! Chat templates: a conversation (system / user / assistant messages) turned into the
//! one prompt string the model was trained on, by the Jinja template the GGUF file
//! carries in `tokenizer.chat_template` (rendered with `minijinja`, with Python's string
//! methods such as `.strip()` available as Hugging Face templates expect).
//!
//! SmolLM2's template is ChatML: `<|im_start|>user\n…<|im_end|>\n` per message and
//! `<|im_start|>assistant\n` to ask for a reply. A file without a template gets the
//! family's known format (Gemma: `<start_of_turn>user\n…<end_of_turn>\n`, reply after
//! `<start_of_turn>model\n`), else ChatML.
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
//! **A template is code from the model file.** Rendering is bounded: at most
//! [`RENDER_FUEL`] template instructions (plus [`FUEL_PER_MESSAGE`] per message) and
//! [`MAX_RENDERED_BYTES`] of output (plus four times the messages' own length), so
//! that a hostile template is an error, not a hang.

use serde::Serialize;

use crate::io::gguf::GgufFile;
use crate::io::gguf_tokenizer::{GgufTokenizer, QUOTE_MARK};
use crate::io::tokenizer::Tokenizer;
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
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// ChatML, used when a file has no template and its family has no known one.
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Gemma's turn format (its GGUF files may lack a template): a system message is put in
/// front of the first user turn; the assistant's role is called `model`.
pub const GEMMA: &str = "{{ bos_token }}{% set sys = namespace(text='') %}{% for message in messages %}{% if message['role'] == 'system' %}{% set sys.text = message['content'] + '\\n\\n' %}{% else %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' }}{% if role == 'user' %}{{ sys.text }}{% set sys.text = '' %}{% endif %}{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";

/// A chat template with the special-token texts it may use.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    bos: String,
    #[cfg_attr(not(feature = "chat-templates"), allow(dead_code))]
    eos: String,
}

impl ChatTemplate {
    /// From template text and the BOS/EOS token texts.
    pub fn new(source: &str, bos: &str, eos: &str) -> Self {
        ChatTemplate {
            source: source.into(),
            bos: bos.into(),
            eos: eos.into(),
        }
    }

    /// The file's `tokenizer.chat_template`, or the family's known format.
    pub fn from_gguf(f: &GgufFile, tok: &GgufTokenizer) -> Result<Self> {
        let text = |id: Option<u32>| {
            id.and_then(|i| tok.token_text(i))
                .unwrap_or_default()
                .to_string()
        };
        let source = match f.opt_str("tokenizer.chat_template")? {
            Some(s) => s.to_string(),
            None if f.architecture()?.starts_with("gemma") => GEMMA.to_string(),
            None => CHATML.to_string(),
        };
        Ok(ChatTemplate {
            source,
            bos: text(tok.bos_id()),
            eos: text(tok.eos_id()),
        })
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The BOS token's text (`<bos>`), which a template may write itself.
    pub fn bos(&self) -> &str {
        &self.bos
    }

    /// Render `messages`; with `add_generation_prompt`, end with the assistant's cue.
    /// A template that runs out of its instruction budget or writes more than its output
    /// budget (module docs) is an error.
    #[cfg(feature = "chat-templates")]
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        use minijinja::{context, Environment};
        let n = messages.len() as u64;
        let text_bytes: usize = messages
            .iter()
            .map(|m| m.role.len() + m.content.len())
            .sum();
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
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
                messages => messages,
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

    /// Render `messages` (this build has no `chat-templates` feature: an error).
    #[cfg(not(feature = "chat-templates"))]
    pub fn render(&self, _messages: &[Message], _add_generation_prompt: bool) -> Result<String> {
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
    pub fn encode_messages(
        &self,
        tok: &dyn Tokenizer,
        messages: &[Message],
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
        let quoted: Vec<Message> = messages
            .iter()
            .map(|m| Message {
                role: tok.quote_text(&m.role),
                content: tok.quote_text(&m.content),
            })
            .collect();
        let rendered = self.render(&quoted, add_generation_prompt)?;
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
