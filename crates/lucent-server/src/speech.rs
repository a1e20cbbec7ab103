//! Speech models (Whisper) in the server: the worker that transcribes uploaded audio on
//! a thread of its own (bounded queue, 429 when full), the uploads kept as temporary
//! files that delete themselves, and OpenAI's transcription response formats
//! (`json`, `text`, `verbose_json`, `srt`, `vtt`) built from a [`Transcript`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::{Multipart, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use lucent::pipeline::transcribe::{
    sample_rate_note, Task, TranscribeOptions, Transcriber, Transcript,
};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::AppState;

/// Largest audio upload, in bytes (OpenAI's limit for `/v1/audio/*`).
pub const MAX_AUDIO_BYTES: usize = 25 << 20;

/// An uploaded audio file on disk, deleted when dropped.
#[derive(Debug)]
pub struct TempAudio {
    path: PathBuf,
}

impl TempAudio {
    /// A new, empty file in this server's temporary folder (`$TMPDIR/lucent-serve-PID`).
    pub fn create() -> Result<(TempAudio, std::fs::File), ApiError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!("lucent-serve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| {
            ApiError::internal(format!(
                "cannot make the upload folder {}: {e}",
                dir.display()
            ))
        })?;
        let path = dir.join(format!(
            "audio-{}.wav",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::File::create(&path).map_err(|e| {
            ApiError::internal(format!("cannot write the upload {}: {e}", path.display()))
        })?;
        Ok((TempAudio { path }, file))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempAudio {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a transcription request gets back.
pub type Transcribed = Result<Transcript, ApiError>;

struct Request {
    audio: Arc<TempAudio>,
    opts: TranscribeOptions,
    reply: oneshot::Sender<Transcribed>,
}

/// A speech model's worker thread and its queue.
pub struct SpeechWorker {
    name: String,
    transcriber: Arc<Transcriber>,
    queue: SyncSender<Request>,
    depth: usize,
}

impl std::fmt::Debug for SpeechWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpeechWorker")
            .field("name", &self.name)
            .finish()
    }
}

impl SpeechWorker {
    /// Start the worker of `transcriber` with room for `depth` waiting requests
    /// (besides the one it runs).
    pub fn start(
        name: &str,
        transcriber: Arc<Transcriber>,
        depth: usize,
    ) -> lucent::Result<SpeechWorker> {
        let (tx, rx) = sync_channel::<Request>(depth);
        let t = transcriber.clone();
        std::thread::Builder::new()
            .name(format!("lucent-speech-{name}"))
            .spawn(move || {
                // Ends when the last sender (the worker's owner) is gone.
                while let Ok(req) = rx.recv() {
                    if req.reply.is_closed() {
                        continue; // the client went away while it waited
                    }
                    // Errors name the upload as the client knows it, not its temporary path.
                    let shown = req.audio.path().display().to_string();
                    let r = t.transcribe(req.audio.path(), &req.opts).map_err(|e| {
                        let mut e = ApiError::from(e);
                        e.message = e.message.replace(&shown, "the uploaded file");
                        e
                    });
                    let _ = req.reply.send(r);
                }
            })
            .map_err(|e| lucent::Error::Argument(format!("cannot start the speech thread: {e}")))?;
        Ok(SpeechWorker {
            name: name.to_string(),
            transcriber,
            queue: tx,
            depth,
        })
    }

    /// The model.
    pub fn transcriber(&self) -> &Arc<Transcriber> {
        &self.transcriber
    }

    /// Queue `audio` for transcription; the answer comes on the returned channel. 429
    /// when the queue is full.
    pub fn submit(
        &self,
        audio: Arc<TempAudio>,
        opts: TranscribeOptions,
    ) -> Result<oneshot::Receiver<Transcribed>, ApiError> {
        let (reply, rx) = oneshot::channel();
        match self.queue.try_send(Request { audio, opts, reply }) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) => Err(ApiError::overloaded(&self.name, 1, self.depth, 5)),
            Err(TrySendError::Disconnected(_)) => {
                Err(ApiError::unavailable("the speech worker has stopped"))
            }
        }
    }
}

// ------------------------------------------------------------------ the routes

/// `POST /v1/audio/transcriptions`: a multipart form with the audio `file` (WAV),
/// transcribed in its language.
pub async fn transcriptions(State(st): State<Arc<AppState>>, form: Form) -> Response {
    answer(audio_route(st, form, Task::Transcribe).await)
}

