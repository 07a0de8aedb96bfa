//! The worker pool: runs a launch's work-groups in tasks of a chosen [`Grain`],
//! on the calling thread plus `granted − 1` helper threads.
//!
//! ```
//! use taskgrain::pool::{Grain, Pool, PoolConfig};
//! use taskgrain::simt::Tiling;
//!
//! let pool = Pool::new(PoolConfig::default())?;
//! let tiling = Tiling::rows(100, 16, 4)?; // 100 rows of 16, 4 rows per group
//! let mut out = vec![0.0f32; tiling.len()];
//! let kernel = |g: usize, span: &mut [f32]| span.fill(g as f32);
//! let stats = pool.launch(&tiling, Grain::tasks(2).unwrap(), &mut out, &kernel)?;
//! assert_eq!(stats.tasks, 13);
//! assert_eq!(out[99 * 16], 24.0);
//! # Ok::<(), taskgrain::Error>(())
//! ```
//!
//! # Who runs what
//!
//! The pool decides only *who* runs a group, never *what* it computes: a group
//! always receives exactly its own span of the output, so results are
//! byte-identical for every grain and worker count.
//!
//! - [`Grain::Legacy`]: one contiguous chunk of groups per granted worker
//!   (chunk sizes differ by at most one); chunks are claimed dynamically.
//! - [`Grain::Tasks`]`(k)`: tasks of `k` consecutive groups, claimed from an
//!   atomic counter by whichever thread is free.
//! - [`Grain::Caller`]: [`simt::run_groups`] on the calling thread; the pool is
//!   not touched (no lock, no wake-up).
//!
//! The calling thread always takes part: a pool granted `G` workers has `G − 1`
//! helper threads. A launch of one task, a launch on a pool without helpers and
//! a launch issued from inside a task (nested) run inline on the calling thread.
//!
//! # The dispatch protocol
//!
//! Shared state (`protocol.rs`): `epoch` (a futex word) and `frame` (pointer
//! to the launch's task function, on the caller's stack), one *range slot*
//! per worker (`lo..hi`, unclaimed tasks, packed in one `u64`, plus a
//! `spinning` hint), `sleepers`, and the completion line `helper_done` (a
//! futex word) with `caller_waiting`.
//!
//! **Claiming.** A task is claimed exactly once, by a compare-and-swap on a
//! range: its owner pops from the front (`lo + 1`), any other worker steals the
//! back half (`hi = mid`) and moves it into its own, empty range. Owners
//! rarely contend, so near-empty tasks cost a few ns each instead of one cache
//! line transfer per task through a shared counter.
//!
//! A **helper** cycles through three states:
//! 1. *spinning*: advertises `spinning`, polls `epoch` for [`PoolConfig::spin`]
//!    (when oversubscribed it yields a few times instead, so it never holds a
//!    core another thread needs); the hint stays up through the visit that
//!    follows and comes down only when the helper parks. (Cleared on every
//!    visit, it made back-to-back launches resonate: a helper still visiting
//!    launch N, which the caller had finished alone, was never given a share
//!    of N+1, and arrived late again: 64 near-empty tasks were helped in ~1%
//!    of hot launches; now in ~100%.)
//! 2. *parked*: `sleepers += 1`, `fence(SeqCst)`, re-reads `epoch`, and sleeps
//!    in `futex_wait(epoch, seen)` if it is unchanged; then `sleepers −= 1`;
//! 3. *visiting* (after `epoch` changed, read with Acquire): pops its own
//!    range, steals, repeats until every range is empty; it reads `frame` only
//!    once it holds a claim; at the end it adds the number of tasks it ran to
//!    `helper_done` (Release) and, if `caller_waiting`, wakes the caller. Its
//!    first steal passes a wake-up on to one more sleeper if work is left.
//!
//! The **caller** of a launch (holding the launch lock):
//! 1. *publish*: stores `frame`, resets the completion line, splits the tasks
//!    evenly between itself and the helpers advertising `spinning` (a hint:
//!    they will see the launch within ~100 ns) and stores those ranges
//!    (Release; a helper's range is filled only if empty), bumps `epoch`
//!    (Release), `fence(SeqCst)`, reads `sleepers` and wakes
//!    `min(tasks − 1, cores − 1, sleepers)` — one `futex_wake`, skipped when no
//!    helper sleeps;
//! 2. *claim*: pops its range, then steals, until every range is empty — so it
//!    also takes back the shares of helpers that did not show up;
//! 3. *wait*: until `helper_done` equals the tasks it did not run itself —
//!    spins (not when oversubscribed), yields, then sets `caller_waiting`,
//!    `fence(SeqCst)`, re-reads, and sleeps in `futex_wait(helper_done, d)`.
//!
//! **Why no wake-up is lost.** Each sleep is guarded by a store→fence→load pair
//! mirrored on the other side (Dekker): a helper parking writes `sleepers` then
//! reads `epoch`, the publishing caller writes `epoch` then reads `sleepers`, so
//! at least one of them sees the other; the futex re-checks the word atomically
//! with going to sleep, so a wake between the check and the sleep still lands.
//! The same holds for the caller sleeping on `helper_done` (`caller_waiting`
//! vs the helper's add), and for shutdown (flag, `epoch` bump, wake all).
//!
//! **Why a launch never returns early, and never waits for a helper that has not
//! started.** Every task is claimed exactly once; the caller keeps claiming
//! (stealing back) until every range is empty, so unclaimed work never waits
//! for a helper to wake up. Every task it did not run was claimed by a helper,
//! which reports it in `helper_done` after running it: when the count matches,
//! every task has finished and its writes happen-before the return
//! (Release/Acquire). A helper touches the caller's `frame` only while it holds
//! an unreported claim, so the caller cannot have returned; a helper that
//! arrives late finds every range empty and touches nothing of the caller's.
//! The only stores into a range that another thread may fill are
//! compare-and-swaps from empty: a thief whose own range was meanwhile given a
//! share runs its stolen tasks itself, and a publication that finds a helper's
//! range busy merges that share into the next one.
//!
//! This protocol is model-checked with loom (`tests/pool_loom.rs`; run it with
//! `RUSTFLAGS="--cfg loom" cargo test --release --test pool_loom`, ~1.5 min):
//! under `--cfg loom` the primitives of `pool::sync` come from loom, the futex
//! is modelled by a mutex and condition variable, and the spin phase by one
//! poll while advertising `spinning`.
//!
//! # Faults, concurrency, drop
//!
//! - A panic in a kernel is caught (`catch_unwind`) on whichever thread ran it;
//!   tasks not yet claimed are cancelled, the launch still waits for the tasks
//!   in flight, and returns `Err(Error::KernelPanicked(message))`. The pool
//!   stays usable. The content of `out` is then unspecified.
//! - Launches from several threads at once are **serialized** by a mutex: a
//!   second caller sleeps until the running launch returns. (`Grain::Caller`
//!   launches never take it.)
//! - Dropping the pool sets `shutdown`, bumps `epoch`, wakes every helper and
//!   joins them all.
//! - A launch allocates nothing on the heap (`tests/pool_alloc.rs`); a panic
//!   message is the only allocation, on the error path.
//! - A launch has at most `u32::MAX` tasks (ranges count in 32 bits).
//!
//! # Pinning
//!
//! With [`PoolConfig::pin`] (the default) helper `i` is pinned to the
//! `(i + 1) % n`-th core this process may use: when the pool is granted one
//! worker per core, the helpers fill the cores other than the first, each
//! helper keeps its core and its cache between launches, and none migrates in
//! the middle of a launch. The **caller's thread is never pinned**: it is the
//! user's thread, and pinning it would silently change the affinity of all the
//! user's later code. A harness that measures the pool pins it for the length
//! of the measurement with [`CallerPin`]. An oversubscribed pool pins nothing: with several helpers
//! per core, only the scheduler can balance them.
//!
//! Measured on the 2-vCPU development VM (Firecracker, where one syscall costs
//! ~4 µs): pinning makes no difference to hot launches; after an idle gap it
//! was sometimes slower to wake a pinned helper (p50 11 µs pinned vs 4.5 µs
//! unpinned for 64 tasks, with an earlier version of the protocol) and
//! sometimes not (2.6–4.5 µs pinned with the current one). The numbers are
//! noisy; `pin: false` is there to check on a given machine
//! (`cargo run --release --example dispatch -- --no-pin`).

