//! The request bodies of OpenAI's API (and the extra fields lucent and llama-server
//! accept), parsed with the path of a wrong field in the error, and checked into
//! lucent's [`Sampling`].
//!
//! Shapes follow the official `openai` Python client's types (`types/chat/
//! completion_create_params.py`, `types/completion_create_params.py`,
//! `types/embedding_create_params.py`). Defaults are OpenAI's: temperature 1, top-p 1,
//! no top-k or min-p, `n` 1, as many tokens as the context leaves. Extra sampling
//! fields: `top_k`, `min_p`, `repeat_penalty`, `repeat_last_n`, `ignore_eos`.

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use lucent::pipeline::generate::Sampling;
use lucent::pipeline::tools::{self, CallFormat, Tool, ToolCall, ToolChoice};
use lucent::pipeline::{Constraint, Message};

use crate::error::ApiError;
use crate::inside::InsideRequest;

/// Parse a JSON body; errors name the field at fault (`messages[0].content`).
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." || path == "?" {
            ApiError::invalid(format!(
                "the request body is not valid JSON for this route: {inner}"
            ))
        } else {
            ApiError::invalid_param(&path, format!("{path}: {inner}"))
        }
    })
}

/// `stop`: one string or a list.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    pub include_usage: Option<bool>,
}

/// A chat message's content: text, or a list of parts of which lucent reads the text.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Content parts (`{"type": "text", "text": …}`).
    Parts(Vec<ContentPart>),
}

/// One part of a message's content.
#[derive(Clone, Debug, Deserialize)]
pub struct ContentPart {
    /// `text` (other kinds are refused).
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    pub text: Option<String>,
}

/// One chat message.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its content (`null` for an assistant message that only calls tools).
    pub content: Option<Content>,
    /// Assistant: the tools it called.
    pub tool_calls: Option<Vec<MessageToolCall>>,
    /// Tool: the call this is the result of.
    pub tool_call_id: Option<String>,
}

/// One call of an assistant message (`{"id", "type": "function", "function": {"name",
/// "arguments"}}`).
#[derive(Clone, Debug, Deserialize)]
pub struct MessageToolCall {
    /// The call's id.
    pub id: Option<String>,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// The function called.
    pub function: MessageFunctionCall,
}

