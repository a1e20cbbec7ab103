//! The subcommands, one file each.

pub mod fetch;
pub mod memory;
pub mod params;
pub mod shapes;
pub mod attention;
pub mod mask;
pub mod pe;
pub mod show;
pub mod softmax;