mod affinity;
mod config;
mod grain;
mod protocol;
mod split;
mod stats;
pub(crate) mod sync;

pub use affinity::CallerPin;
pub(crate) use affinity::allowed_cpus;
pub use config::{DEFAULT_SPIN, PoolConfig, available_cores};
pub use grain::Grain;
pub use stats::LaunchStats;

use crate::error::{Error, Result};
use crate::packet;
use crate::simt::{self, GroupFn, Tiling};
use protocol::{InPoolGuard, Shared, Tuning};
use split::{SharedOut, Split};
use std::panic::{AssertUnwindSafe, catch_unwind};
use sync::{Arc, thread};

/// A pool of worker threads that runs launches together with the calling thread.
///
/// Created and owned by the caller (never global). `Pool` is `Send + Sync`;
/// launches from several threads are serialized.
pub struct Pool {
    shared: Arc<Shared>,
    helpers: Vec<thread::JoinHandle<()>>,
    requested: usize,
    granted: usize,
    cores: usize,
    config: PoolConfig,
}

impl Pool {
    /// Start a pool: grants `min(cfg.workers, available cores)` workers (all of
    /// them if `cfg.oversubscribe`) and spawns `granted − 1` helper threads;
    /// returns once they have all started.
    ///
    /// Errors: [`Error::BadArgument`] if `cfg.workers` is 0, [`Error::Pool`] if a
    /// thread cannot be spawned.
    pub fn new(cfg: PoolConfig) -> Result<Pool> {
        if cfg.workers == 0 {
            return Err(Error::BadArgument(
                "workers must be at least 1 (the calling thread counts as one)".into(),
            ));
        }
        let cores = available_cores();
        let granted = if cfg.oversubscribe {
            cfg.workers
        } else {
            cfg.workers.min(cores)
        };
        let oversubscribed = granted > cores;
        let tuning = Tuning {
            #[cfg(not(loom))]
            spin: cfg.spin,
            #[cfg(not(loom))]
            oversubscribed,
            wake_limit: cores.saturating_sub(1).max(1),
        };
        let mut pool = Pool {
            shared: Arc::new(Shared::new(tuning, granted)),
            helpers: Vec::with_capacity(granted - 1),
            requested: cfg.workers,
            granted,
            cores,
            config: cfg,
        };
        let cpus = if pool.config.pin && !oversubscribed {
            affinity::allowed_cpus()
        } else {
            Vec::new()
        };
        for i in 0..granted - 1 {
            let shared = Arc::clone(&pool.shared);
            let cpu = (!cpus.is_empty()).then(|| cpus[(i + 1) % cpus.len()]);
            let spawned = thread::Builder::new()
                .name(format!("taskgrain-{}", i + 1))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        affinity::pin_current_thread(cpu);
                    }
                    shared.helper_main(i + 1);
                });
            match spawned {
                Ok(h) => pool.helpers.push(h),
                // Dropping `pool` joins the helpers started so far.
                Err(e) => return Err(Error::Pool(format!("cannot spawn helper {}: {e}", i + 1))),
            }
        }
        pool.shared.wait_started(pool.helpers.len());
        Ok(pool)
    }

    /// Workers asked for (the calling thread included).
    pub fn workers_requested(&self) -> usize {
        self.requested
    }

    /// Workers granted (the calling thread included): helpers + 1.
    pub fn workers_granted(&self) -> usize {
        self.granted
    }

    /// Cores available to this process when the pool was built.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// `true` if more workers were granted than there are cores.
    pub fn is_oversubscribed(&self) -> bool {
        self.granted > self.cores
    }

    /// The configuration the pool was built with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Run `f(t)` for every `t` in `0..tasks`, each exactly once, on the calling
    /// thread and the helpers; returns when all have finished.
    ///
    /// The primitive under [`Pool::launch`]. A panic in `f` is returned as
    /// [`Error::KernelPanicked`] (remaining unclaimed tasks are skipped).
    /// More than `u32::MAX` tasks is an [`Error::BadArgument`].
    pub fn run_tasks(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) -> Result<LaunchStats> {
        if tasks == 0 {
            return Ok(LaunchStats::default());
        }
        if tasks > protocol::MAX_TASKS {
            return Err(Error::BadArgument(format!(
                "a launch can have at most {} tasks, not {tasks}: use a coarser grain",
                protocol::MAX_TASKS
            )));
        }
        if tasks == 1 || self.helpers.is_empty() || protocol::in_pool() {
            return run_inline(tasks, f);
        }
        let _serial = sync::lock(&self.shared.launch);
        let _inside = InPoolGuard::enter();
        let (stats, panicked) = self.shared.run_pooled(tasks, f);
        // The caller's tasks' streamed stores (each helper publishes its own
        // before it reports its visit done).
        packet::publish_streamed_stores();
        if panicked {
            return Err(Error::KernelPanicked(self.shared.take_panic()));
        }
        Ok(stats)
    }

    /// Run every work-group of `tiling`: the kernel for group `g` receives exactly
    /// `&mut out[tiling.span(g)]`, once. See the module docs for the grains.
    ///
    /// Errors: [`Error::ShapeMismatch`] if `out.len() != tiling.len()`,
    /// [`Error::KernelPanicked`] if the kernel panicked.
    pub fn launch(
        &self,
        tiling: &Tiling,
        grain: Grain,
        out: &mut [f32],
        kernel: &GroupFn<'_>,
    ) -> Result<LaunchStats> {
        if out.len() != tiling.len() {
            return Err(Error::ShapeMismatch(format!(
                "launch output has {} elements but the tiling covers {}",
                out.len(),
                tiling.len()
            )));
        }
        if grain == Grain::Caller {
            return run_on_caller(tiling, out, kernel);
        }
        let split = Split::new(grain, tiling.groups(), self.granted);
        let shared_out = SharedOut::new(out);
        let task = |t: usize| {
            for g in split.groups(t) {
                // SAFETY: `run_tasks` runs each task index at most once and returns
                // only after all of them finished; the tasks of `split` partition
                // the groups, so each group reaches `run_group` at most once while
                // `shared_out` lives; `out.len() == tiling.len()` was checked.
                unsafe { shared_out.run_group(tiling, g, kernel) };
            }
        };
        self.run_tasks(split.tasks(), &task)
    }
}