/// The function of a [`MessageToolCall`].
#[derive(Clone, Debug, Deserialize)]
pub struct MessageFunctionCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// The body of `/v1/chat/completions` and `/v1/completions` (one struct: most fields
/// are shared; each route checks the ones that are its own).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct GenerateRequest {
    /// The model's name.
    pub model: Option<String>,
    /// Chat: the conversation.
    pub messages: Option<Vec<ChatMessage>>,
    /// Completions: a string, a list of strings, a list of token ids, or a list of those.
    pub prompt: Option<Value>,
    /// Most new tokens.
    pub max_tokens: Option<i64>,
    /// Chat: most new tokens (OpenAI's newer name).
    pub max_completion_tokens: Option<i64>,
    /// Temperature in [0, 2] (0: greedy).
    pub temperature: Option<f32>,
    /// Nucleus sampling in (0, 1].
    pub top_p: Option<f32>,
    /// lucent / llama-server: keep the k most likely tokens (0: off).
    pub top_k: Option<i64>,
    /// lucent / llama-server: min-p in [0, 1].
    pub min_p: Option<f32>,
    /// lucent / llama-server: repetition penalty (1: off).
    pub repeat_penalty: Option<f32>,
    /// lucent / llama-server: how many recent tokens the penalties see.
    pub repeat_last_n: Option<i64>,
    /// In [-2, 2].
    pub presence_penalty: Option<f32>,
    /// In [-2, 2].
    pub frequency_penalty: Option<f32>,
    /// The sampler's seed.
    pub seed: Option<i64>,
    /// Stop strings.
    pub stop: Option<Stop>,
    /// Choices per prompt.
    pub n: Option<i64>,
    /// Server-sent events.
    pub stream: Option<bool>,
    /// `include_usage`.
    pub stream_options: Option<StreamOptions>,
    /// Chat: `true` for log-probabilities; completions: how many alternatives.
    pub logprobs: Option<Value>,
    /// Chat: alternatives per token (0..=20).
    pub top_logprobs: Option<i64>,
    /// Completions: the prompt in front of the text.
    pub echo: Option<bool>,
    /// llama-server: keep going past end-of-generation tokens.
    pub ignore_eos: Option<bool>,
    /// Completions: text after the completion (refused).
    pub suffix: Option<String>,
    /// Completions: best of several (only 1).
    pub best_of: Option<i64>,
    /// Not supported (refused when set).
    pub logit_bias: Option<Value>,
    /// Chat: the functions the model may call (`[{"type": "function", "function":
    /// {"name", "description", "parameters", "strict"}}]`); see [`GenerateRequest::tool_plan`].
    pub tools: Option<Value>,
    /// Chat: `"auto"` (default with tools), `"none"`, `"required"` or `{"type":
    /// "function", "function": {"name": …}}`.
    pub tool_choice: Option<Value>,
    /// Chat: whether an answer may make several calls (default true).
    pub parallel_tool_calls: Option<bool>,
    /// OpenAI's deprecated function calling (refused when set; use `tools`).
    pub functions: Option<Value>,
    /// `text` (the default), `json_object` (any JSON object) or `json_schema` (a JSON
    /// document valid under `json_schema.schema`): structured outputs.
    pub response_format: Option<Value>,
    /// Seeing inside (lucent's extension).
    pub lucent: Option<InsideRequest>,
}

/// The body of `/v1/embeddings`.
#[derive(Clone, Debug, Deserialize)]
pub struct EmbeddingRequest {
    /// The model's name.
    pub model: Option<String>,
    /// A string or a list of strings.
    pub input: Value,
    /// `float` (default) or `base64` (little-endian f32).
    pub encoding_format: Option<String>,
    /// Only the model's own width.
    pub dimensions: Option<i64>,
}

/// The body of `/tokenize` (llama-server's shape).
#[derive(Clone, Debug, Deserialize)]
pub struct TokenizeRequest {
    /// The model (default: the first one served).
    pub model: Option<String>,
    /// The text.
    pub content: String,
    /// Add what the model puts around a text (BOS, `[CLS] … [SEP]`); default false.
    pub add_special: Option<bool>,
    /// Return `{"id", "piece"}` objects instead of ids.
    pub with_pieces: Option<bool>,
}

/// The body of `/detokenize`.
#[derive(Clone, Debug, Deserialize)]
pub struct DetokenizeRequest {
    /// The model (default: the first one served).
    pub model: Option<String>,
    /// Token ids.
    pub tokens: Vec<u32>,
}

/// A number field in `range`, or the error naming it.
fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    name: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<T, ApiError> {
    if v >= lo && v <= hi {
        Ok(v)
    } else {
        Err(ApiError::invalid_param(
            name,
            format!("{name} must be in [{lo}, {hi}], got {v}"),
        ))
    }
}

/// A fresh seed for a request that did not give one.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ COUNT.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}

