//! The model layer: [`ModelConfig`] (one checked description of any Transformer), the
//! generic `Transformer` built from it, families (config translation + weight-name
//! tables), loading and parameter counts.

pub mod config;
pub mod encoder;
pub mod family;

pub use config::{FfnKind, ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind};
pub use encoder::EncoderModel;
