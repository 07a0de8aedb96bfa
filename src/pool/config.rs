//! What a pool is asked for: workers, oversubscription, pinning, spinning.

use std::time::Duration;

/// How to build a [`Pool`](super::Pool). Tunables with defaults a caller can override.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Workers requested, the calling thread included (must be ≥ 1). The pool
    /// grants `min(workers, available cores)` unless `oversubscribe` is set.
    pub workers: usize,
    /// Grant `workers` even when it exceeds the available cores.
    pub oversubscribe: bool,
    /// Pin helper `i` to the `(i + 1) % cores`-th allowed core (Linux only; the
    /// caller's thread is never pinned). Applies only when the pool is not
    /// oversubscribed. See the `pool` module docs for why.
    pub pin: bool,
    /// How long an idle helper spins, looking for the next launch, before it
    /// parks in the kernel. When oversubscribed, helpers yield instead of
    /// spinning and park after a few yields whatever this says.
    pub spin: Duration,
}

/// Default spin before a helper parks: long enough to cover back-to-back
/// launches separated by a little caller work, short enough that an idle pool
/// costs nothing measurable (one launch then a second of idling ≈ 0.01 % CPU).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(100);

impl Default for PoolConfig {
    /// Workers = available cores, no oversubscription, pinning on, [`DEFAULT_SPIN`].
    fn default() -> Self {
        PoolConfig {
            workers: available_cores(),
            oversubscribe: false,
            pin: true,
            spin: DEFAULT_SPIN,
        }
    }
}

impl PoolConfig {
    /// The default configuration with `workers` requested.
    pub fn with_workers(workers: usize) -> Self {
        PoolConfig {
            workers,
            ..PoolConfig::default()
        }
    }
}

/// Cores this process may run on (`std::thread::available_parallelism`, 1 if unknown).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
