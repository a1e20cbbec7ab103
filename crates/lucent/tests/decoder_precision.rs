//! A decoder opened in int8 (`OpenOptions::precision(Int8)`: every product of a pass
//! through weights widened once to int8 per output channel, activations quantised in
//! groups of `INT8_GROUP` inputs of their own row) keeps batch invariance, as issue 32 asks of the server's int8 mode: a batched
//! decode step gives each row its lone step's bits, and cached decoding equals the full
//! forward. (Its distance to exact is measured by `lucent bench precision -m smollm2`
//! and `examples/decoder_precision_probe.rs`; docs/precision.md has the figures.)

use std::sync::Arc;

use lucent::model::decoder::INT8_GROUP;
use lucent::model::DecoderProducts;
use lucent::nn::KvCache;
use lucent::pipeline::generate::TextModel;
use lucent::{OpenOptions, Precision};

fn text_model(name: &str, p: Precision) -> Arc<TextModel> {
    let m = OpenOptions::new().precision(p).open(name).unwrap();
    assert_eq!(m.precision(), p, "{name}");
    m.text_model().unwrap()
}

/// In int8, three sequences at different positions decoded as one batch get, row for
/// row, the bits of each one's lone step; and a prompt fed in pieces through the cache
/// gives the full forward's logits bit for bit (with every query row computed alike,
/// `Numerics::RowInvariant`, as decoders.rs checks exact).
fn int8_is_batch_invariant(name: &str) {
    let mut tm = (*text_model(name, Precision::Int8)).clone();
    // every product reads per-row weights with activations in groups of INT8_GROUP
    for g in DecoderProducts::ALL {
        tm.model.map_products(g, false, &mut |l| {
            let group = l.int8().map(|q| q.group());
            assert_eq!(
                group,
                Some(INT8_GROUP),
                "{name} {}: the int8 copy's group",
                g.name()
            );
        });
    }
    batch_invariant(name, &tm, "int8");
}

/// The same checks with one activation scale per row (`Linear::keep_int8`, the
/// decoders' int8 before groups, still a library choice).
fn int8_rows_are_batch_invariant(name: &str) {
    let mut tm = (*text_model(name, Precision::Exact)).clone();
    for g in DecoderProducts::ALL {
        tm.model.map_products(g, true, &mut |l| {
            l.forget_copies();
            assert!(l.keep_int8(), "{name}: a product without an int8 copy");
        });
    }
    assert_eq!(tm.model.precision(), Precision::Int8);
    batch_invariant(name, &tm, "int8 rows");
}

/// The same checks with every product through the blocks' own integers
/// (`Linear::keep_int8_blocks`, llama.cpp's activation integers, one f32 rescale per
/// block).
fn int8_blocks_are_batch_invariant(name: &str) {
    let mut tm = (*text_model(name, Precision::Exact)).clone();
    for g in DecoderProducts::ALL {
        tm.model.map_products(g, true, &mut |l| {
            l.forget_copies();
            assert!(
                l.keep_int8_blocks(),
                "{name}: a product without block integers"
            );
        });
    }
    assert_eq!(tm.model.precision(), Precision::Int8);
    batch_invariant(name, &tm, "int8 blocks");
}

/// A batched step equals each row's lone step, and cached decoding the full forward,
/// bit for bit, for `tm` (`what` names its arithmetic in failures).
fn batch_invariant(name: &str, tm: &TextModel, what: &str) {
    let m = &tm.model;
    let prompts = [
        "The capital of France is",
        "def fibonacci(n):",
        "Once upon a time",
    ];
    let ids: Vec<Vec<u32>> = prompts.iter().map(|p| tm.encode(p).unwrap()).collect();
    let fill = |ids: &[u32]| -> KvCache {
        let mut c = m.new_cache(64);
        m.forward(ids, Some(&mut c), true, None).unwrap();
        c
    };
    let next = [42u32, 1000, 7];
    let mut batch: Vec<KvCache> = ids.iter().map(|i| fill(i)).collect();
    let mut refs: Vec<&mut KvCache> = batch.iter_mut().collect();
    let together = m.decode_batch(&next, &mut refs, &mut []).unwrap(); // (3, V)
    let v = together.shape()[1];
    for (i, (p, &id)) in ids.iter().zip(&next).enumerate() {
        let mut c = fill(p);
        let alone = m.forward(&[id], Some(&mut c), true, None).unwrap(); // (1, V)
        let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(alone.data()),
            bits(&together.data()[i * v..(i + 1) * v]),
            "{name} {what}: row {i} of a batched step differs from its lone step"
        );
    }
    // As decoders.rs's cached-vs-full check: every query row computed alike.
    let m = &m.clone().with_numerics(lucent::Numerics::RowInvariant);
    let all = &ids[1];
    let full = m.forward(all, None, false, None).unwrap(); // (t, V)
    let mut c = m.new_cache(all.len());
    let mut rows = m
        .forward(&all[..3], Some(&mut c), false, None)
        .unwrap()
        .into_vec();
    for &id in &all[3..] {
        rows.extend(
            m.forward(&[id], Some(&mut c), true, None)
                .unwrap()
                .into_vec(),
        );
    }
    assert!(
        rows.iter()
            .zip(full.data())
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{name} {what}: cached decoding differs from the full forward"
    );
}

#[test]
fn smollm2_int8_is_batch_invariant() {
    int8_is_batch_invariant("smollm2");
}

#[test]
fn gemma3_int8_is_batch_invariant() {
    int8_is_batch_invariant("gemma3");
}

#[test]
fn smollm2_int8_blocks_are_batch_invariant() {
    int8_blocks_are_batch_invariant("smollm2");
}

#[test]
fn gemma3_int8_blocks_are_batch_invariant() {
    int8_blocks_are_batch_invariant("gemma3");
}

#[test]
fn smollm2_int8_rows_are_batch_invariant() {
    int8_rows_are_batch_invariant("smollm2");
}

#[test]
fn gemma3_int8_rows_are_batch_invariant() {
    int8_rows_are_batch_invariant("gemma3");
}
