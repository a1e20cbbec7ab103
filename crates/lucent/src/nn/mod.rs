//! The guides' building blocks, one concept per file.
//!
//! | file | holds |
//! | --- | --- |
//! | `mask` | `causal_mask`, `padding_mask`, `prefix_lm_mask`, bidirectional; boolean ↔ additive masks |
//! | `position` | `SinusoidalEncoding`, `LearnedPositions`, `Rope`, `Alibi` |

pub mod mask;
pub mod position;
