//! How lucent's kernels share out their work over the threads of the runtime they run in
//! ([`crate::Runtime`]): the thread count a kernel sees ([`threads`]), a scope that keeps
//! one call's kernels on one thread ([`serial`]), the `gemm` crate's parallelism, and the
//! parallel loops every kernel uses.
//!
//! Every loop here runs on a lucent pool ([`crate::runtime::pool`]), never on rayon's
//! global one. A decoder's forward pass runs on a team (`with_team`): the pool's threads
//! stay awake for the pass and share its parallel loops (`for_each_index`,
//! `for_each_mut`, `for_each_chunk_mut`, `map_collect`) through one atomic counter,
//! instead of being woken for each.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use crate::runtime::pool::physical_cores;
use crate::runtime::pool::{current, on_worker};
use crate::runtime::Runtime;
use crate::Result;

/// Set the number of threads of the default runtime (0 means: physical cores), before
/// its first use: the same as [`Runtime::set_global`] with a runtime of `n` threads.
/// Errors once the default runtime is in use with another count; to run work on
/// another count then, build a [`Runtime`] and run the work in it.
pub fn set_threads(n: usize) -> Result<()> {
    Runtime::set_global(Runtime::builder().threads(n).build()?)
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

/// Run `f` inside a lucent pool ([`crate::runtime::pool::in_pool`]) with this thread's
/// [`serial`] scope carried along.
pub(crate) fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if on_worker() {
        return f();
    }
    let serial = SERIAL.with(std::cell::Cell::get);
    crate::runtime::pool::in_pool(move || with_flag(&SERIAL, serial, f))
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

/// The number of threads kernels use now: the thread count of the runtime this thread
/// works for (the default runtime's outside every pool), 1 inside [`serial`].
pub fn threads() -> usize {
    if SERIAL.with(std::cell::Cell::get) {
        return 1;
    }
    current().threads
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

// ------------------------------------------------------------------ team

thread_local! {
    /// The team of the pass running on this thread, if any (see [`with_team`]).
    static TEAM: std::cell::Cell<Option<&'static Team>> = const { std::cell::Cell::new(None) };
}

/// Threads that stay awake for a whole forward pass and share each of its parallel
/// loops ([`for_each_index`]) by claiming indices from one counter: a decoded token's
/// ~150 small products then cost a few atomic operations each instead of a wake-up of
/// the pool (whose idle workers go to sleep between them). The helpers spin while they
/// wait, so a team lives only as long as one pass.
///
/// A loop is posted as `state = (epoch, index)` in one atomic: a claim is a
/// compare-and-swap on it, so a helper still holding an old epoch can never take an
/// index of the next loop. The loop's closure stays on the caller's stack; the caller
/// returns only when every claimed index is done, and a helper calls the closure only
/// after a successful claim.
pub(crate) struct Team {
    /// Epoch in the high 32 bits (odd while a loop is being posted), next index low.
    state: AtomicU64,
    /// Indices of the current loop.
    len: AtomicUsize,
    /// The current loop's `&&(dyn Fn(usize) + Sync)`, as an address.
    job: AtomicUsize,
    /// Indices of the current loop finished.
    done: AtomicUsize,
    /// Set when the pass ends: helpers return.
    stop: std::sync::atomic::AtomicBool,
    /// The first panic of the current loop's calls.
    panic: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

/// How a team's thread waits: it spins for [`Backoff::SPINS`] rounds (a few
/// microseconds, the usual gap between a pass's loops), then yields its core at each
/// round. When the machine has fewer free cores than threads (two processes or two test
/// threads each running a team), a waiting thread that only spun would hold the core
/// the thread it waits for needs: on 2 cores, two 2-thread SmolLM2 decodes at once ran
/// at 41 tok/s each, against 74 each for two 1-thread ones. Yielding costs a system call
/// that returns at once when nothing else wants the core.
#[derive(Default)]
struct Backoff {
    /// Rounds waited so far.
    rounds: u32,
}

impl Backoff {
    /// Rounds of `spin_loop` before the thread starts yielding.
    const SPINS: u32 = 2048;

    /// Wait one round.
    fn snooze(&mut self) {
        if self.rounds < Self::SPINS {
            self.rounds += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A loop's closure as the team passes it.
type TeamJob<'a> = &'a (dyn Fn(usize) + Sync);

impl Team {
    fn new() -> Team {
        Team {
            state: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            job: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            stop: std::sync::atomic::AtomicBool::new(false),
            panic: std::sync::Mutex::new(None),
        }
    }

    /// Claim the next index of the loop of `epoch`, if it has one left.
    fn claim(&self, epoch: u64, len: usize) -> Option<usize> {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            let i = (s & 0xFFFF_FFFF) as usize;
            if s >> 32 != epoch || i >= len {
                return None;
            }
            match self
                .state
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(i),
                Err(now) => s = now,
            }
        }
    }

    /// Run `f(i)` for every i < n on this thread and the helpers; returns when all are
    /// done.
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        let epoch = self.state.load(Ordering::Relaxed) >> 32;
        // Odd epoch: posting (helpers wait); then the loop's even epoch, index 0.
        let posting = epoch + 1;
        let open = epoch + 2;
        self.state.store(posting << 32, Ordering::SeqCst);
        let job: TeamJob = f;
        self.job
            .store(&job as *const TeamJob as usize, Ordering::SeqCst);
        self.len.store(n, Ordering::SeqCst);
        self.done.store(0, Ordering::SeqCst);
        self.state.store(open << 32, Ordering::SeqCst);
        while let Some(i) = self.claim(open, n) {
            self.call(f, i);
        }
        let mut wait = Backoff::default();
        while self.done.load(Ordering::Acquire) < n {
            wait.snooze();
        }
        // A call that panicked (here or on a helper) panics the loop, now that no
        // thread uses `f` any more.
        let panic = self.panic.lock().map(|mut p| p.take());
        if let Ok(Some(payload)) = panic {
            std::panic::resume_unwind(payload);
        }
    }

    /// `f(i)`, counted done also if it panics (its panic kept for [`Team::run`] to
    /// raise), so that the loop always ends.
    fn call(&self, f: &(dyn Fn(usize) + Sync), i: usize) {
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i))) {
            if let Ok(mut p) = self.panic.lock() {
                p.get_or_insert(payload);
            }
        }
        self.done.fetch_add(1, Ordering::AcqRel);
    }

    /// A helper's life: wait for each loop, take indices until it has none left, until
    /// the pass ends.
    fn serve(&self) {
        let mut seen = 0u64;
        loop {
            // Wait for an open loop not seen yet.
            let mut wait = Backoff::default();
            let (epoch, len, job) = loop {
                if self.stop.load(Ordering::Acquire) {
                    return;
                }
                let s1 = self.state.load(Ordering::SeqCst);
                let e = s1 >> 32;
                if e.is_multiple_of(2) && e != seen {
                    let len = self.len.load(Ordering::SeqCst);
                    let job = self.job.load(Ordering::SeqCst);
                    // Still the same loop, not being replaced: len and job are its own.
                    if self.state.load(Ordering::SeqCst) >> 32 == e {
                        break (e, len, job);
                    }
                }
                wait.snooze();
            };
            seen = epoch;
            while let Some(i) = self.claim(epoch, len) {
                // SAFETY: the claim succeeded, so the loop of `epoch` is still running
                // (its caller waits for index i to be done): `job` points at its closure
                // reference on the caller's stack.
                let f = unsafe { *(job as *const TeamJob) };
                self.call(f, i);
            }
        }
    }
}

