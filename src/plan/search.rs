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
use crate::stats::median;

/// Times `calls` calls of a launch with this geometry and grain and returns
/// µs per call (the runtime's is the median of the calls, each timed alone).
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
    Ok(times.iter().map(|t| median(t)).collect())
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

/// Rounds of the first, unpaired pass of [`refine`] over every candidate.
const REFINE_SCREEN_ROUNDS: usize = 3;

/// Alternatives [`refine`] times against the model's choice, side by side.
const REFINE_FINALISTS: usize = 5;

/// Paired rounds of [`refine`]'s second pass.
const REFINE_PAIRED_ROUNDS: usize = 9;

/// An alternative replaces the model's choice only if its median paired ratio
/// to it is below this (noise must not make the plan flap); a move from the
/// caller to the pool needs [`REFINE_HAND_OFF_MARGIN`].
const REFINE_MARGIN: f64 = 0.98;

/// The ratio below which an alternative that hands work to the pool's helpers
/// replaces a model's choice that runs on the caller alone. Only the pool's
/// plans carry the risk of helpers that arrive late, which comes and goes
/// with the host's phase, so a pooled plan a few percent faster in the
/// refinement's seconds can be slower when the launch next runs. At 0.98,
/// refinement took the pool for the unfused masked_softmax 3x1024 (~2 µs) in
/// 6 bench runs of 9 and for layernorm 17x66 (0.6 µs) in 4 of 17, one of
/// which read 1.31 of the oracle's caller plan; at 0.95 layernorm stayed on
/// the caller in all 17, and masked_softmax in 8 of 9, where it ran 10 %
/// faster (median 1.88 against 2.08 µs), 3–13 % ahead of the oracle's
/// pooled plans in 7. The price: fused rmsnorm 64x256, whose two legacy chunks
/// mostly run 30 % faster than the caller, stayed on the caller in 2 runs of
/// 8 (at 0.98: 1), one of which read 1.12 of the oracle
/// (AMD EPYC, 2 workers, 2026-12-06). A launch this margin keeps on the
/// caller was at most 5 % behind the pooled plan in refinement's own
/// measurement.
const REFINE_HAND_OFF_MARGIN: f64 = 0.95;

