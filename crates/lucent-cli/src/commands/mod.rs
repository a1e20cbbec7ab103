//! The subcommands, one file each.

pub mod attention;
pub mod mask;
pub mod pe;
pub mod show;
pub mod softmax;