/// `POST /v1/audio/translations`: a multipart form with the audio `file`, translated
/// into English (multilingual models).
pub async fn translations(State(st): State<Arc<AppState>>, form: Form) -> Response {
    answer(audio_route(st, form, Task::Translate).await)
}

type Form = Result<Multipart, MultipartRejection>;

fn answer(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

/// A multipart error: 413 past the body limit, 400 otherwise.
fn form_error(e: MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(MAX_AUDIO_BYTES)
    } else {
        ApiError::invalid(format!(
            "the multipart form could not be read: {}",
            e.body_text()
        ))
    }
}

async fn audio_route(st: Arc<AppState>, form: Form, task: Task) -> Result<Response, ApiError> {
    st.accepting()?;
    let mut form = form.map_err(|e| {
        ApiError::invalid(format!(
            "the body must be multipart/form-data with the audio in a field named file: {}",
            e.body_text()
        ))
    })?;
    let mut fields = AudioFields::default();
    let mut audio: Option<TempAudio> = None;
    while let Some(mut field) = form.next_field().await.map_err(form_error)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            let (tmp, mut file) = TempAudio::create()?;
            let mut n = 0usize;
            while let Some(chunk) = field.chunk().await.map_err(form_error)? {
                n += chunk.len();
                if n > MAX_AUDIO_BYTES {
                    return Err(ApiError::too_large(MAX_AUDIO_BYTES));
                }
                file.write_all(&chunk)
                    .map_err(|e| ApiError::internal(format!("cannot write the upload: {e}")))?;
            }
            if n == 0 {
                return Err(ApiError::invalid_param("file", "the file is empty"));
            }
            audio = Some(tmp);
        } else {
            let text = field.text().await.map_err(form_error)?;
            fields.set(&name, text)?;
        }
    }
    let audio = audio.ok_or_else(|| {
        ApiError::invalid_param(
            "file",
            "file is required: the audio (WAV) as a form field named file",
        )
    })?;
    let format = fields.format()?;
    let opts = fields.options(task, format)?;
    let words = opts.word_timestamps;
    let (_, worker) = st.speech(fields.model.as_deref())?;
    if task == Task::Translate && !worker.transcriber().is_multilingual() {
        return Err(ApiError::invalid_param(
            "model",
            "this model is English-only: it transcribes, it does not translate; use a multilingual model such as whisper-base",
        ));
    }
    let rx = worker.submit(Arc::new(audio), opts)?;
    let secs = st.opts.timeout_secs.max(0.0);
    let transcript = tokio::time::timeout(Duration::from_secs_f64(secs), rx)
        .await
        .map_err(|_| ApiError::timeout(secs))?
        .map_err(|_| ApiError::internal("the speech worker stopped before answering"))??;
    // Audio below 8 kHz is transcribed but likely wrong: say so in the server's log
    // (one line), as `verbose_json`'s notes say it to the caller.
    if let Some(note) = sample_rate_note(transcript.sample_rate) {
        eprintln!("lucent serve: {note}");
    }
    let (kind, body) = render(&transcript, task, format, words);
    Ok(([(header::CONTENT_TYPE, kind)], body).into_response())
}

// ------------------------------------------------------------------ request fields

/// The form fields of `/v1/audio/transcriptions` and `/v1/audio/translations` besides
/// the file, as read from the multipart body.
#[derive(Clone, Debug, Default)]
pub struct AudioFields {
    /// `model`: which served model (None: the first speech model).
    pub model: Option<String>,
    /// `language` (ISO-639-1), transcriptions only.
    pub language: Option<String>,
    /// `prompt`: not supported (refused when not empty).
    pub prompt: Option<String>,
    /// `response_format`.
    pub response_format: Option<String>,
    /// `temperature`.
    pub temperature: Option<String>,
    /// `timestamp_granularities[]` (each value).
    pub granularities: Vec<String>,
    /// `stream`.
    pub stream: Option<String>,
    /// lucent's own: `beam_size`.
    pub beam_size: Option<String>,
}

/// The response formats OpenAI's audio routes know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `{"text", "usage"}`.
    Json,
    /// The text alone.
    Text,
    /// Language, duration, text, segments (and words).
    VerboseJson,
    /// SubRip subtitles.
    Srt,
    /// WebVTT subtitles.
    Vtt,
}

