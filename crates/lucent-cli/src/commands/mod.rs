//! The subcommands, one file each.

pub mod bench;
pub mod bench_embed;
pub mod embed;
pub mod fetch;
pub mod softmax;
