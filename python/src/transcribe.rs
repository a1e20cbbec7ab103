//! `Transcriber`: speech to text with a Whisper model ([`lucent::pipeline::transcribe`]),
//! the transcript handed to Python as lucent's own JSON (`lucent transcribe --json`'s
//! fields), which `lucent.Whisper` reshapes into openai-whisper's result dict.

use std::path::PathBuf;
use std::sync::Arc;

use lucent::pipeline::transcribe::{Task, TranscribeOptions};
use pyo3::prelude::*;

use crate::{OrPy, Threads};

/// A Whisper model ready to transcribe WAV files, loaded once; `transcribe` releases
/// the GIL, so Python threads transcribe in parallel.
#[pyclass(module = "lucent._lucent", frozen)]
pub struct Transcriber {
    inner: Arc<lucent::pipeline::transcribe::Transcriber>,
    name: String,
    threads: Threads,
}

#[pymethods]
impl Transcriber {
    /// Open a Whisper model by name (`whisper-tiny.en`, `whisper-base`: fetched into the
    /// cache on first use) or a CTranslate2 Whisper folder. `n_threads`: a runtime of
    /// that many kernel threads for this model alone (None: lucent's default).
    /// `precision`: how its products are computed (`exact`, `bf16` or `int8`;
    /// [`lucent::Precision`], docs/precision.md).
    #[new]
    #[pyo3(signature = (name_or_path, n_threads = None, precision = None))]
    fn new(
        py: Python<'_>,
        name_or_path: String,
        n_threads: Option<usize>,
        precision: Option<String>,
    ) -> PyResult<Self> {
        let threads = Threads::new(n_threads)?;
        let precision: lucent::Precision =
            precision.as_deref().unwrap_or("exact").parse().or_py()?;
        let (inner, name) = py
            .detach(|| -> lucent::Result<_> {
                let model = lucent::OpenOptions::new()
                    .precision(precision)
                    .open(&name_or_path)?;
                Ok((model.transcriber()?, model.name().to_string()))
            })
            .or_py()?;
        Ok(Transcriber {
            inner,
            name,
            threads,
        })
    }

    /// The kernel threads this model's calls use.
    #[getter]
    fn n_threads(&self) -> usize {
        self.threads.count()
    }

    /// How its products are computed: `exact`, `bf16` or `int8`.
    #[getter]
    fn precision(&self) -> &'static str {
        self.inner.precision().name()
    }

    /// The model's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// Whether the model is multilingual (language and task tokens, language detection).
    #[getter]
    fn is_multilingual(&self) -> bool {
        self.inner.is_multilingual()
    }

    /// Mel bins of the model's front-end (80 or 128).
    #[getter]
    fn n_mels(&self) -> usize {
        self.inner.n_mels
    }

    /// Transcribe the WAV file at `path`: lucent's transcript as JSON (`language`,
    /// `text`, `duration`, `segments` with `start`, `end`, `text`, `tokens`,
    /// `avg_logprob`, `no_speech_prob`, `temperature`, `compression_ratio`).
    ///
    /// `temperatures`: tried in turn while a window fails the thresholds (a window
    /// decoded at 0 uses `beam_size` beams); a threshold of None turns its test off.
    /// `word_timestamps`: each segment gets `words` (`word`, `start`, `end`,
    /// `probability`), as `lucent transcribe --words`.
    #[pyo3(signature = (
        path, *, language = None, task = "transcribe", timestamps = true, beam_size = 1,
        temperatures = vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0], compression_ratio_threshold = Some(2.4),
        logprob_threshold = Some(-1.0), no_speech_threshold = Some(0.6), seed = 0,
        word_timestamps = false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn transcribe_json(
        &self,
        py: Python<'_>,
        path: PathBuf,
        language: Option<String>,
        task: &str,
        timestamps: bool,
        beam_size: usize,
        temperatures: Vec<f32>,
        compression_ratio_threshold: Option<f32>,
        logprob_threshold: Option<f32>,
        no_speech_threshold: Option<f32>,
        seed: u64,
        word_timestamps: bool,
    ) -> PyResult<String> {
        let task = match task {
            "transcribe" => Task::Transcribe,
            "translate" => Task::Translate,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "task must be \"transcribe\" or \"translate\", not {other:?}"
                )))
            }
        };
        if beam_size == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "beam_size must be at least 1 (1: greedy)",
            ));
        }
        if temperatures.is_empty() || temperatures.iter().any(|t| !t.is_finite() || *t < 0.0) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "temperature must be one or more finite values >= 0, not {temperatures:?}"
            )));
        }
        let opts = TranscribeOptions {
            language,
            task,
            timestamps,
            beam_size,
            temperatures,
            compression_ratio_threshold,
            logprob_threshold,
            no_speech_threshold,
            seed,
            word_timestamps,
        };
        let inner = self.inner.clone();
        let threads = self.threads.clone();
        py.detach(move || {
            threads.run(move || -> lucent::Result<String> {
                let t = inner.transcribe(&path, &opts)?;
                serde_json::to_string(&t).map_err(|e| {
                    lucent::Error::Argument(format!("the transcript did not serialise: {e}"))
                })
            })
        })
        .or_py()
    }
}