impl AudioFields {
    /// Add one form field (`name`, its text); unknown fields are refused by name.
    pub fn set(&mut self, name: &str, value: String) -> Result<(), ApiError> {
        match name {
            "model" => self.model = Some(value),
            "language" => self.language = Some(value),
            "prompt" => self.prompt = Some(value),
            "response_format" => self.response_format = Some(value),
            "temperature" => self.temperature = Some(value),
            "timestamp_granularities[]" | "timestamp_granularities" => {
                self.granularities.push(value)
            }
            "stream" => self.stream = Some(value),
            "beam_size" => self.beam_size = Some(value),
            other => {
                return Err(ApiError::invalid_param(
                    other,
                    format!(
                        "unknown field '{other}'; the audio routes read file, model, language, prompt, \
                         response_format, temperature, timestamp_granularities[] (and lucent's beam_size)"
                    ),
                ))
            }
        }
        Ok(())
    }

    /// The response format asked for (default `json`).
    pub fn format(&self) -> Result<Format, ApiError> {
        Ok(match self.response_format.as_deref().map(str::trim) {
            None | Some("") | Some("json") => Format::Json,
            Some("text") => Format::Text,
            Some("verbose_json") => Format::VerboseJson,
            Some("srt") => Format::Srt,
            Some("vtt") => Format::Vtt,
            Some(other) => {
                return Err(ApiError::invalid_param(
                    "response_format",
                    format!(
                    "response_format must be json, text, verbose_json, srt or vtt, got '{other}'"
                ),
                ))
            }
        })
    }

    /// The decoding options these fields ask for, for `task`.
    pub fn options(&self, task: Task, format: Format) -> Result<TranscribeOptions, ApiError> {
        if self.prompt.as_deref().is_some_and(|p| !p.trim().is_empty()) {
            return Err(ApiError::invalid_param(
                "prompt",
                "prompt (text that conditions the decoding) is not supported by lucent; leave it out",
            ));
        }
        if let Some(s) = &self.stream {
            if s.trim() == "true" {
                return Err(ApiError::invalid_param(
                    "stream",
                    "streamed transcriptions are not supported; leave stream out or false",
                ));
            }
        }
        let mut opts = TranscribeOptions::default();
        if task == Task::Translate && self.language.is_some() {
            return Err(ApiError::invalid_param(
                "language",
                "translations read the spoken language by themselves; language belongs to /v1/audio/transcriptions",
            ));
        }
        opts.task = task;
        opts.language = self
            .language
            .as_ref()
            .map(|l| l.trim().to_lowercase())
            .filter(|l| !l.is_empty());
        if let Some(t) = &self.temperature {
            let t: f32 = t.trim().parse().map_err(|_| {
                ApiError::invalid_param(
                    "temperature",
                    format!("temperature must be a number, got '{t}'"),
                )
            })?;
            if !(0.0..=1.0).contains(&t) {
                return Err(ApiError::invalid_param(
                    "temperature",
                    format!("temperature must be in [0, 1], got {t}"),
                ));
            }
            // OpenAI's meaning: 0 raises the temperature by itself when a window's
            // decoding fails the thresholds; another value is the one temperature used.
            if t > 0.0 {
                opts.temperatures = vec![t];
            }
        }
        if let Some(b) = &self.beam_size {
            let b: usize = b.trim().parse().map_err(|_| {
                ApiError::invalid_param(
                    "beam_size",
                    format!("beam_size must be a whole number, got '{b}'"),
                )
            })?;
            if !(1..=16).contains(&b) {
                return Err(ApiError::invalid_param(
                    "beam_size",
                    format!("beam_size must be in 1..=16 (1: greedy), got {b}"),
                ));
            }
            opts.beam_size = b;
        }
        for g in &self.granularities {
            match g.trim() {
                "segment" => {}
                "word" => {
                    if format != Format::VerboseJson {
                        return Err(ApiError::invalid_param(
                            "timestamp_granularities[]",
                            "word timestamps come with response_format verbose_json",
                        ));
                    }
                    opts.word_timestamps = true;
                }
                other => {
                    return Err(ApiError::invalid_param(
                        "timestamp_granularities[]",
                        format!("timestamp_granularities[] takes word or segment, got '{other}'"),
                    ))
                }
            }
        }
        Ok(opts)
    }
}

// ------------------------------------------------------------------ responses

/// The body of a transcription answer in `format`: (content type, body).
pub fn render(t: &Transcript, task: Task, format: Format, words: bool) -> (&'static str, String) {
    let text = t.text.trim().to_string();
    match format {
        Format::Json => (
            "application/json",
            json!({"text": text, "usage": {"type": "duration", "seconds": t.duration.ceil() as u64}})
                .to_string(),
        ),
        Format::Text => ("text/plain; charset=utf-8", format!("{text}\n")),
        Format::VerboseJson => ("application/json", verbose(t, task, words).to_string()),
        Format::Srt => ("application/x-subrip; charset=utf-8", srt(t)),
        Format::Vtt => ("text/vtt; charset=utf-8", vtt(t)),
    }
}