impl GenerateRequest {
    /// Refuse the fields lucent does not honour, by name.
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        let set = |v: &Option<Value>| {
            v.as_ref()
                .is_some_and(|v| !v.is_null() && v != &Value::Object(Default::default()))
        };
        if set(&self.functions) {
            return Err(ApiError::invalid_param(
                "functions",
                "functions (deprecated by OpenAI) is not supported by lucent serve; use tools",
            ));
        }
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid_param(
                "suffix",
                "suffix is not supported by lucent serve",
            ));
        }
        if self.best_of.is_some_and(|b| b != 1) {
            return Err(ApiError::invalid_param(
                "best_of",
                "only best_of = 1 is supported by lucent serve",
            ));
        }
        Ok(())
    }

    /// Choices per prompt (1..=16).
    pub fn n(&self) -> Result<usize, ApiError> {
        Ok(in_range("n", self.n.unwrap_or(1), 1, 16)? as usize)
    }

    /// Whether to stream.
    pub fn streaming(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// Whether the stream ends with a usage chunk.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }

    /// Chat: how many alternatives per token (None: no log-probabilities).
    pub fn chat_logprobs(&self) -> Result<Option<usize>, ApiError> {
        let on = match &self.logprobs {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid_param(
                    "logprobs",
                    "logprobs must be true or false",
                ))
            }
        };
        let top = self
            .top_logprobs
            .map(|k| in_range("top_logprobs", k, 0, 20))
            .transpose()?;
        if top.is_some() && !on {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            ));
        }
        Ok(on.then(|| top.unwrap_or(0) as usize))
    }

    /// Completions: how many alternatives per token (None: no log-probabilities).
    pub fn completion_logprobs(&self) -> Result<Option<usize>, ApiError> {
        match &self.logprobs {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => {
                let k = n.as_i64().ok_or_else(|| {
                    ApiError::invalid_param("logprobs", "logprobs must be an integer in [0, 20]")
                })?;
                Ok(Some(in_range("logprobs", k, 0, 20)? as usize))
            }
            Some(_) => Err(ApiError::invalid_param(
                "logprobs",
                "logprobs must be an integer in [0, 20]",
            )),
        }
    }

    /// OpenAI's `logit_bias`: an object from token ids (as strings) to a bias in
    /// [-100, 100]. A key that is not a token id, or a bias that is not a number in
    /// range, is a 400 naming `logit_bias` (an id past the vocabulary is refused when the
    /// model samples: `Sampler::bias`).
    fn logit_bias(&self) -> Result<Vec<(u32, f32)>, ApiError> {
        let map = match &self.logit_bias {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(ApiError::invalid_param(
                    "logit_bias",
                    "logit_bias must be an object from token ids to numbers in [-100, 100]",
                ))
            }
        };
        let mut out = Vec::with_capacity(map.len());
        for (key, v) in map {
            let id: u32 = key.trim().parse().map_err(|_| {
                ApiError::invalid_param(
                    "logit_bias",
                    format!("logit_bias key {key:?} is not a token id (a whole number, as a string: \"50256\")"),
                )
            })?;
            let b = v
                .as_f64()
                .filter(|b| (-100.0..=100.0).contains(b))
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        "logit_bias",
                        format!("logit_bias[{key:?}] must be a number in [-100, 100], got {v}"),
                    )
                })?;
            out.push((id, b as f32));
        }
        Ok(out)
    }

    /// OpenAI's `response_format` as a constraint: `{"type": "text"}` (or none) is free
    /// text, `{"type": "json_object"}` any JSON object, `{"type": "json_schema",
    /// "json_schema": {"name", "schema", "strict"}}` a document valid under `schema`
    /// (always enforced, whatever `strict` says). Any other shape is a 400 naming
    /// `response_format` (a schema the grammar engine cannot use is refused when the
    /// request is planned, with the engine's words).
    pub fn constraint(&self) -> Result<Option<Constraint>, ApiError> {
        let bad = |m: String| Err(ApiError::invalid_param("response_format", m));
        let f = match &self.response_format {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(f)) => f,
            Some(_) => return bad("response_format must be an object with a \"type\"".into()),
        };
        match f.get("type").and_then(Value::as_str) {
            Some("text") => Ok(None),
            Some("json_object") => Ok(Some(Constraint::JsonObject)),
            Some("json_schema") => {
                let Some(js) = f.get("json_schema").and_then(Value::as_object) else {
                    return bad(
                        "response_format json_schema needs \"json_schema\": {\"name\": ..., \"schema\": {...}}"
                            .into(),
                    );
                };
                match js.get("schema") {
                    Some(schema @ (Value::Object(_) | Value::Bool(_))) => {
                        Ok(Some(Constraint::JsonSchema(schema.clone())))
                    }
                    _ => bad(
                        "response_format.json_schema.schema must be a JSON schema (an object)"
                            .into(),
                    ),
                }
            }
            other => bad(format!(
                "response_format type must be \"text\", \"json_object\" or \"json_schema\", got {}",
                other.map_or("none".to_string(), |t| format!("{t:?}"))
            )),
        }
    }

    /// The sampler settings, with at most `room` new tokens (what the slot's context
    /// leaves after the prompt) and `logprobs` alternatives; tool calls, if offered, in
    /// the Hermes form ([`GenerateRequest::sampling_in`]).
    pub fn sampling(&self, room: usize, logprobs: Option<usize>) -> Result<Sampling, ApiError> {
        self.sampling_in(room, logprobs, CallFormat::Hermes)
    }

    /// [`GenerateRequest::sampling`] for a model whose answers write tool calls in
    /// `format` (its chat template's, `TextModel::tool_call_format`): the tools'
    /// constraint is in that form.
    pub fn sampling_in(
        &self,
        room: usize,
        logprobs: Option<usize>,
        format: CallFormat,
    ) -> Result<Sampling, ApiError> {
        let max = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => Some(("max_completion_tokens", m)),
            (None, Some(m)) => Some(("max_tokens", m)),
            _ => None,
        };
        let max_tokens = match max {
            Some((name, m)) => (in_range(name, m, 0, i64::MAX)? as usize).min(room),
            None => room,
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > 16 {
            return Err(ApiError::invalid_param(
                "stop",
                format!("at most 16 stop strings, got {}", stop.len()),
            ));
        }
        let s = Sampling {
            temperature: in_range("temperature", self.temperature.unwrap_or(1.0), 0.0, 2.0)?,
            top_p: self.top_p.unwrap_or(1.0),
            top_k: in_range("top_k", self.top_k.unwrap_or(0), 0, i64::from(u32::MAX))? as usize,
            min_p: self.min_p.unwrap_or(0.0),
            repeat_penalty: self.repeat_penalty.unwrap_or(1.0),
            repeat_last_n: in_range(
                "repeat_last_n",
                self.repeat_last_n.unwrap_or(64),
                0,
                1 << 20,
            )? as usize,
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            seed: self.seed.map_or_else(fresh_seed, |s| s as u64),
            max_tokens,
            stop,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            logprobs,
            top_logits: 0,
            context_shift: false,
            special: false,
            logit_bias: self.logit_bias()?,
            constrain: match self.tool_plan()? {
                Some(plan) if plan.offered() => plan.in_format(format).constraint()?,
                _ => self.constraint()?,
            },
        };
        if !(s.top_p > 0.0 && s.top_p <= 1.0) {
            return Err(ApiError::invalid_param(
                "top_p",
                format!("top_p must be in (0, 1], got {}", s.top_p),
            ));
        }
        // The library's checks name the rest (min_p, repeat_penalty, the penalties).
        s.validate()
            .map_err(|e| ApiError::invalid(e.to_string().replace("--", "")))?;
        Ok(s)
    }

    /// Chat: the conversation as lucent's messages (content parts joined; `developer`
    /// is a system message).
    pub fn conversation(&self) -> Result<Vec<Message>, ApiError> {
        let msgs = self
            .messages
            .as_ref()
            .ok_or_else(|| ApiError::invalid_param("messages", "messages is required"))?;
        if msgs.is_empty() {
            return Err(ApiError::invalid_param(
                "messages",
                "messages must not be empty",
            ));
        }
        msgs.iter()
            .enumerate()
            .map(|(i, m)| {
                let role = match m.role.as_str() {
                    "system" | "developer" => "system",
                    "user" => "user",
                    "assistant" => "assistant",
                    "tool" => "tool",
                    other => {
                        return Err(ApiError::invalid_param(
                            &format!("messages[{i}].role"),
                            format!("role '{other}' is not supported; use system, developer, user, assistant or tool"),
                        ))
                    }
                };
                let content = match &m.content {
                    None => String::new(),
                    Some(Content::Text(t)) => t.clone(),
                    Some(Content::Parts(parts)) => {
                        let mut text = String::new();
                        for (j, p) in parts.iter().enumerate() {
                            match (p.kind.as_str(), &p.text) {
                                ("text", Some(t)) => text.push_str(t),
                                _ => {
                                    return Err(ApiError::invalid_param(
                                        &format!("messages[{i}].content[{j}]"),
                                        format!("content parts of type '{}' are not supported; send text", p.kind),
                                    ))
                                }
                            }
                        }
                        text
                    }
                };
                tool_message(i, m, role, &content)
            })
            .collect()
    }
}

