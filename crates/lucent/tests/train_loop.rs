//! The training loop: exact resume, sampling from a saved run, and clear errors for bad
//! input (empty or missing corpus, block larger than the corpus, a NaN loss, an
//! unreadable checkpoint). Tiny models, so the whole file runs in seconds.

use std::path::PathBuf;

use lucent::io::fetch::Silent;
use lucent::train::{resume, train, Limits, Quiet, TrainConfig, TrainedModel};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lucent-train-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn corpus(dir: &std::path::Path) -> String {
    let text = "the whale swam in the sea and the ship sailed after the whale. ".repeat(60);
    let path = dir.join("corpus.txt");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn tiny(corpus: &str) -> TrainConfig {
    TrainConfig {
        layers: 1,
        d_model: 16,
        heads: 2,
        block: 16,
        batch: 4,
        steps: 6,
        eval_every: 3,
        eval_windows: 8,
        dropout: 0.1,
        warmup: 2,
        ..TrainConfig::lm(corpus)
    }
}

#[test]
fn resume_reproduces_the_uninterrupted_losses_exactly() {
    let dir = scratch("resume");
    let c = corpus(&dir);
    let full = train(
        tiny(&c),
        &dir.join("a"),
        Limits::default(),
        &mut Quiet,
        &mut Silent,
    )
    .unwrap();
    let cut = Limits {
        stop_after: Some(3),
        ..Limits::default()
    };
    let first = train(tiny(&c), &dir.join("b"), cut, &mut Quiet, &mut Silent).unwrap();
    assert_eq!(first.step, 3);
    let rest = resume(
        &dir.join("b"),
        None,
        None,
        Limits::default(),
        &mut Quiet,
        &mut Silent,
    )
    .unwrap();
    assert_eq!(rest.step, 6);
    let losses = |s: &lucent::train::Summary| -> Vec<(u64, f32, Option<f32>)> {
        s.history
            .iter()
            .map(|m| (m.step, m.train_loss, m.val_loss))
            .collect()
    };
    assert_eq!(
        losses(&full),
        losses(&rest),
        "bit-identical losses after resuming"
    );
    assert!(
        full.history[5].train_loss < full.history[0].train_loss,
        "it learns"
    );
    assert!(dir.join("a/loss.png").is_file(), "loss curve drawn");
    let no_dropout = TrainConfig {
        dropout: 0.0,
        ..tiny(&c)
    };
    let one = Limits {
        stop_after: Some(1),
        ..Limits::default()
    };
    let plain = train(no_dropout, &dir.join("c"), one, &mut Quiet, &mut Silent).unwrap();
    assert_ne!(
        plain.history[0].train_loss, full.history[0].train_loss,
        "dropout is applied"
    );

    // The saved run samples, deterministically for a seed, from its own characters.
    let m = TrainedModel::load(&dir.join("a")).unwrap();
    let s1 = m.sample("the ", 40, 0.8, 7).unwrap();
    let s2 = m.sample("the ", 40, 0.8, 7).unwrap();
    assert_eq!(s1, s2);
    assert!(s1.starts_with("the ") && s1.chars().count() == 44, "{s1:?}");
    let err = m.sample("Q!", 5, 1.0, 1).unwrap_err().to_string();
    assert!(err.contains("'Q'") && err.contains("vocabulary"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_gives_clear_errors() {
    let dir = scratch("bad");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "  \n").unwrap();
    let err = train(
        tiny(empty.to_str().unwrap()),
        &dir.join("o1"),
        Limits::default(),
        &mut Quiet,
        &mut Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("empty") && err.contains("empty.txt"), "{err}");

    let missing = dir.join("nope.txt");
    let err = train(
        tiny(missing.to_str().unwrap()),
        &dir.join("o2"),
        Limits::default(),
        &mut Quiet,
        &mut Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("nope.txt") && err.contains("moby-dick"),
        "{err}"
    );

    let c = corpus(&dir);
    let big_block = TrainConfig {
        block: 10_000,
        ..tiny(&c)
    };
    let err = train(
        big_block,
        &dir.join("o3"),
        Limits::default(),
        &mut Quiet,
        &mut Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("--block") && err.contains("10001"), "{err}");

    let explode = TrainConfig {
        lr: 1e12,
        grad_clip: 0.0,
        warmup: 0,
        ..tiny(&c)
    };
    let err = train(
        explode,
        &dir.join("o4"),
        Limits::default(),
        &mut Quiet,
        &mut Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("at step ") && err.contains("--lr"), "{err}");

    let garbage = dir.join("o5");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("model.safetensors"), b"not a checkpoint").unwrap();
    let err = TrainedModel::load(&garbage).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("unreadable"),
        "{err}"
    );
    let err = resume(
        &dir.join("o6"),
        None,
        None,
        Limits::default(),
        &mut Quiet,
        &mut Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("no checkpoint"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The data-parallel step (one graph per shard, leaf gradients added in shard order)
/// gives the whole batch's loss and gradients: 1, 2 and 5 shards agree.
#[test]
fn sharded_step_equals_the_whole_batch() {
    use lucent::model::DecoderModel;
    use lucent::train::lm_backward_shards;
    use lucent::train::models::{lm_loss, new_gpt, Dims};
    use lucent::train::Parameters;
    use rand::{Rng, SeedableRng};

    let dims = Dims {
        layers: 2,
        d_model: 32,
        heads: 4,
        d_ff: 64,
        block: 12,
        vocab: 20,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut model = new_gpt(&dims, &mut rng).unwrap();
    model.requires_grad();
    let rows: Vec<Vec<usize>> = (0..5)
        .map(|_| (0..=12).map(|_| rng.random_range(0..20)).collect())
        .collect();
    let x: Vec<Vec<usize>> = rows.iter().map(|r| r[..12].to_vec()).collect();
    let y: Vec<Vec<usize>> = rows.iter().map(|r| r[1..].to_vec()).collect();

    let grads = |model: &mut DecoderModel| {
        let mut out = Vec::new();
        model.visit_params("", &mut |name, p| {
            out.push((name.to_string(), p.grad().unwrap().data().to_vec()))
        });
        model.zero_grad();
        out
    };
    let whole = lm_loss(&model, &x, &y, None).unwrap();
    let whole_loss = whole.item().unwrap();
    whole.backward().unwrap();
    let want = grads(&mut model);
    for shards in [1, 2, 5] {
        let loss = lm_backward_shards(&model, &x, &y, None, shards).unwrap();
        assert!(
            (loss - whole_loss).abs() < 1e-6,
            "{shards} shards: loss {loss} vs {whole_loss}"
        );
        let got = grads(&mut model);
        for ((name, w), (_, g)) in want.iter().zip(&got) {
            for (a, b) in w.iter().zip(g) {
                assert!(
                    (a - b).abs() <= 1e-6 + 1e-4 * a.abs(),
                    "{shards} shards, {name}: {b} vs {a}"
                );
            }
        }
    }
}
