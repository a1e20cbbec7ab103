//! Chat templates: a conversation (system / user / assistant messages) turned into the
//! one prompt string the model was trained on, by the Jinja template the GGUF file
//! carries in `tokenizer.chat_template` (rendered with `minijinja`, with Python's string
//! methods such as `.strip()` available as Hugging Face templates expect).
//!
//! SmolLM2's template is ChatML: `<|im_start|>user\n…<|im_end|>\n` per message and
//! `<|im_start|>assistant\n` to ask for a reply. A file without a template gets the
//! family's known format (Gemma: `<start_of_turn>user\n…<end_of_turn>\n`, reply after
//! `<start_of_turn>model\n`), else ChatML.

use serde::Serialize;

use crate::io::gguf::GgufFile;
use crate::io::gguf_tokenizer::GgufTokenizer;
use crate::io::tokenizer::Tokenizer;
use crate::{Error, Result};

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
    #[cfg(feature = "chat-templates")]
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        use minijinja::{context, Environment};
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        let tmpl = env
            .template_from_str(&self.source)
            .map_err(|e| Error::Tokenizer(format!("chat template does not parse: {e}")))?;
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos,
            eos_token => self.eos,
        })
        .map_err(|e| Error::Tokenizer(format!("chat template failed to render: {e}")))
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

    /// Token ids of rendered text: BOS is added as the tokenizer's flags say unless the
    /// template already wrote it.
    pub fn encode(&self, tok: &dyn Tokenizer, rendered: &str) -> Result<Vec<u32>> {
        let has_bos = !self.bos.is_empty() && rendered.starts_with(&self.bos);
        tok.encode_ids(rendered, !has_bos, true)
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
