//! [`Runtime`]: the threads lucent's kernels run on and the instruction-set level they
//! use, owned by the library.
//!
//! A runtime owns a rayon [`ThreadPool`](rayon::ThreadPool) of its own; lucent never
//! sizes or runs on rayon's global pool, so a host program's pool stays its own. Work
//! runs inside a runtime's pool ([`Runtime::install`]): the public entry points that run
//! kernels (model forwards, training steps, embedding) install into the current runtime
//! themselves, and every parallel loop of the kernels does so when it finds itself
//! outside one ([`in_pool`]). A kernel reads its thread count and its instruction-set
//! level from the pool its thread belongs to ([`current`]): two runtimes with different
//! settings can run side by side (tests of every path and thread count, a server's
//! workers) without touching each other.
//!
//! The process has a default runtime ([`Runtime::global`]), created on first use with
//! the machine's physical cores and the cap `LUCENT_ISA` sets; [`Runtime::set_global`]
//! (or [`crate::set_threads`]) chooses other settings before that first use.

use std::sync::{Arc, OnceLock};

use crate::runtime::cpu::Isa;
use crate::{Error, Result};

/// The settings a runtime's threads read.
#[derive(Debug)]
pub(crate) struct Settings {
    /// Threads kernels split their work over (the pool's size).
    pub(crate) threads: usize,
    /// The instruction-set level kernels use (already capped to the CPU's).
    pub(crate) isa: Isa,
}

thread_local! {
    /// The settings of the runtime whose pool this thread is a worker of (set when the
    /// worker starts); None on every other thread.
    static WORKER: std::cell::OnceCell<Arc<Settings>> = const { std::cell::OnceCell::new() };
}

/// Threads and an instruction-set level for lucent's kernels: a thread pool of its own.
/// Cheap to clone (the pool is shared); the pool's threads end when the last clone goes.
///
/// ```no_run
/// let rt = lucent::Runtime::builder().threads(2).isa(lucent::Isa::Avx2).build()?;
/// let n = rt.install(|| lucent::threads()); // kernels in here use 2 threads and AVX2
/// assert_eq!(n, 2);
/// # Ok::<(), lucent::Error>(())
/// ```
#[derive(Clone)]
pub struct Runtime {
    settings: Arc<Settings>,
    /// None if the pool could not be built lazily (the default runtime): work then runs
    /// on the calling thread.
    pool: Arc<Option<rayon::ThreadPool>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Runtime({} threads, {})",
            self.settings.threads, self.settings.isa
        )
    }
}

/// Settings for a new [`Runtime`] ([`Runtime::builder`]).
#[derive(Clone, Debug, Default)]
pub struct RuntimeBuilder {
    threads: Option<usize>,
    isa: Option<Isa>,
}

impl RuntimeBuilder {
    /// Threads kernels split their work over; 0 (the default) means the machine's
    /// physical cores. More than [`max_threads`] is refused when the runtime is built.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    /// The highest instruction-set level kernels may use (lowered to what the CPU runs);
    /// by default the cap `LUCENT_ISA` sets, else the CPU's own level.
    pub fn isa(mut self, cap: Isa) -> Self {
        self.isa = Some(cap);
        self
    }

    /// The settings, resolved: thread count and level.
    fn settings(&self) -> Result<Settings> {
        let threads = match self.threads {
            None | Some(0) => physical_cores(),
            Some(n) if n > max_threads() => {
                return Err(Error::Argument(format!(
                    "{n} threads: give 1 to {} (4 × this machine's {} logical CPUs; more threads \
                     than cores only make the kernels wait on each other)",
                    max_threads(),
                    num_cpus::get()
                )))
            }
            Some(n) => n,
        };
        let cap = match self.isa {
            Some(cap) => cap,
            None => Isa::from_env()?.unwrap_or(Isa::Avx512),
        };
        Ok(Settings {
            threads,
            isa: cap.supported(),
        })
    }

    /// Start the runtime's threads. Errors if `LUCENT_ISA` is malformed (when no level
    /// was given) or the threads cannot be started.
    pub fn build(self) -> Result<Runtime> {
        let settings = Arc::new(self.settings()?);
        let pool = build_pool(&settings).map_err(|e| {
            Error::Argument(format!(
                "could not start {} threads for a lucent runtime: {e}; ask for fewer",
                settings.threads
            ))
        })?;
        Ok(Runtime {
            settings,
            pool: Arc::new(Some(pool)),
        })
    }
}

/// A rayon pool of `s.threads` threads that know their settings.
fn build_pool(s: &Arc<Settings>) -> std::result::Result<rayon::ThreadPool, String> {
    let mine = Arc::clone(s);
    rayon::ThreadPoolBuilder::new()
        .num_threads(s.threads)
        .thread_name(|i| format!("lucent-{i}"))
        .start_handler(move |_| {
            WORKER.with(|w| {
                let _ = w.set(Arc::clone(&mine));
            })
        })
        .build()
        .map_err(|e| e.to_string())
}

/// The most threads a runtime takes: 4 × the machine's logical CPUs.
pub fn max_threads() -> usize {
    4 * num_cpus::get().max(1)
}

/// The machine's physical core count (the default thread count).
pub fn physical_cores() -> usize {
    num_cpus::get_physical().max(1)
}

/// The default runtime, once made.
static GLOBAL: OnceLock<Runtime> = OnceLock::new();

