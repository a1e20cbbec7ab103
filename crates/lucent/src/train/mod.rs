//! Training from scratch: a character- or BPE-level GPT on a text corpus, or the guides'
//! encoder-decoder on a synthetic task.
//!
//! The loop, per step t:
//!
//! ```text
//! batch   ← b random windows (LM) or b fresh examples (seq2seq), from an RNG seeded by (seed, t)
//! L       ← mean cross-entropy of the next tokens (the model's forward, recorded by autograd)
//! ∇       ← L.backward();  clip ∇ to global norm ≤ clip
//! lr_t    ← linear warm-up, then cosine decay;  AdamW step (weight decay on matrices only)
//! every N steps: validation loss (and perplexity e^L, or exact match), checkpoint
//! ```
//!
//! Because each step's batch depends only on (seed, t), a checkpoint holding the
//! weights, the AdamW moments and t resumes to exactly the losses of an uninterrupted
//! run. A loss that is not finite stops the run with an error naming the step.
//!
//! The output folder holds `model.safetensors` (checkpoint), the tokenizer
//! (`vocab.json` or `tokenizer.json`), `history.json` (every step's metrics) and, at the
//! end, `loss.png`.
//!
//! The rooms: the parameter visitor ([`params`]: every trainable tensor by name, for
//! models and their blocks alike), the optimisers, schedule and clipping ([`optim`]), the
//! networks a run trains ([`models`]), corpora, tokenizers and synthetic tasks
//! ([`data`]), checkpoints ([`checkpoint`]), the loop itself ([`trainer`]), a finished
//! run loaded back ([`run`]) and its loss curve ([`plot`]). Gradients themselves are
//! recorded by the tensor's tape ([`crate::autograd`]).

pub mod checkpoint;
pub mod data;
pub mod models;
pub mod optim;
pub mod params;
#[cfg(feature = "viz")]
pub mod plot;
pub mod run;
pub mod trainer;

pub use params::{Parameters, ParamsMut};
pub use run::TrainedModel;
pub use trainer::*;
