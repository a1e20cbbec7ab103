//! The encoder-decoder: padding never changes a decoded sequence, and a short `reverse`
//! run learns the task (held-out exact match ≥ 90%, a few seconds).

use lucent::io::fetch::Silent;
use lucent::train::data::{pad_batch, Task, BOS, EOS};
use lucent::train::models::{new_seq2seq, src_lengths, Dims};
use lucent::train::{train, Job, Limits, Quiet, TrainConfig, TrainedModel};
use rand::rngs::StdRng;
use rand::SeedableRng;

#[test]
fn padded_batch_decodes_like_each_sequence_alone() {
    let dims = Dims {
        layers: 2,
        d_model: 16,
        heads: 2,
        d_ff: 32,
        block: 40,
        vocab: Task::Reverse.vocab_size(6),
    };
    let model = new_seq2seq(&dims, &mut StdRng::seed_from_u64(3)).unwrap();
    let mut rng = StdRng::seed_from_u64(4);
    let examples: Vec<_> = (0..5)
        .map(|_| Task::Reverse.example(6, 2, 9, &mut rng))
        .collect();
    let batch = pad_batch(&examples);
    let lens = src_lengths(&batch.src);
    let together = model.greedy(&batch.src, Some(&lens), BOS, EOS, 12).unwrap();
    for (i, (src, _)) in examples.iter().enumerate() {
        let alone = model
            .greedy(std::slice::from_ref(src), None, BOS, EOS, 12)
            .unwrap();
        assert_eq!(together[i], alone[0], "example {i} (length {})", src.len());
    }
}

#[test]
fn a_short_reverse_run_learns_the_task() {
    let dir = std::env::temp_dir().join(format!("lucent-s2s-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = TrainConfig {
        job: Job::Seq2Seq {
            task: Task::Reverse,
            symbols: 5,
            min_len: 2,
            max_len: 5,
            test_size: 100,
        },
        layers: 1,
        d_model: 32,
        heads: 2,
        steps: 400,
        eval_every: 400,
        lr: 3e-3,
        min_lr: 3e-4,
        warmup: 40,
        ..TrainConfig::seq2seq(Task::Reverse)
    };
    let s = train(cfg, &dir, Limits::default(), &mut Quiet, &mut Silent).unwrap();
    let em = s.last_exact_match().unwrap();
    assert!(
        em >= 0.9,
        "held-out exact match {em} after {} steps",
        s.step
    );
    let m = TrainedModel::load(&dir).unwrap();
    assert_eq!(m.sample("abcd", 0, 0.0, 0).unwrap(), "dcba");
    let (maps, rows, cols) = m.cross_attention("abcde").unwrap();
    assert_eq!(maps.len(), 1);
    assert_eq!(maps[0].shape(), &[rows.len(), cols.len()]);
    let _ = std::fs::remove_dir_all(&dir);
}
