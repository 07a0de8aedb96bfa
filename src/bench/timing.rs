//! Timing primitives: timed calls, medians and percentiles.

use std::time::Instant;

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

/// The `q`-quantile (0..=1) of `v` by the nearest-rank rule; NaN for an empty slice.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// The median of `v` (the mean of the two middle values for an even count).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        0.5 * (s[n / 2 - 1] + s[n / 2])
    }
}

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
    fn medians_and_quantiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(
            quantile(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.9),
            9.0
        );
        assert!(median(&[]).is_nan());
    }

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