// ------------------------------------------------------------------ tool calls

/// A chat request's tools, checked: what the prompt lists and the answer may call.
#[derive(Clone, Debug)]
pub struct ToolPlan {
    /// The tools given.
    pub tools: Vec<Tool>,
    /// `tool_choice`.
    pub choice: ToolChoice,
    /// `parallel_tool_calls`: one call or several.
    pub parallel: bool,
    /// The form the model writes calls in (its chat template's; Hermes, lucent's
    /// generic form, unless [`ToolPlan::in_format`] says otherwise).
    pub format: CallFormat,
}

impl ToolPlan {
    /// Whether the tools are offered at all (written into the prompt, and the answer
    /// read back as calls): every choice but `none`.
    pub fn offered(&self) -> bool {
        self.choice != ToolChoice::None
    }

    /// The plan for a model that writes calls in `format`.
    pub fn in_format(self, format: CallFormat) -> ToolPlan {
        ToolPlan { format, ..self }
    }

    /// The grammar that holds the answer to the calls allowed, in the plan's format
    /// (None for `none`).
    pub fn constraint(&self) -> Result<Option<Constraint>, ApiError> {
        tools::constraint_in(self.format, &self.tools, &self.choice, self.parallel)
            .map_err(|e| ApiError::invalid_param("tool_choice", e.to_string()))
    }
}