/// OpenAI's `verbose_json`: task, language (its English name), duration, text,
/// segments, and with word timestamps the words; and lucent's `notes` when there are
/// any (windows skipped as silence, audio sampled below 8 kHz).
fn verbose(t: &Transcript, task: Task, words: bool) -> Value {
    let code = t.language.as_deref().unwrap_or("en");
    let segments: Vec<Value> = t
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({
                "id": i,
                "seek": (s.start * 100.0).round() as i64,
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": s.tokens,
                "temperature": s.temperature,
                "avg_logprob": s.avg_logprob,
                "compression_ratio": s.compression_ratio,
                "no_speech_prob": s.no_speech_prob,
            })
        })
        .collect();
    let mut v = json!({
        "task": match task { Task::Transcribe => "transcribe", Task::Translate => "translate" },
        "language": language_name(code).unwrap_or(code),
        "duration": t.duration,
        "text": t.text.trim(),
        "segments": segments,
    });
    if words {
        let list: Vec<Value> = t
            .segments
            .iter()
            .flat_map(|s| s.words.iter().flatten())
            .map(|w| json!({"word": w.word.trim(), "start": w.start, "end": w.end}))
            .collect();
        v["words"] = Value::Array(list);
    }
    if !t.notes.is_empty() {
        v["notes"] = json!(t.notes);
    }
    v
}

