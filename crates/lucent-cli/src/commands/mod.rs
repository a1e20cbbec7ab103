//! The subcommands, one file each.

pub mod bench;
pub mod softmax;
