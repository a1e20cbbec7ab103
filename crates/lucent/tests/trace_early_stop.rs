//! `Trace::stop_when_done`: a pass that stops after the last layer its filter keeps
//! records exactly what the whole pass records for those layers (the explorer asks for
//! one layer's weights this way), for an encoder (MiniLM), a GGUF decoder (SmolLM2,
//! with the head at the last position only, as generation runs it) and a trained GPT.

use std::path::Path;

use lucent::Trace;

const TEXT: &str = "The cat sat on the mat because it was tired";

fn same(full: &Trace, early: &Trace, name: &str) {
    let a = full
        .get(name)
        .unwrap_or_else(|| panic!("full pass: no {name}"));
    let b = early
        .get(name)
        .unwrap_or_else(|| panic!("early pass: no {name}"));
    assert_eq!(a.shape(), b.shape(), "{name}");
    assert_eq!(a.data(), b.data(), "{name}: the early pass differs");
}

#[test]
fn an_early_stop_records_what_the_whole_pass_records() {
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/runs/tiny-bpe");
    for (spec, stack, layer) in [
        ("minilm", "encoder", 2),
        ("smollm2", "decoder", 3),
        (run.to_str().unwrap(), "decoder", 0),
    ] {
        let model = lucent::open(spec).unwrap();
        let full = model
            .trace_with(TEXT, Trace::only(&["weights", "output"]))
            .unwrap();
        let early = model
            .trace_with(
                TEXT,
                Trace::only(&["weights", "output"])
                    .in_layers(&[layer])
                    .stop_when_done(),
            )
            .unwrap();
        for leaf in ["attn.weights", "output"] {
            same(&full, &early, &format!("{stack}.layer.{layer}.{leaf}"));
        }
        let after = format!("{stack}.layer.{}.attn.weights", layer + 1);
        assert!(
            early.get(&after).is_none(),
            "{spec}: the early pass ran on to {after}"
        );
    }
    // A decoder's generation-style pass (the head at the last position only).
    let tm = lucent::open("smollm2").unwrap().text_model().unwrap();
    let ids = tm.encode(TEXT).unwrap();
    let mut full = Trace::only(&["weights"]);
    tm.model.forward(&ids, None, true, Some(&mut full)).unwrap();
    let mut early = Trace::only(&["weights"]).in_layers(&[5]).stop_when_done();
    let logits = tm
        .model
        .forward(&ids, None, true, Some(&mut early))
        .unwrap();
    assert_eq!(logits.shape()[0], 1, "one position's logits, as asked");
    same(&full, &early, "decoder.layer.5.attn.weights");
}
