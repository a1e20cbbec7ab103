//! How many threads lucent's kernels use. One process-wide setting, chosen once by the
//! caller (the CLI's `--threads`), read by the kernels; never an environment variable
//! read inside a forward pass.
//!
//! lucent uses rayon's global pool. [`set_threads`] sizes it; kernels split work into
//! [`threads`] parts and hand `gemm` the same count.

use std::sync::atomic::{AtomicUsize, Ordering};

static THREADS: AtomicUsize = AtomicUsize::new(0);

/// The machine's physical core count (the default thread count).
pub fn physical_cores() -> usize {
    num_cpus::get_physical().max(1)
}

/// Set the number of threads kernels may use (0 means: physical cores).
///
/// The first call also sizes rayon's global pool; call it before any forward pass.
/// Later calls change how kernels split work, up to the pool's size.
pub fn set_threads(n: usize) {
    let n = if n == 0 { physical_cores() } else { n };
    THREADS.store(n, Ordering::Relaxed);
    // Fails only if the global pool already exists; then we keep it.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("lucent-{i}"))
        .build_global();
}

thread_local! {
    /// Set inside [`serial`]: kernels on this thread run on one thread.
    static SERIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with this thread's kernels on one thread (`threads()` is 1 inside), then
/// restore the previous setting. For work that is already parallel at a coarser grain,
/// such as one shard of a data-parallel training step.
pub fn serial<R>(f: impl FnOnce() -> R) -> R {
    with_flag(&SERIAL, true, f)
}

/// Run `f` with the thread-local `flag` set to `value`, then restore its previous value,
/// also if `f` panics.
pub(crate) fn with_flag<R>(
    flag: &'static std::thread::LocalKey<std::cell::Cell<bool>>,
    value: bool,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore(&'static std::thread::LocalKey<std::cell::Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(flag, flag.with(|c| c.replace(value)));
    f()
}

/// The number of threads kernels use now (1 inside [`serial`]).
pub fn threads() -> usize {
    if SERIAL.with(std::cell::Cell::get) {
        return 1;
    }
    match THREADS.load(Ordering::Relaxed) {
        0 => physical_cores().min(rayon::current_num_threads()),
        n => n.min(rayon::current_num_threads()),
    }
}

/// The `gemm` crate's parallelism for a product of `flops` multiply-adds: a single
/// thread for small products (waking threads costs more than it saves).
///
/// The threshold, 2²³ ≈ 8.4 M multiply-adds, is measured (2 cores, busy machine, best
/// of many runs): 32×384×384 (4.7 M) took 90 µs on one thread and 96 µs on two;
/// 32×384×1536 (18.9 M) took 400 µs on one and 242 µs on two.
pub fn gemm_parallelism(flops: usize) -> gemm::Parallelism {
    let n = threads();
    if n <= 1 || flops < 1 << 23 {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(n)
    }
}