/// Refinement: `cands[0]` is the model's choice; `hands_off[i]` says whether
/// candidate `i` runs on the pool's helpers (more than one task) rather than
/// on the caller alone. Every candidate is timed in 3 interleaved rounds of
/// about 200 µs per measurement; the 5 fastest alternatives then run side by
/// side with the model's choice in 9 rounds (alternately first and second).
/// An alternative qualifies if its median ratio to the model's choice is
/// below 0.98, or below 0.95 where it hands off work that the model's choice
/// kept on the caller (only the pool's plans carry the risk of helpers that
/// arrive late, which comes and goes with the host); the qualifying one with
/// the lowest ratio wins, otherwise the model's choice stays.
///
/// The pairs are what makes it work on a host whose speed changes within
/// milliseconds (a busy neighbour on the same physical core): two launches
/// timed back to back see the same machine, two medians of rounds spread over
/// tens of milliseconds need not. Unpaired medians of 7 rounds kept the model's
/// plan of masked_softmax 257×1538 in 5 of 6 trials although three
/// alternatives ran 6–9 % faster side by side with it; the paired pass found
/// one of them in 5 trials of 5. Shorter measurements (50 µs: one call of a
/// 90 µs launch) kept plans 10–20 % off the oracle's.
pub fn refine(
    cands: &[Candidate],
    predicted: &[f64],
    hands_off: &[bool],
    measure: &mut Measure<'_>,
) -> Result<Found> {
    assert!(!cands.is_empty(), "refinement needs candidates");
    assert_eq!(cands.len(), predicted.len());
    assert_eq!(cands.len(), hands_off.len());
    let budget_us = 200.0;
    let calls: Vec<usize> = predicted
        .iter()
        .map(|&p| calls_for(p, budget_us, 200))
        .collect();
    let screened = rounds(cands, predicted, REFINE_SCREEN_ROUNDS, budget_us, measure)?;
    let mut finalists: Vec<usize> = (1..cands.len()).collect();
    finalists.sort_by(|&a, &b| screened[a].total_cmp(&screened[b]));
    finalists.truncate(REFINE_FINALISTS);
    let mut time = |i: usize| {
        let (c, g) = cands[i];
        measure(c, g, calls[i])
    };
    // ratios[k]: finalist k's time over the model's, one per round; `model`:
    // the model's own times in those rounds.
    let mut ratios: Vec<Vec<f64>> = vec![Vec::with_capacity(REFINE_PAIRED_ROUNDS); finalists.len()];
    let mut model = Vec::new();
    for r in 0..REFINE_PAIRED_ROUNDS {
        for j in 0..finalists.len() {
            let k = (j + r) % finalists.len();
            let (base, alt) = if r % 2 == 0 {
                let base = time(0)?;
                (base, time(finalists[k])?)
            } else {
                let alt = time(finalists[k])?;
                (time(0)?, alt)
            };
            ratios[k].push(alt / base);
            model.push(base);
        }
    }
    let margin = |i: usize| {
        if hands_off[i] && !hands_off[0] {
            REFINE_HAND_OFF_MARGIN
        } else {
            REFINE_MARGIN
        }
    };
    let best = (0..finalists.len())
        .map(|k| (k, median(&ratios[k])))
        .filter(|&(k, ratio)| ratio < margin(finalists[k]))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let (pick, measured_us) = match best {
        Some((k, ratio)) => {
            let i = finalists[k];
            let model_us = median(&model);
            (i, model_us * ratio)
        }
        None if model.is_empty() => (0, screened[0]),
        None => (0, median(&model)),
    };
    Ok(Found {
        candidate: cands[pick],
        measured_us,
        evaluated: cands.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refinement over candidates whose true times are `truth` (the model's
    /// choice first), each measurement multiplied by the host's speed then;
    /// candidate `i` hands work to the pool if `pooled[i]`.
    fn refine_pooled(truth: &[f64], pooled: &[bool], mut slowdown: impl FnMut() -> f64) -> usize {
        let cands: Vec<Candidate> = (1..=truth.len())
            .map(|block| (LaunchConfig { local: 8, block }, Grain::Caller))
            .collect();
        let mut measure = |c: LaunchConfig, _: Grain, _: usize| Ok(truth[c.block - 1] * slowdown());
        let found = refine(&cands, truth, pooled, &mut measure).expect("measured");
        found.candidate.0.block - 1
    }

    /// [`refine_pooled`] where every candidate runs on the caller.
    fn refine_on(truth: &[f64], slowdown: impl FnMut() -> f64) -> usize {
        refine_pooled(truth, &vec![false; truth.len()], slowdown)
    }

    #[test]
    fn refinement_keeps_the_model_unless_an_alternative_is_clearly_faster() {
        assert_eq!(refine_on(&[100.0], || 1.0), 0);
        assert_eq!(refine_on(&[100.0, 99.0, 105.0], || 1.0), 0);
        assert_eq!(refine_on(&[100.0, 99.0, 90.0, 105.0], || 1.0), 2);
        assert_eq!(refine_on(&[100.0, 120.0, 95.0, 90.0, 130.0], || 1.0), 3);
    }

    #[test]
    fn moving_a_caller_launch_to_the_pool_takes_the_larger_margin() {
        let quiet = || 1.0;
        // The model's choice on the caller: a pooled plan 4 % faster does not
        // replace it, one 7 % faster does.
        assert_eq!(refine_pooled(&[100.0, 96.0], &[false, true], quiet), 0);
        assert_eq!(refine_pooled(&[100.0, 93.0], &[false, true], quiet), 1);
        // A caller plan 3 % faster qualifies where a pooled one 4 % faster
        // does not.
        let truth = [100.0, 96.0, 97.0];
        assert_eq!(refine_pooled(&truth, &[false, true, false], quiet), 2);
        // The model's choice on the pool: every alternative needs 2 %.
        assert_eq!(refine_pooled(&[100.0, 97.0], &[true, false], quiet), 1);
        assert_eq!(refine_pooled(&[100.0, 97.0], &[true, true], quiet), 1);
        assert_eq!(refine_pooled(&[100.0, 99.0], &[true, false], quiet), 0);
    }

    #[test]
    fn refinement_sees_through_a_host_whose_speed_changes() {
        // The host runs at full speed or 1.9× slower (a busy neighbour on its
        // core, as measured on a 2-vCPU KVM guest), switching with probability
        // 1/8 before each measurement. Unpaired medians picked slower plans
        // than the model's in 14 of these 200 seeds.
        let truth = [
            100.0, 108.0, 104.0, 93.0, 101.0, 110.0, 100.5, 97.0, 103.0, 99.5, 106.0, 102.0,
        ];
        let mut fastest = 0;
        for seed in 0..200u64 {
            let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut slow = false;
            let pick = refine_on(&truth, || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                if state.is_multiple_of(8) {
                    slow = !slow;
                }
                if slow { 1.9 } else { 1.0 }
            });
            assert!(
                truth[pick] <= truth[0],
                "seed {seed}: picked {pick}, slower than the model's plan"
            );
            fastest += usize::from(pick == 3);
        }
        assert!(
            fastest >= 150,
            "the fastest plan won {fastest} of 200 seeds"
        );
    }
}
