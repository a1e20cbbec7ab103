//! The subcommands, one file each.

pub mod softmax;