/// Run `body` with a [`Team`] of all kernel threads: the calling thread runs `body`,
/// the others serve the parallel loops it posts through [`for_each_index`] until it
/// returns. With one thread, `body` runs alone. For passes made of many small parallel
/// loops (a decoded token); a loop in `body` that goes to rayon directly runs on the
/// calling thread only, as the others are busy serving.
pub(crate) fn with_team<R: Send>(body: impl FnOnce() -> R + Send) -> R {
    if !on_worker() {
        return in_pool(|| with_team(body));
    }
    let n = threads();
    if n <= 1 {
        return body();
    }
    let team = Team::new();
    rayon::scope(|s| {
        for _ in 1..n {
            s.spawn(|_| team.serve());
        }
        // SAFETY of the 'static: the reference is removed (below, also on unwind)
        // before `team` goes out of scope, and only this thread reads it.
        let t: &'static Team = unsafe { &*(&team as *const Team) };
        struct Leave<'a>(&'a Team);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                TEAM.with(|c| c.set(None));
                self.0.stop.store(true, Ordering::Release);
            }
        }
        TEAM.with(|c| c.set(Some(t)));
        let _leave = Leave(&team);
        body()
    })
}

/// Whether this thread runs a pass on a [`Team`] now.
pub(crate) fn in_team() -> bool {
    TEAM.with(|t| t.get().is_some())
}