impl GenerateRequest {
    /// The request's `tools`, `tool_choice` and `parallel_tool_calls`, checked (None
    /// without tools). Errors name the field: `tools[1].function.name` for a tool
    /// without a good name, `tool_choice` for a choice that names no tool given or comes
    /// without tools, `response_format` when it is asked for beside tools the answer
    /// may call. (A `parameters` schema the grammar engine cannot use is refused when
    /// the request is planned, naming `tools[i].function.parameters`.)
    pub fn tool_plan(&self) -> Result<Option<ToolPlan>, ApiError> {
        let given = |v: &Option<Value>| v.as_ref().is_some_and(|v| !v.is_null());
        if !given(&self.tools) {
            if given(&self.tool_choice) {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    "tool_choice needs tools: give the functions in \"tools\"",
                ));
            }
            return Ok(None);
        }
        let tools = self.tool_list()?;
        let choice = self.tool_choice(&tools)?;
        if choice != ToolChoice::None && self.constraint()?.is_some() {
            return Err(ApiError::invalid_param(
                "response_format",
                "response_format cannot be combined with tools the answer may call; use tool_choice \"none\", or drop one of them",
            ));
        }
        Ok(Some(ToolPlan {
            tools,
            choice,
            parallel: self.parallel_tool_calls.unwrap_or(true),
            format: CallFormat::Hermes,
        }))
    }

    /// `tools` as lucent's tools; errors name `tools[i]…`.
    fn tool_list(&self) -> Result<Vec<Tool>, ApiError> {
        let list = match &self.tools {
            Some(Value::Array(a)) if !a.is_empty() => a,
            _ => {
                return Err(ApiError::invalid_param(
                    "tools",
                    "tools must be a non-empty list of {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}",
                ))
            }
        };
        let mut out: Vec<Tool> = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let bad = |field: &str, m: String| {
                let path = format!("tools[{i}]{field}");
                Err(ApiError::invalid_param(&path, format!("{path}: {m}")))
            };
            let Some(t) = t.as_object() else {
                return bad(
                    "",
                    "a tool must be an object {\"type\": \"function\", \"function\": {...}}".into(),
                );
            };
            match t.get("type") {
                None | Some(Value::Null) => {}
                Some(Value::String(k)) if k == "function" => {}
                Some(k) => {
                    return bad(
                        ".type",
                        format!("only \"function\" tools are supported, got {k}"),
                    )
                }
            }
            let Some(f) = t.get("function").and_then(Value::as_object) else {
                return bad(
                    ".function",
                    "a tool needs \"function\": {\"name\": ..., \"parameters\": {...}}".into(),
                );
            };
            let name = match f.get("name") {
                Some(Value::String(n)) => n,
                None | Some(Value::Null) => {
                    return bad(".function.name", "a tool needs a name".into())
                }
                Some(n) => {
                    return bad(
                        ".function.name",
                        format!("the name must be a string, got {n}"),
                    )
                }
            };
            if let Err(e) = tools::check_name(name) {
                return bad(".function.name", e.to_string());
            }
            if out.iter().any(|o| &o.name == name) {
                return bad(".function.name", format!("two tools are named {name:?}"));
            }
            let description = match f.get("description") {
                None | Some(Value::Null) => None,
                Some(Value::String(d)) => Some(d.as_str()),
                Some(d) => {
                    return bad(
                        ".function.description",
                        format!("must be a string, got {d}"),
                    )
                }
            };
            let parameters = match f.get("parameters") {
                None | Some(Value::Null) => None,
                Some(p @ Value::Object(_)) => Some(p.clone()),
                Some(p) => {
                    return bad(
                        ".function.parameters",
                        format!("must be a JSON schema (an object), got {p}"),
                    )
                }
            };
            match Tool::new(name, description, parameters) {
                Ok(t) => out.push(t),
                Err(e) => return bad(".function", e.to_string()),
            }
        }
        Ok(out)
    }

    /// `tool_choice` over `tools` (default `auto`).
    fn tool_choice(&self, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
        let bad = |m: String| Err(ApiError::invalid_param("tool_choice", m));
        match &self.tool_choice {
            None | Some(Value::Null) => Ok(ToolChoice::Auto),
            Some(Value::String(s)) => match s.as_str() {
                "auto" => Ok(ToolChoice::Auto),
                "none" => Ok(ToolChoice::None),
                "required" => Ok(ToolChoice::Required),
                other => bad(format!("tool_choice must be \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {other:?}")),
            },
            Some(Value::Object(o)) => {
                let name = o
                    .get("function")
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str);
                match name {
                    Some(n) if tools.iter().any(|t| t.name == n) => Ok(ToolChoice::Function(n.into())),
                    Some(n) => bad(format!(
                        "tool_choice names the function {n:?}, which is not one of the tools ({})",
                        tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                    )),
                    None => bad("tool_choice as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}".into()),
                }
            }
            Some(v) => bad(format!("tool_choice must be a string or an object, got {v}")),
        }
    }

    /// Completions: tools are chat's; refused by name.
    pub fn refuse_tools(&self) -> Result<(), ApiError> {
        for (name, set) in [
            ("tools", self.tools.as_ref().is_some_and(|v| !v.is_null())),
            (
                "tool_choice",
                self.tool_choice.as_ref().is_some_and(|v| !v.is_null()),
            ),
            ("parallel_tool_calls", self.parallel_tool_calls.is_some()),
        ] {
            if set {
                return Err(ApiError::invalid_param(
                    name,
                    format!("{name} applies to chat completions (/v1/chat/completions), not to completions"),
                ));
            }
        }
        Ok(())
    }
}

