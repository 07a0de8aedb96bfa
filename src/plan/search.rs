//! Measured searches: the oracle (exhaustive over the joint space, pruned only of
//! configurations that run identical code) and run-time refinement (a few
//! alternatives near the model's choice). Both take a `measure` callback so that
//! the planner never needs a runtime or inputs of its own: whoever owns the data
//! (the runtime, the bench harness, fusion's executor) times the launches.

use super::cost::accumulators;
use super::profile::{LaunchProfile, Work};
use crate::error::Result;
use crate::ops::LaunchConfig;
use crate::pool::Grain;

/// Times `calls` back-to-back calls of a launch with this geometry and grain and
/// returns µs per call (the callee may use a median of its own).
pub type Measure<'a> = dyn FnMut(LaunchConfig, Grain, usize) -> Result<f64> + 'a;

/// A candidate launch.
pub type Candidate = (LaunchConfig, Grain);

/// `local` candidates: W, 2W, 4W, … up to the row (rounded up to W); attention:
/// the one its head dimensions fix.
pub fn local_candidates(p: &LaunchProfile, width: usize, attention_local: usize) -> Vec<usize> {
    match p.work {
        Work::Rows { cols, .. } => {
            let row = cols.div_ceil(width) * width;
            let mut v = Vec::new();
            let mut l = width;
            while l < row {
                v.push(l);
                l *= 2;
            }
            v.push(row);
            v
        }
        Work::Attention(_) => vec![attention_local],
    }
}

/// `local`s that run distinct code: for a `local` that is a multiple of W the
/// packets of a row are visited contiguously and only the number of packet
/// accumulators (1, 2, 4 or 8) differs, so one representative per accumulator
/// count is kept (the largest, i.e. the whole row for 8).
pub fn distinct_locals(p: &LaunchProfile, width: usize, locals: &[usize]) -> Vec<usize> {
    let Work::Rows { cols, .. } = p.work else {
        return locals.to_vec();
    };
    let mut seen: Vec<(usize, bool)> = Vec::new();
    let mut out: Vec<usize> = Vec::new();
    for &l in locals.iter().rev() {
        let key = (accumulators(cols, l, width), l.is_multiple_of(width));
        if !seen.contains(&key) {
            seen.push(key);
            out.push(l);
        }
    }
    out.reverse();
    out
}

/// `block` candidates: 1, 2, 4, … up to the rows of a segment, and that many.
pub fn block_candidates(p: &LaunchProfile) -> Vec<usize> {
    let rows = p.segment_rows();
    let mut v = Vec::new();
    let mut b = 1;
    while b < rows {
        v.push(b);
        b *= 2;
    }
    v.push(rows);
    v
}

/// Grain candidates for `groups` groups: legacy, caller and tasks of 1, 2, 4, …
/// groups while that makes more than one task (one task is the caller path).
pub fn grain_candidates(groups: usize) -> Vec<Grain> {
    let mut v = vec![Grain::Legacy, Grain::Caller];
    let mut k = 1;
    while k < groups {
        v.extend(Grain::tasks(k));
        k *= 2;
    }
    v
}

/// Calls per measurement so one measurement lasts about `budget_us`.
fn calls_for(predicted_us: f64, budget_us: f64, max: usize) -> usize {
    ((budget_us / predicted_us.max(0.05)).ceil() as usize).clamp(1, max)
}

/// Interleaved rounds over `cands`: returns each candidate's median µs per call.
fn rounds(
    cands: &[Candidate],
    predicted: &[f64],
    rounds: usize,
    budget_us: f64,
    measure: &mut Measure<'_>,
) -> Result<Vec<f64>> {
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); cands.len()];
    for r in 0..rounds {
        for j in 0..cands.len() {
            let i = (j + r) % cands.len();
            let (c, g) = cands[i];
            let calls = calls_for(predicted[i], budget_us, 200);
            times[i].push(measure(c, g, calls)?);
        }
    }
    Ok(times
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            let n = t.len();
            if n % 2 == 1 {
                t[n / 2]
            } else {
                0.5 * (t[n / 2 - 1] + t[n / 2])
            }
        })
        .collect())
}

/// The result of a measured search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Found {
    /// The winning launch.
    pub candidate: Candidate,
    /// Its measured µs per call (median of the final rounds).
    pub measured_us: f64,
    /// Candidates measured.
    pub evaluated: usize,
}

/// Successive halving over `cands` (with the model's predictions, used only to
/// size the measurements): every candidate is measured once, the best 12 again
/// in 3 interleaved rounds, the best 3 in 5 more; the fastest median wins.
pub fn successive_halving(
    cands: &[Candidate],
    predicted: &[f64],
    measure: &mut Measure<'_>,
) -> Result<Found> {
    assert!(!cands.is_empty(), "a search needs candidates");
    assert_eq!(cands.len(), predicted.len());
    let first = rounds(cands, predicted, 1, 20.0, measure)?;
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&a, &b| first[a].total_cmp(&first[b]));
    order.truncate(12);
    let sub: Vec<Candidate> = order.iter().map(|&i| cands[i]).collect();
    let sub_p: Vec<f64> = order.iter().map(|&i| first[i]).collect();
    let second = rounds(&sub, &sub_p, 3, 40.0, measure)?;
    let mut order2: Vec<usize> = (0..sub.len()).collect();
    order2.sort_by(|&a, &b| second[a].total_cmp(&second[b]));
    order2.truncate(3);
    let fin: Vec<Candidate> = order2.iter().map(|&i| sub[i]).collect();
    let fin_p: Vec<f64> = order2.iter().map(|&i| second[i]).collect();
    let third = rounds(&fin, &fin_p, 5, 100.0, measure)?;
    let best = (0..fin.len())
        .min_by(|&a, &b| third[a].total_cmp(&third[b]))
        .expect("non-empty");
    Ok(Found {
        candidate: fin[best],
        measured_us: third[best],
        evaluated: cands.len(),
    })
}

/// Refinement: `cands[0]` is the model's choice; the others are measured against
/// it in 7 interleaved rounds of about 200 µs each and the fastest median wins,
/// but the model's choice is kept unless another is faster by more than 2 %
/// (noise must not make the plan flap). Shorter measurements (5 rounds of
/// 50 µs: one call of a 90 µs launch) kept plans 10–20 % off the oracle's.
pub fn refine(cands: &[Candidate], predicted: &[f64], measure: &mut Measure<'_>) -> Result<Found> {
    assert!(!cands.is_empty(), "refinement needs candidates");
    let t = rounds(cands, predicted, 7, 200.0, measure)?;
    let best = (0..cands.len())
        .min_by(|&a, &b| t[a].total_cmp(&t[b]))
        .expect("non-empty");
    let pick = if t[best] < 0.98 * t[0] { best } else { 0 };
    Ok(Found {
        candidate: cands[pick],
        measured_us: t[pick],
        evaluated: cands.len(),
    })
}