impl Drop for Pool {
    /// Stops and joins every helper thread.
    fn drop(&mut self) {
        self.shared.shut_down();
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("workers_requested", &self.requested)
            .field("workers_granted", &self.granted)
            .field("cores", &self.cores)
            .field("config", &self.config)
            .finish()
    }
}

/// Run all tasks on the calling thread, in order, stopping at the first panic.
fn run_inline(tasks: usize, f: &(dyn Fn(usize) + Sync)) -> Result<LaunchStats> {
    catch_unwind(AssertUnwindSafe(|| {
        (0..tasks).for_each(f);
        packet::publish_streamed_stores();
    }))
    .map(|()| LaunchStats::inline(tasks))
    .map_err(|p| Error::KernelPanicked(protocol::panic_message(p.as_ref())))
}

/// [`Grain::Caller`]: the whole launch as one task on the calling thread.
fn run_on_caller(tiling: &Tiling, out: &mut [f32], kernel: &GroupFn<'_>) -> Result<LaunchStats> {
    catch_unwind(AssertUnwindSafe(|| {
        simt::run_groups(tiling, 0..tiling.groups(), out, kernel)
    }))
    .map(|()| LaunchStats::inline(1))
    .map_err(|p| Error::KernelPanicked(protocol::panic_message(p.as_ref())))
}