/// Message `i` (role `role` as lucent names it, text `content`) with an assistant's
/// calls or a tool's result kept as such (the chat template renders them, or they are
/// written in the generic form: [`lucent::pipeline::tools`]). Errors name
/// `messages[i]…`.
fn tool_message(i: usize, m: &ChatMessage, role: &str, content: &str) -> Result<Message, ApiError> {
    let calls = m.tool_calls.as_deref().unwrap_or_default();
    if !calls.is_empty() && role != "assistant" {
        return Err(ApiError::invalid_param(
            &format!("messages[{i}].tool_calls"),
            "only assistant messages carry tool_calls",
        ));
    }
    match role {
        "tool" => Ok(Message::tool_result(m.tool_call_id.as_deref(), content)),
        "assistant" if !calls.is_empty() => {
            let mut read = Vec::with_capacity(calls.len());
            for (j, c) in calls.iter().enumerate() {
                let path = |f: &str| format!("messages[{i}].tool_calls[{j}]{f}");
                if c.kind.as_deref().is_some_and(|k| k != "function") {
                    return Err(ApiError::invalid_param(
                        &path(".type"),
                        "only \"function\" calls are supported",
                    ));
                }
                tools::check_name(&c.function.name)
                    .map_err(|e| ApiError::invalid_param(&path(".function.name"), e.to_string()))?;
                let args: Value = serde_json::from_str(&c.function.arguments).map_err(|e| {
                    ApiError::invalid_param(
                        &path(".function.arguments"),
                        format!(
                            "{}: the arguments must be JSON text: {e}",
                            path(".function.arguments")
                        ),
                    )
                })?;
                read.push(ToolCall {
                    name: c.function.name.clone(),
                    arguments: args.to_string(),
                });
            }
            Ok(Message::with_calls(content, &read))
        }
        _ => Ok(Message::new(role, content)),
    }
}