impl Runtime {
    /// Settings for a new runtime.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The process's default runtime: the one [`Runtime::set_global`] set, else (made on
    /// first use) the machine's physical cores and the cap `LUCENT_ISA` sets (a malformed
    /// value is reported once on stderr and ignored; [`Isa::from_env`] gives the error).
    pub fn global() -> &'static Runtime {
        GLOBAL.get_or_init(|| {
            let b = Runtime::builder();
            let settings = b.settings().unwrap_or_else(|e| {
                eprintln!("lucent: {e}; using the CPU's own instruction set");
                Settings {
                    threads: physical_cores(),
                    isa: Isa::detected(),
                }
            });
            let settings = Arc::new(settings);
            let pool = build_pool(&settings);
            if let Err(e) = &pool {
                eprintln!("lucent: could not start the default thread pool ({e}); running on the calling thread");
            }
            Runtime {
                settings,
                pool: Arc::new(pool.ok()),
            }
        })
    }

    /// Make `rt` the process's default runtime. Errors if the default is already in use
    /// (something ran kernels, or set it, before); set it first thing, or run work in a
    /// runtime of its own with [`Runtime::install`].
    pub fn set_global(rt: Runtime) -> Result<()> {
        let Err(rt) = GLOBAL.set(rt) else {
            return Ok(());
        };
        let now = Runtime::global();
        if rt.threads() == now.threads() && rt.isa() == now.isa() {
            return Ok(());
        }
        Err(Error::Argument(format!(
            "the default lucent runtime is already in use ({now:?}); set threads and \
             the instruction set before the first model runs, or build a Runtime and \
             run the work inside it with Runtime::install"
        )))
    }

    /// Threads its kernels split work over.
    pub fn threads(&self) -> usize {
        self.settings.threads
    }

    /// The instruction-set level its kernels use.
    pub fn isa(&self) -> Isa {
        self.settings.isa
    }

    /// Run `f` on this runtime's pool (on the calling thread if it is one of the pool's
    /// workers already) and return its result: kernels inside use this runtime's threads
    /// and instruction set. The calling thread waits.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match self.pool.as_ref() {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }
}

/// The settings of the runtime this thread works for: its pool's, on a worker; the
/// default runtime's elsewhere.
pub(crate) fn current() -> Arc<Settings> {
    WORKER
        .with(|w| w.get().cloned())
        .unwrap_or_else(|| Arc::clone(&Runtime::global().settings))
}

/// The instruction-set level the kernels use on this thread ([`current`]'s).
pub fn isa() -> Isa {
    WORKER
        .with(|w| w.get().map(|s| s.isa))
        .unwrap_or_else(|| Runtime::global().isa())
}

/// Whether this thread is a worker of a lucent runtime's pool.
pub(crate) fn on_worker() -> bool {
    WORKER.with(|w| w.get().is_some())
}

/// Run `f` inside a lucent pool: here if this thread is a worker of one, else on the
/// default runtime's. Every parallel loop goes through it, so that no rayon work of
/// lucent's lands on a pool that is not lucent's.
pub(crate) fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if on_worker() {
        f()
    } else {
        Runtime::global().install(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime's threads see its settings; outside, the default's; two runtimes with
    /// different settings do not see each other's.
    #[test]
    fn runtimes_keep_their_own_settings() -> Result<()> {
        let one = Runtime::builder().threads(1).isa(Isa::Scalar).build()?;
        let two = Runtime::builder().threads(2).isa(Isa::Avx2).build()?;
        assert_eq!(one.install(crate::threads::threads), 1);
        assert_eq!(one.install(isa), Isa::Scalar);
        assert_eq!(two.install(crate::threads::threads), 2);
        assert_eq!(two.install(isa), Isa::Avx2.supported());
        // Nested: a runtime installed from inside another's worker uses its own.
        assert_eq!(two.install(|| one.install(crate::threads::threads)), 1);
        // The parallel loops of one run on its own pool's threads.
        let names = two.install(|| {
            crate::threads::map_collect(64, |_| {
                std::thread::current().name().unwrap_or("").to_string()
            })
        });
        assert!(names.iter().all(|n| n.starts_with("lucent-")), "{names:?}");
        assert!(!on_worker());
        Ok(())
    }

    /// Kernels called from a host program's own rayon pool (or from any thread outside
    /// lucent's) run on lucent's threads: the host's pool is never used.
    #[test]
    fn a_hosts_pool_is_never_used() -> Result<()> {
        let host = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .thread_name(|i| format!("host-{i}"))
            .build()
            .map_err(|e| Error::Argument(e.to_string()))?;
        let names = |n: usize| {
            crate::threads::map_collect(n, |_| {
                std::thread::current().name().unwrap_or("").to_string()
            })
        };
        for got in [host.install(|| names(64)), names(64)] {
            assert!(got.iter().all(|n| n.starts_with("lucent-")), "{got:?}");
        }
        // A product large enough for the gemm crate's threads.
        let (m, k, n) = (64, 256, 256);
        let (a, b) = (vec![1.0f32; m * k], vec![0.5f32; k * n]);
        let mut c = vec![0.0f32; m * n];
        host.install(|| crate::ops::matmul::gemm_into(&mut c, &a, &b, m, k, n, false));
        assert!(c.iter().all(|&v| v == 128.0));
        Ok(())
    }
}
