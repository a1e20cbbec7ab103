use lucent::autograd::optim::{AdamW, DecayRule};
use lucent::autograd::Parameters;
use lucent::pipeline::train::models::{Dims, Gpt};
use rand::{Rng, SeedableRng};
fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2);
    lucent::set_threads(threads);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let d = Dims {
        layers: 4,
        d_model: 128,
        heads: 4,
        d_ff: 512,
        block: 64,
        vocab: 80,
    };
    let mut m = Gpt::new_random(&d, &mut rng).unwrap();
    m.requires_grad();
    println!("params {}", m.num_parameters());
    let mut opt = AdamW::new(1e-3, (0.9, 0.99), 1e-8, 0.1, DecayRule::MatricesOnly);
    let ids: Vec<Vec<usize>> = (0..12)
        .map(|_| (0..64).map(|_| rng.random_range(0..80)).collect())
        .collect();
    for step in 0..12 {
        let t0 = std::time::Instant::now();
        let loss = m.loss(&ids, &ids).unwrap();
        let t1 = t0.elapsed();
        loss.backward().unwrap();
        let t2 = t0.elapsed();
        drop(loss);
        opt.step(&mut m).unwrap();
        m.zero_grad();
        let t3 = t0.elapsed();
        println!(
            "step {step}: fwd {:?} bwd {:?} opt {:?} total {:?} tok/s {:.0}",
            t1,
            t2 - t1,
            t3 - t2,
            t3,
            768.0 / t3.as_secs_f64()
        );
    }
}