/// A completions prompt: text to encode, or token ids.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// Text (special-token text parsed, as llama-server does).
    Text(String),
    /// Token ids as given.
    Ids(Vec<u32>),
}

/// The prompts of a completions request (`prompt` as a string, strings, ids or lists of
/// ids).
pub fn prompts(v: &Option<Value>) -> Result<Vec<Prompt>, ApiError> {
    let bad = || {
        ApiError::invalid_param(
            "prompt",
            "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids",
        )
    };
    let ids = |a: &[Value]| -> Option<Vec<u32>> {
        a.iter()
            .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    };
    let out = match v {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid_param("prompt", "prompt is required"))
        }
        Some(Value::String(s)) => vec![Prompt::Text(s.clone())],
        Some(Value::Array(a)) if a.is_empty() => return Err(bad()),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(|s| s.as_str().map(|s| Prompt::Text(s.to_string())))
            .collect(),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => {
            vec![Prompt::Ids(ids(a).ok_or_else(bad)?)]
        }
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_array()
                    .and_then(|a| ids(a))
                    .map(Prompt::Ids)
                    .ok_or_else(bad)
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    if out.len() > 16 {
        return Err(ApiError::invalid_param(
            "prompt",
            format!("at most 16 prompts per request, got {}", out.len()),
        ));
    }
    Ok(out)
}

