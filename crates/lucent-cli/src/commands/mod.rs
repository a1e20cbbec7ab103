//! The subcommands, one file each.

pub mod fetch;
pub mod softmax;
