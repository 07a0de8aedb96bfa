//! Timing primitives: timed calls, and the medians and quantiles of their
//! times (from [`crate::stats`]).

use std::time::Instant;

pub use crate::stats::{median, quantile};

/// Times `reps` calls of `f` after `warmup` untimed calls; returns each call's µs.
pub fn time_calls(warmup: usize, reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..warmup {
        f();
    }
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// Times `samples` samples of `per_sample` back-to-back calls of `f` (after
/// `warmup` untimed calls); returns each sample's µs per call. For calls that
/// last well under a microsecond: a clock read costs about 35 ns on the
/// machines this was written on, which [`time_calls`] would add to every call.
pub fn time_samples(
    warmup: usize,
    samples: usize,
    per_sample: usize,
    mut f: impl FnMut(),
) -> Vec<f64> {
    for _ in 0..warmup {
        f();
    }
    let per_sample = per_sample.max(1);
    (0..samples)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..per_sample {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / per_sample as f64
        })
        .collect()
}

/// Shortest timed sample, µs: calls shorter than this are timed several to a
/// sample, back to back (`run`, and every round of `bench`). The clock costs
/// 20–35 ns a read and, on some hosts (a Firecracker guest's TSC clock), moves
/// in 10 ns steps: one step is 5 % of a 0.2 µs call timed alone.
pub const SAMPLE_US: f64 = 5.0;

/// Chooses calls per timing so one timed batch lasts at least `min_us` given a
/// single call of `single_us`; at least 1.
pub fn calls_for(single_us: f64, min_us: f64) -> usize {
    if single_us <= 0.0 {
        return 1000;
    }
    ((min_us / single_us).ceil() as usize).clamp(1, 100_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_time_their_calls_back_to_back() {
        let mut calls = 0;
        let t = time_samples(2, 5, 7, || calls += 1);
        assert_eq!(t.len(), 5);
        assert_eq!(calls, 2 + 5 * 7);
        assert!(t.iter().all(|&us| us >= 0.0));
        // A sample of zero calls is one call.
        let mut calls = 0;
        assert_eq!(time_samples(0, 3, 0, || calls += 1).len(), 3);
        assert_eq!(calls, 3);
        assert_eq!(calls_for(0.35, 5.0), 15);
        assert_eq!(calls_for(80.0, 5.0), 1);
    }
}
