//! Shared by the GGUF bench tests (`gguf_families`, `gguf_quants`, `gguf_moe`: included
//! with `#[path]`): one reference case of llama.cpp's numbers, the greedy loop that
//! `generate` runs at temperature 0, and a runtime of n threads.

#![allow(dead_code)]

use lucent::model::DecoderModel;
use lucent::pipeline::generate::argmax;
use lucent::Runtime;
use serde::Deserialize;
use std::collections::BTreeMap;

/// One prompt of a bench file with llama.cpp's numbers for it.
#[derive(Deserialize)]
pub struct Case {
    pub prompt_ids: Vec<u32>,
    /// Thread count → the logits after the prompt, as f32 bit patterns.
    pub logits_bits: BTreeMap<String, Vec<u32>>,
    pub greedy_ids: Vec<u32>,
}

/// The logits after the prompt and the greedy tokens that follow, as `generate` runs
/// them at temperature 0 (without its stop at EOS).
pub fn greedy(model: &DecoderModel, prompt: &[u32], n: usize) -> (Vec<f32>, Vec<u32>) {
    let mut cache = model.new_cache(prompt.len() + n);
    let first = model
        .forward(prompt, Some(&mut cache), true, None)
        .expect("prompt")
        .into_vec();
    let mut row = first.clone();
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let id = argmax(&row);
        ids.push(id);
        row = model
            .forward(&[id], Some(&mut cache), true, None)
            .expect("decode step")
            .into_vec();
    }
    (first, ids)
}

/// `f` run on a runtime of `threads` kernel threads.
pub fn on_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    Runtime::builder()
        .threads(threads)
        .build()
        .expect("runtime")
        .install(f)
}
