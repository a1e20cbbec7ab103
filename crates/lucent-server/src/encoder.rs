//! The worker of one encoder model (sentence embeddings): a thread of its own that
//! takes requests from a bounded queue, so embedding never runs on tokio's threads and
//! an overloaded encoder answers 429 instead of piling up work.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use lucent::Embedder;
use tokio::sync::oneshot;

use crate::error::ApiError;

/// What an embedding request gets back: one vector per text and the tokens read.
pub type Embedded = Result<(Vec<Vec<f32>>, usize), ApiError>;

struct Request {
    texts: Vec<String>,
    reply: oneshot::Sender<Embedded>,
}

/// An encoder's worker thread and its queue.
pub struct EncoderWorker {
    name: String,
    embedder: Arc<Embedder>,
    queue: SyncSender<Request>,
    depth: usize,
}

impl std::fmt::Debug for EncoderWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncoderWorker")
            .field("name", &self.name)
            .finish()
    }
}

impl EncoderWorker {
    /// Start the worker of `embedder` with room for `depth` waiting requests (besides
    /// the one it runs).
    pub fn start(
        name: &str,
        embedder: Arc<Embedder>,
        depth: usize,
    ) -> lucent::Result<EncoderWorker> {
        let (tx, rx) = sync_channel::<Request>(depth);
        let e = embedder.clone();
        std::thread::Builder::new()
            .name(format!("lucent-encoder-{name}"))
            .spawn(move || {
                // Ends when the last sender (the worker's owner) is gone.
                while let Ok(req) = rx.recv() {
                    if req.reply.is_closed() {
                        continue;
                    }
                    let _ = req.reply.send(embed(&e, &req.texts));
                }
            })
            .map_err(|e| {
                lucent::Error::Argument(format!("cannot start the encoder thread: {e}"))
            })?;
        Ok(EncoderWorker {
            name: name.to_string(),
            embedder,
            queue: tx,
            depth,
        })
    }

    /// The embedder.
    pub fn embedder(&self) -> &Arc<Embedder> {
        &self.embedder
    }

    /// Queue `texts`; the answer comes on the returned channel. 429 when the queue is
    /// full.
    pub fn submit(&self, texts: Vec<String>) -> Result<oneshot::Receiver<Embedded>, ApiError> {
        let (reply, rx) = oneshot::channel();
        match self.queue.try_send(Request { texts, reply }) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) => Err(ApiError::overloaded(&self.name, 1, self.depth, 1)),
            Err(TrySendError::Disconnected(_)) => {
                Err(ApiError::unavailable("the encoder has stopped"))
            }
        }
    }
}

/// Embed `texts` as `lucent embed` does; the number of tokens read.
fn embed(e: &Embedder, texts: &[String]) -> Embedded {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tokens: usize = e.encode(&refs)?.iter().map(|enc| enc.len()).sum();
    let vectors = e.embed(&refs)?;
    Ok((vectors, tokens))
}
