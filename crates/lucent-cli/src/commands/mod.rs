//! The subcommands, one file each.

pub mod attention;
pub mod attention_decoder;
pub mod attention_model;
pub mod attention_seq2seq;
pub mod attention_view;
pub mod bench;
pub mod bench_embed;
pub mod bench_generate;
pub mod bench_train;
pub mod bench_transcribe;
pub mod embed;
pub mod explore;
pub mod export;
pub mod fetch;
pub mod generate;
pub mod intervene;
pub mod mask;
pub mod memory;
pub mod numbers;
pub mod params;
pub mod pe;
pub mod serve;
pub mod shapes;
pub mod softmax;
pub mod train;
pub mod transcribe;