/// The texts of an embeddings request.
pub fn embedding_inputs(v: &Value) -> Result<Vec<String>, ApiError> {
    let out: Vec<String> = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_string) => {
            a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(|x| x.is_number() || x.is_array()) => {
            return Err(ApiError::invalid_param(
                "input",
                "token ids as input are not supported (they would be another tokenizer's); send text",
            ))
        }
        _ => return Err(ApiError::invalid_param("input", "input must be a non-empty string or list of strings")),
    };
    if out.len() > 2048 {
        return Err(ApiError::invalid_param(
            "input",
            format!("at most 2048 inputs per request, got {}", out.len()),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_fields_are_named() {
        let e = parse::<GenerateRequest>(br#"{"model": "m", "temperature": "hot"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let e = parse::<GenerateRequest>(b"{not json").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        let r: GenerateRequest = parse(br#"{"temperature": 3}"#).unwrap();
        assert_eq!(
            r.sampling(10, None).unwrap_err().param.as_deref(),
            Some("temperature")
        );
    }

    #[test]
    fn sampling_follows_openai_defaults_and_caps_max_tokens() {
        let r: GenerateRequest =
            parse(br#"{"max_tokens": 500, "seed": 7, "stop": "END"}"#).unwrap();
        let s = r.sampling(100, Some(2)).unwrap();
        assert_eq!(
            (s.temperature, s.top_p, s.top_k, s.min_p),
            (1.0, 1.0, 0, 0.0)
        );
        assert_eq!(
            (s.max_tokens, s.seed, s.stop.clone(), s.logprobs),
            (100, 7, vec!["END".to_string()], Some(2))
        );
    }

    #[test]
    fn logit_bias_in_openai_shape_and_refusals_name_it() {
        let r: GenerateRequest = parse(br#"{"logit_bias": {"15": -100, " 7 ": 2.5}}"#).unwrap();
        let mut bias = r.sampling(10, None).unwrap().logit_bias;
        bias.sort_by_key(|b| b.0);
        assert_eq!(bias, [(7, 2.5), (15, -100.0)]);
        for bad in [
            r#"{"logit_bias": {"hello": 1}}"#,
            r#"{"logit_bias": {"-3": 1}}"#,
            r#"{"logit_bias": {"3": 101}}"#,
            r#"{"logit_bias": {"3": "x"}}"#,
            r#"{"logit_bias": [1, 2]}"#,
        ] {
            let r: GenerateRequest = parse(bad.as_bytes()).unwrap();
            let e = r.sampling(10, None).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("logit_bias"), "{bad}");
        }
    }

    #[test]
    fn response_format_in_openai_shapes_and_refusals_name_it() {
        let c = |body: &str| {
            let r: GenerateRequest = parse(body.as_bytes()).unwrap();
            r.sampling(10, None).map(|s| s.constrain)
        };
        assert_eq!(c(r#"{}"#).unwrap(), None);
        assert_eq!(c(r#"{"response_format": {"type": "text"}}"#).unwrap(), None);
        assert_eq!(
            c(r#"{"response_format": {"type": "json_object"}}"#).unwrap(),
            Some(Constraint::JsonObject)
        );
        let schema =
            serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let body = serde_json::json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "x", "schema": schema, "strict": true}}});
        assert_eq!(
            c(&body.to_string()).unwrap(),
            Some(Constraint::JsonSchema(schema))
        );
        for bad in [
            r#"{"response_format": {"type": "yaml"}}"#,
            r#"{"response_format": "json"}"#,
            r#"{"response_format": {"type": "json_schema"}}"#,
            r#"{"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}"#,
        ] {
            let e = c(bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("response_format"), "{bad}");
        }
    }

    #[test]
    fn prompts_in_every_shape() {
        let p = |v: Value| prompts(&Some(v));
        assert_eq!(
            p(serde_json::json!("hi")).unwrap(),
            vec![Prompt::Text("hi".into())]
        );
        assert_eq!(
            p(serde_json::json!([1, 2])).unwrap(),
            vec![Prompt::Ids(vec![1, 2])]
        );
        assert_eq!(p(serde_json::json!([[1], [2, 3]])).unwrap().len(), 2);
        assert!(p(serde_json::json!([1, "a"])).is_err());
        assert!(p(serde_json::json!({})).is_err());
    }
}