/// `f(i)` for every `i < n`, in parallel: on the pass's [`Team`] when one runs on this
/// thread, else over the pool of the runtime this thread works for.
pub(crate) fn for_each_index(n: usize, f: impl Fn(usize) + Sync) {
    if let Some(team) = TEAM.with(std::cell::Cell::get) {
        // A loop inside this loop's calls (on this thread) goes to rayon, not to the
        // team, which is busy with this one.
        struct Back(&'static Team);
        impl Drop for Back {
            fn drop(&mut self) {
                TEAM.with(|c| c.set(Some(self.0)));
            }
        }
        TEAM.with(|c| c.set(None));
        let _back = Back(team);
        team.run(n, &f);
        return;
    }
    use rayon::prelude::*;
    in_pool(|| (0..n).into_par_iter().for_each(&f));
}

/// `f(c, j0, j1)` for each block of `cols` columns j0..j1 (the last may be narrower)
/// of the row-major matrix `c` with rows of `n`, in parallel as [`for_each_index`]: the
/// few-rows split of a product, where every task owns whole columns of C. Each call
/// gets all of `c` (its rows are strided by `n`).
///
/// # Safety
/// `f(c, j0, j1)` writes only columns j0..j1 of `c`'s rows, so no two calls write one
/// element.
pub(crate) unsafe fn for_each_column_block(
    c: &mut [f32],
    n: usize,
    cols: usize,
    f: impl Fn(&mut [f32], usize, usize) + Sync,
) {
    /// C's start, shared by the tasks that write disjoint columns of it.
    struct Out(*mut f32, usize);
    // SAFETY: the tasks sharing it write disjoint columns (this function's contract).
    unsafe impl Sync for Out {}
    let out = Out(c.as_mut_ptr(), c.len());
    for_each_index(n.div_ceil(cols.max(1)), |t| {
        let (j0, j1) = (t * cols, ((t + 1) * cols).min(n));
        let out = &out;
        // SAFETY: the caller's contract: task t writes only columns j0..j1, which no
        // other task writes; `c` outlives the loop.
        let c = unsafe { std::slice::from_raw_parts_mut(out.0, out.1) };
        f(c, j0, j1);
    });
}

/// `f(i, &mut items[i])` for every item, in parallel as [`for_each_index`] (each item
/// to exactly one call).
pub(crate) fn for_each_mut<T: Send>(items: &mut [T], f: impl Fn(usize, &mut T) + Sync) {
    let n = items.len();
    let items = Items(items.as_mut_ptr());
    for_each_index(n, |i| {
        // SAFETY: i < n, and for_each_index gives each index to one call only.
        f(i, unsafe { items.item(i) })
    });
}

/// `f(c, chunk c)` for the chunks of `chunk` items of `data` (the last may be shorter),
/// in parallel as [`for_each_index`], each chunk to exactly one call; no allocation.
pub(crate) fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let (len, chunk) = (data.len(), chunk.max(1));
    let items = Items(data.as_mut_ptr());
    for_each_index(len.div_ceil(chunk), |c| {
        let start = c * chunk;
        // SAFETY: start < len, the chunks are disjoint, and for_each_index gives each
        // index to one call only.
        f(c, unsafe { items.range(start, (start + chunk).min(len)) })
    });
}

/// A slice's address, shared by parallel calls that each take their own part.
struct Items<T>(*mut T);

// SAFETY: the calls reach disjoint parts (one index each), whose items may be sent.
unsafe impl<T: Send> Sync for Items<T> {}

impl<T> Items<T> {
    /// Item `i`.
    ///
    /// # Safety
    /// `i` is within the slice and no other reference to that item is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn item(&self, i: usize) -> &mut T {
        unsafe { &mut *self.0.add(i) }
    }

    /// Items `start .. end`.
    ///
    /// # Safety
    /// The range is within the slice and no other reference to its items is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn range(&self, start: usize, end: usize) -> &mut [T] {
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), end - start) }
    }
}

/// `[f(0), f(1), ..., f(n − 1)]`, computed in parallel as [`for_each_index`].
pub(crate) fn map_collect<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for_each_mut(&mut out, |i, o| *o = Some(f(i)));
    // for_each_mut fills every item, so flattening keeps all n of them, in order.
    let out: Vec<T> = out.into_iter().flatten().collect();
    debug_assert_eq!(out.len(), n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A team's loops give every index to exactly one call, loop after loop (empty loops
    /// too), and the items of `for_each_mut` each to one call.
    #[test]
    fn team_loops_take_every_index_once() {
        let pool = Runtime::builder().threads(2).build().expect("runtime");
        let total = pool.install(|| {
            with_team(|| {
                let mut total = 0usize;
                for n in (0..300).map(|k| k % 37) {
                    let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    for_each_index(n, |i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(
                        hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                        "n = {n}"
                    );
                    let mut items: Vec<usize> = vec![0; n];
                    for_each_mut(&mut items, |i, x| *x += i + 1);
                    assert!(
                        items.iter().enumerate().all(|(i, &x)| x == i + 1),
                        "n = {n}"
                    );
                    total += n;
                }
                total
            })
        });
        assert_eq!(total, (0..300).map(|k| k % 37).sum::<usize>());
    }

    /// A loop inside a team loop's call runs (on rayon) and a panicking call panics the
    /// loop, after every other index ran; the team then still serves the next loop.
    #[test]
    fn team_loops_nest_and_pass_panics_on() {
        let pool = Runtime::builder().threads(2).build().expect("runtime");
        pool.install(|| {
            with_team(|| {
                let sums: Vec<usize> = map_collect(8, |i| map_collect(i, |j| j).iter().sum());
                assert_eq!(
                    sums,
                    (0..8)
                        .map(|i: usize| i * i.saturating_sub(1) / 2)
                        .collect::<Vec<_>>()
                );
                let ran = AtomicUsize::new(0);
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    for_each_index(16, |i| {
                        ran.fetch_add(1, Ordering::Relaxed);
                        assert!(i != 5, "index 5 fails");
                    })
                }));
                assert!(caught.is_err(), "the loop's panic reaches its caller");
                assert_eq!(ran.load(Ordering::Relaxed), 16);
                assert_eq!(map_collect(4, |i| i + 1), vec![1, 2, 3, 4]);
            })
        });
    }
}
