//! The statistics of the report: per-round p50s, their median, and paired ratios.
//!
//! A round times every candidate of a row, interleaved; its p50 is the median
//! call time of that round. The table's time is the median of the round p50s.
//! The paired ratio of a round is the numerator's p50 over the denominator's p50
//! *in that round* (both measured under the same conditions), and the table
//! shows the median of those ratios with their min–max. Ratios are never
//! averaged across rows.

use super::model::RatioSummary;
use crate::bench::timing::median;

/// The per-round ratios `num[r] / den[r]`. Panics if the lengths differ.
pub fn paired_ratios(num: &[f64], den: &[f64]) -> Vec<f64> {
    assert_eq!(
        num.len(),
        den.len(),
        "paired series must have one value per round"
    );
    num.iter().zip(den).map(|(n, d)| n / d).collect()
}

/// Median and min–max of per-round ratios; all `None` for no rounds.
pub fn summarize(ratios: &[f64]) -> RatioSummary {
    if ratios.is_empty() {
        return RatioSummary {
            median: None,
            min: None,
            max: None,
        };
    }
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    RatioSummary {
        median: Some(median(ratios)),
        min: Some(min),
        max: Some(max),
    }
}

/// The table time of a candidate: the median of its round p50s.
pub fn table_time(round_p50s: &[f64]) -> Option<f64> {
    (!round_p50s.is_empty()).then(|| median(round_p50s))
}

/// The candidate order of round `round`: `0..n` rotated left by `round`.
pub fn rotation(n: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |j| (j + round) % n.max(1))
}

/// The samples of each turn when a round's `reps` samples per candidate are taken
/// in turns of at most `per_turn` (at least 1): full turns, then the rest.
pub fn turns(reps: usize, per_turn: usize) -> impl Iterator<Item = usize> {
    let per_turn = per_turn.max(1);
    (0..reps.div_ceil(per_turn)).map(move |t| per_turn.min(reps - t * per_turn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_share_out_every_call_of_a_round() {
        for (reps, per_turn, want) in [
            (50, 10, vec![10, 10, 10, 10, 10]),
            (25, 10, vec![10, 10, 5]),
            (7, 10, vec![7]),
            (3, 1, vec![1, 1, 1]),
            (4, 0, vec![1, 1, 1, 1]),
            (0, 10, vec![]),
        ] {
            assert_eq!(
                turns(reps, per_turn).collect::<Vec<_>>(),
                want,
                "{reps} by {per_turn}"
            );
        }
    }

    #[test]
    fn paired_ratio_is_per_round_not_ratio_of_medians() {
        // The numerator is exactly half the denominator in every round, while
        // the rounds themselves drift by 10×: the paired ratio sees 0.5 in
        // every round; a ratio of medians would too here, but the range must be
        // exactly [0.5, 0.5].
        let den = [10.0, 100.0, 1000.0, 20.0, 200.0];
        let num: Vec<f64> = den.iter().map(|d| d / 2.0).collect();
        let s = summarize(&paired_ratios(&num, &den));
        assert_eq!(s.median, Some(0.5));
        assert_eq!(s.min, Some(0.5));
        assert_eq!(s.max, Some(0.5));
    }

    #[test]
    fn paired_ratio_differs_from_ratio_of_medians() {
        let num = [1.0, 2.0, 9.0];
        let den = [2.0, 1.0, 3.0];
        let r = paired_ratios(&num, &den);
        assert_eq!(r, vec![0.5, 2.0, 3.0]);
        let s = summarize(&r);
        assert_eq!(s.median, Some(2.0));
        assert_eq!((s.min, s.max), (Some(0.5), Some(3.0)));
        // median(num) / median(den) = 2 / 2 = 1: not what the report shows.
        assert_eq!(table_time(&num).unwrap() / table_time(&den).unwrap(), 1.0);
    }

    #[test]
    fn even_round_count_takes_mean_of_middle_pair() {
        let s = summarize(&[1.0, 4.0, 2.0, 3.0]);
        assert_eq!(s.median, Some(2.5));
        assert_eq!((s.min, s.max), (Some(1.0), Some(4.0)));
    }

    #[test]
    fn empty_series_has_no_summary() {
        let s = summarize(&[]);
        assert_eq!((s.median, s.min, s.max), (None, None, None));
        assert_eq!(table_time(&[]), None);
    }

    #[test]
    fn rotation_visits_every_candidate_once_and_moves_the_first() {
        for round in 0..5 {
            let mut v: Vec<usize> = rotation(4, round).collect();
            assert_eq!(v[0], round % 4);
            v.sort();
            assert_eq!(v, vec![0, 1, 2, 3]);
        }
        assert_eq!(rotation(0, 3).count(), 0);
    }
}