/// `hh:mm:ss{sep}mmm`.
fn clock(secs: f64, sep: char) -> String {
    let ms = (secs.max(0.0) * 1000.0).round() as u64;
    format!(
        "{:02}:{:02}:{:02}{sep}{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// SubRip: numbered cues `start --> end` with the segment's text.
fn srt(t: &Transcript) -> String {
    cues(t, String::new(), ',', true)
}

/// WebVTT: the header, then one cue per segment.
fn vtt(t: &Transcript) -> String {
    cues(t, String::from("WEBVTT\n\n"), '.', false)
}

/// `head`, then one cue per segment: (its number,) `start --> end` with `sep` before the
/// milliseconds, its text, a blank line.
fn cues(t: &Transcript, head: String, sep: char, numbered: bool) -> String {
    let mut out = head;
    for (i, s) in t.segments.iter().enumerate() {
        if numbered {
            out.push_str(&format!("{}\n", i + 1));
        }
        out.push_str(&format!(
            "{} --> {}\n{}\n\n",
            clock(s.start, sep),
            clock(s.end, sep),
            s.text.trim()
        ));
    }
    out
}

/// The English name of a Whisper language code, as OpenAI's `verbose_json` gives it.
pub fn language_name(code: &str) -> Option<&'static str> {
    LANGUAGES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

/// Whisper's languages: ISO code and English name.
const LANGUAGES: &[(&str, &str)] = &[
    ("en", "english"),
    ("zh", "chinese"),
    ("de", "german"),
    ("es", "spanish"),
    ("ru", "russian"),
    ("ko", "korean"),
    ("fr", "french"),
    ("ja", "japanese"),
    ("pt", "portuguese"),
    ("tr", "turkish"),
    ("pl", "polish"),
    ("ca", "catalan"),
    ("nl", "dutch"),
    ("ar", "arabic"),
    ("sv", "swedish"),
    ("it", "italian"),
    ("id", "indonesian"),
    ("hi", "hindi"),
    ("fi", "finnish"),
    ("vi", "vietnamese"),
    ("he", "hebrew"),
    ("uk", "ukrainian"),
    ("el", "greek"),
    ("ms", "malay"),
    ("cs", "czech"),
    ("ro", "romanian"),
    ("da", "danish"),
    ("hu", "hungarian"),
    ("ta", "tamil"),
    ("no", "norwegian"),
    ("th", "thai"),
    ("ur", "urdu"),
    ("hr", "croatian"),
    ("bg", "bulgarian"),
    ("lt", "lithuanian"),
    ("la", "latin"),
    ("mi", "maori"),
    ("ml", "malayalam"),
    ("cy", "welsh"),
    ("sk", "slovak"),
    ("te", "telugu"),
    ("fa", "persian"),
    ("lv", "latvian"),
    ("bn", "bengali"),
    ("sr", "serbian"),
    ("az", "azerbaijani"),
    ("sl", "slovenian"),
    ("kn", "kannada"),
    ("et", "estonian"),
    ("mk", "macedonian"),
    ("br", "breton"),
    ("eu", "basque"),
    ("is", "icelandic"),
    ("hy", "armenian"),
    ("ne", "nepali"),
    ("mn", "mongolian"),
    ("bs", "bosnian"),
    ("kk", "kazakh"),
    ("sq", "albanian"),
    ("sw", "swahili"),
    ("gl", "galician"),
    ("mr", "marathi"),
    ("pa", "punjabi"),
    ("si", "sinhala"),
    ("km", "khmer"),
    ("sn", "shona"),
    ("yo", "yoruba"),
    ("so", "somali"),
    ("af", "afrikaans"),
    ("oc", "occitan"),
    ("ka", "georgian"),
    ("be", "belarusian"),
    ("tg", "tajik"),
    ("sd", "sindhi"),
    ("gu", "gujarati"),
    ("am", "amharic"),
    ("yi", "yiddish"),
    ("lo", "lao"),
    ("uz", "uzbek"),
    ("fo", "faroese"),
    ("ht", "haitian creole"),
    ("ps", "pashto"),
    ("tk", "turkmen"),
    ("nn", "nynorsk"),
    ("mt", "maltese"),
    ("sa", "sanskrit"),
    ("lb", "luxembourgish"),
    ("my", "myanmar"),
    ("bo", "tibetan"),
    ("tl", "tagalog"),
    ("mg", "malagasy"),
    ("as", "assamese"),
    ("tt", "tatar"),
    ("haw", "hawaiian"),
    ("ln", "lingala"),
    ("ha", "hausa"),
    ("ba", "bashkir"),
    ("jw", "javanese"),
    ("su", "sundanese"),
    ("yue", "cantonese"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use lucent::pipeline::transcribe::Segment;

    fn transcript() -> Transcript {
        let seg = |start: f64, end: f64, text: &str| Segment {
            start,
            end,
            text: text.into(),
            tokens: vec![1, 2],
            avg_logprob: -0.2,
            no_speech_prob: 0.01,
            temperature: 0.0,
            compression_ratio: 1.1,
            words: None,
        };
        Transcript {
            language: Some("de".into()),
            text: " Hallo Welt. Wie geht es?".into(),
            segments: vec![
                seg(0.0, 1.5, " Hallo Welt."),
                seg(1.5, 3723.25, " Wie geht es?"),
            ],
            duration: 3723.4,
            sample_rate: 16_000,
            silent: Vec::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn subtitles_have_their_formats_clock() {
        let t = transcript();
        assert_eq!(
            srt(&t),
            "1\n00:00:00,000 --> 00:00:01,500\nHallo Welt.\n\n2\n00:00:01,500 --> 01:02:03,250\nWie geht es?\n\n"
        );
        assert!(vtt(&t).starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHallo Welt.\n"));
        let v = verbose(&t, Task::Transcribe, false);
        assert_eq!(v["language"], "german");
        assert_eq!(v["segments"][1]["id"], 1);
        assert_eq!(v["text"], "Hallo Welt. Wie geht es?");
        assert!(v.get("words").is_none());
        assert!(v.get("notes").is_none());
        let mut quiet = t.clone();
        quiet.notes.push("0.00–5.00 s: no speech".into());
        assert_eq!(
            verbose(&quiet, Task::Transcribe, false)["notes"][0],
            "0.00–5.00 s: no speech"
        );
    }

    #[test]
    fn fields_are_checked_by_name() {
        let mut f = AudioFields::default();
        assert!(f
            .set("voice", "x".into())
            .unwrap_err()
            .message
            .contains("voice"));
        f.set("temperature", "3".into()).unwrap();
        let e = f.options(Task::Transcribe, Format::Json).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let mut f = AudioFields::default();
        f.set("timestamp_granularities[]", "word".into()).unwrap();
        assert!(f.options(Task::Transcribe, Format::Json).is_err());
        let o = f.options(Task::Transcribe, Format::VerboseJson).unwrap();
        assert!(o.word_timestamps);
        f.set("temperature", "0.4".into()).unwrap();
        let o = f.options(Task::Transcribe, Format::VerboseJson).unwrap();
        assert_eq!(o.temperatures, vec![0.4]);
        f.set("prompt", "Names: Ishmael".into()).unwrap();
        let e = f
            .options(Task::Transcribe, Format::VerboseJson)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt"));
    }
}
