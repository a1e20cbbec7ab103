//! The model layer: [`ModelConfig`] (one checked description of any Transformer), the
//! generic `Transformer` built from it, families (config translation + weight-name
//! tables), loading and parameter counts.

pub mod build;
pub mod config;
pub mod decoder;
pub mod encoder;
pub mod encoder_decoder;
pub mod family;
pub mod hooks;

pub use config::{
    ExpertsConfig, FfnKind, ModelConfig, ModelKind, NormKind, NormPlacement, PositionKind,
};
pub use decoder::{DecoderModel, DecoderProducts};
pub use encoder::EncoderModel;
pub use encoder_decoder::{EncoderDecoderModel, Products};
pub use hooks::{hook_points, HookPoint, Intervention, InterventionOp, InterventionValue};
pub mod memory;
pub mod params;
pub mod presets;
pub mod shapes;

pub use memory::MemoryEstimate;
pub use params::ParamCount;
pub use presets::{preset, ConfigOverrides, PRESETS};
pub use shapes::{forward_shapes, ShapeStep};
