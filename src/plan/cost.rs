//! The cost model: a prediction of one launch's time for a [`LaunchProfile`],
//! geometry, grain and worker count, without running it.
//!
//! ```text
//! time = launch overhead + smooth_max(parallel compute, memory traffic / bandwidth)
//! ```
//!
//! - **launch overhead**: the caller path costs [`CostModel::caller_launch_us`];
//!   a pool launch costs [`CostModel::pool_launch_us`] (publish, wake, collect).
//! - **compute of a group**: [`CostModel::per_group_us`] + its rows × (a fixed
//!   per-row cost + scheduled columns × a per-element cost). Both come from the
//!   operator's calibration at this width; the per-element cost depends on the
//!   number of packet accumulators the row reduction gets (1, 2, 4 or 8, fixed by
//!   `local`), so short `local`s pay the add latency. A tail packet (C not a
//!   multiple of W) costs [`KernelCost::tail_ns`]. Attention costs flops × a
//!   per-flop cost that depends on how many query rows a group shares its keys with.
//! - **parallel compute**: the grain cuts the groups into tasks (legacy: one chunk
//!   per worker; tasks of k groups; caller: one task); each task also pays
//!   [`CostModel::per_task_us`]. Tasks are list-scheduled onto the caller (ready
//!   at once) and the helpers (ready after [`CostModel::helper_arrival_us`]).
//! - **memory**: bytes over the bandwidth the busy workers draw at that much
//!   traffic (a measured curve: LLC, then DRAM, as the data grows); no bound
//!   when the data fits in the busy cores' private caches.
//!
//! [`CostModel::default`] holds rough, uncalibrated values; `taskgrain calibrate`
//! ([`super::calibrate`]) measures every constant on this machine.

use super::profile::{LaunchProfile, Work};
use crate::ops::{LaunchConfig, Op};
use crate::pool::Grain;
use serde::{Deserialize, Serialize};

/// The row operators in the order of [`WidthCost::rows`].
pub const ROW_OPS: [Op; 6] = [
    Op::RmsNorm,
    Op::LayerNorm,
    Op::MaskedSoftmax,
    Op::SwiGlu,
    Op::GeluResidual,
    Op::Rope,
];

/// Query-row blocks at which attention's per-flop cost is calibrated.
pub const ATTN_BLOCKS: [usize; 5] = [1, 2, 4, 8, 16];

/// The calibrated cost of one row operator's kernel at one width.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelCost {
    /// ns per scheduled element with 1, 2, 4 and 8 packet accumulators.
    pub elem_ns: [f64; 4],
    /// Fixed ns per row (reduction folds, square roots, divisions, loop set-up)
    /// with 1, 2, 4 and 8 packet accumulators: folding 8 accumulators costs
    /// more than folding one, which decides `local` on short rows.
    pub row_ns: [f64; 4],
    /// Extra ns of a masked tail packet in a row.
    pub tail_ns: f64,
}

/// The calibrated cost of the graph's own kernels (the launches of an unfused
/// chain, and fused launches that are not one of the seven operators) at one width.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphCost {
    /// Element-wise maps: ns per element per tensor read or written.
    pub map_tensor_ns: f64,
    /// Element-wise maps: ns per element per nominal flop of the expression.
    pub map_flop_ns: f64,
    /// Row softmax (two passes and a reduction): ns per element with 1, 2, 4
    /// and 8 packet accumulators. Measured for the graph's softmax itself: its
    /// sensitivity to the accumulator count is not the fused kernel's (at
    /// 129x768, W8, local 16 against the whole row: 1.07× for the graph's
    /// softmax, 1.00× for the fused kernel).
    pub softmax_elem_ns: [f64; 4],
    /// Attention scores and probs·v kernels: ns per flop for groups of 1 and of
    /// 16 query rows (interpolated in log2 between them).
    pub attn_flop_ns: [f64; 2],
}

impl GraphCost {
    /// Rough values for a width with `scale` = 8 / width.
    fn guess(scale: f64) -> GraphCost {
        GraphCost {
            map_tensor_ns: 0.1 * scale,
            map_flop_ns: 0.08 * scale,
            softmax_elem_ns: [1.0 * scale; 4],
            attn_flop_ns: [0.12 * scale, 0.08 * scale],
        }
    }

    /// Scores and probs·v ns per flop for groups of `rows` query rows.
    pub fn attn_ns(&self, rows: usize) -> f64 {
        let f = (rows.clamp(1, ATTN_BLOCKS[4]) as f64).log2() / 4.0;
        let [one, sixteen] = self.attn_flop_ns.map(|x| x.max(1e-6).ln());
        (one + f * (sixteen - one)).exp()
    }
}

/// The calibrated costs of every kernel at one packet width.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WidthCost {
    /// Packet width in lanes.
    pub width: usize,
    /// The six row operators, in [`ROW_OPS`] order.
    pub rows: [KernelCost; 6],
    /// Attention: ns per flop when a group owns 1, 2, 4, 8, 16 query rows ([`ATTN_BLOCKS`]).
    pub attn_flop_ns: [f64; 5],
    /// The graph's own kernels.
    pub graph: GraphCost,
}

impl WidthCost {
    /// Rough values for `width` (scaled from W8 guesses), used until calibrated.
    pub fn guess(width: usize) -> WidthCost {
        let s = 8.0 / width as f64;
        // ns per element at W8, with 8 accumulators
        let base = [0.12, 0.2, 0.75, 0.4, 0.6, 0.3];
        let red = [1u32, 2, 2, 0, 0, 0];
        let rows = std::array::from_fn(|i| {
            let e = base[i] * s;
            let slow = |a: f64| {
                if red[i] > 0 { (e * 4.0 / a).max(e) } else { e }
            };
            KernelCost {
                elem_ns: [slow(1.0), slow(2.0), slow(4.0), e],
                row_ns: [20.0 * red[i] as f64 + 5.0; 4],
                tail_ns: 2.0 * e * width as f64,
            }
        });
        WidthCost {
            width,
            rows,
            attn_flop_ns: [0.06, 0.04, 0.03, 0.025, 0.02].map(|x| x * s),
            graph: GraphCost::guess(s),
        }
    }

    /// The kernel cost of row operator `op` (`None` for attention).
    pub fn row(&self, op: Op) -> Option<&KernelCost> {
        ROW_OPS.iter().position(|&o| o == op).map(|i| &self.rows[i])
    }

    /// Attention ns per flop for a group of `rows` query rows (interpolated in log2).
    pub fn attn_ns(&self, rows: usize) -> f64 {
        let r = rows.clamp(1, ATTN_BLOCKS[4]) as f64;
        let x = r.log2();
        let i = (x.floor() as usize).min(3);
        let f = x - i as f64;
        self.attn_flop_ns[i] * (1.0 - f) + self.attn_flop_ns[i + 1] * f
    }
}

/// Streaming bandwidth at one amount of traffic per launch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    /// Bytes one launch moves (read + written).
    pub bytes: f64,
    /// GB/s one worker draws.
    pub one_gbps: f64,
    /// GB/s all workers draw together.
    pub all_gbps: f64,
}

/// Machine constants of the cost model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// A launch run by the caller (no pool), µs.
    pub caller_launch_us: f64,
    /// Publishing a launch to the pool and collecting it (hot helpers), µs.
    pub pool_launch_us: f64,
    /// Time until a hot (spinning) helper starts on a new launch, µs.
    pub helper_arrival_us: f64,
    /// Time until a parked helper starts, after an idle gap longer than the
    /// pool's spin, µs (reported; plans assume back-to-back launches).
    pub helper_arrival_cold_us: f64,
    /// Claiming and starting one task, µs.
    pub per_task_us: f64,
    /// Starting one work-group, µs.
    pub per_group_us: f64,
    /// Streaming bandwidth by traffic per launch, in increasing `bytes`: where
    /// the data comes from (LLC, DRAM, or a share of each) is not modelled but
    /// measured, since the share of the LLC a core gets on a shared machine is
    /// not what sysfs says. Between two points, time per byte is interpolated
    /// in log(bytes); beyond the ends, the end's bandwidth holds.
    pub bandwidth: Vec<Bandwidth>,
    /// Private cache bytes per core (L2): data that fits in the busy cores' L2 is
    /// not bandwidth-bound.
    pub private_cache_bytes: usize,
    /// Last-level cache bytes (shared), as the OS reports it.
    pub llc_bytes: usize,
    /// Per-width kernel costs.
    pub widths: Vec<WidthCost>,
    /// `true` when the constants were measured on this machine.
    pub calibrated: bool,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            caller_launch_us: 0.03,
            pool_launch_us: 1.0,
            helper_arrival_us: 0.5,
            helper_arrival_cold_us: 10.0,
            per_task_us: 0.03,
            per_group_us: 0.01,
            bandwidth: vec![
                Bandwidth {
                    bytes: (4 << 20) as f64,
                    one_gbps: 40.0,
                    all_gbps: 70.0,
                },
                Bandwidth {
                    bytes: (64 << 20) as f64,
                    one_gbps: 15.0,
                    all_gbps: 20.0,
                },
            ],
            private_cache_bytes: 1 << 20,
            llc_bytes: 32 << 20,
            widths: [4, 8, 16].map(WidthCost::guess).to_vec(),
            calibrated: false,
        }
    }
}

/// The number of packet accumulators a row reduction uses (as `simt::RowSchedule`).
pub fn accumulators(cols: usize, local: usize, width: usize) -> usize {
    let slots = local.div_ceil(width);
    if local >= cols {
        8
    } else {
        1usize << slots.trailing_zeros().min(3)
    }
}

/// The tasks a grain cuts `groups` groups into: (number of tasks, groups per full task).
pub fn task_split(groups: usize, grain: Grain, workers: usize) -> (usize, usize) {
    match grain {
        Grain::Caller => (1, groups),
        Grain::Legacy => {
            let n = workers.clamp(1, groups);
            (n, groups.div_ceil(n))
        }
        Grain::Tasks(k) => (groups.div_ceil(k.get()), k.get().min(groups)),
    }
}

/// Finish time of `n` tasks (all `d` µs except the last, `d_last`) list-scheduled
/// in order onto a caller ready at 0 and `p − 1` helpers ready at `arrival`.
fn schedule(n: usize, d: f64, d_last: f64, p: usize, arrival: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    if p <= 1 || n == 1 {
        return (n - 1) as f64 * d + d_last;
    }
    if n > 256 {
        // fluid approximation
        let sum = (n - 1) as f64 * d + d_last;
        if sum <= arrival {
            return sum;
        }
        return ((sum + arrival * (p - 1) as f64) / p as f64).max(d);
    }
    // Workers' ready times, on the stack for any realistic pool (planning a
    // launch allocates nothing).
    let mut small = [arrival; 64];
    let mut large = Vec::new();
    let ready: &mut [f64] = if p <= small.len() {
        &mut small[..p]
    } else {
        large.resize(p, arrival);
        &mut large
    };
    ready[0] = 0.0;
    let mut finish = 0.0f64;
    for i in 0..n {
        let w = (0..p)
            .min_by(|&a, &b| ready[a].total_cmp(&ready[b]))
            .expect("p ≥ 1");
        ready[w] += if i + 1 == n { d_last } else { d };
        finish = finish.max(ready[w]);
    }
    finish
}

/// Exponent of the smooth maximum in which a launch's compute and memory times
/// add up: they overlap, but not perfectly (1 would be a sum, ∞ a maximum).
/// Calibration solves the same formula for memory time.
pub const OVERLAP_EXPONENT: i32 = 4;

/// `(a^p + b^p)^(1/p)` with `p` = [`OVERLAP_EXPONENT`].
pub fn smooth_max(a: f64, b: f64) -> f64 {
    let p = OVERLAP_EXPONENT;
    (a.powi(p) + b.powi(p)).powf(1.0 / p as f64)
}

/// How the pieces of a prediction add up (for diagnostics and reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Breakdown {
    /// Launch overhead, µs.
    pub overhead_us: f64,
    /// Parallel compute (critical path), µs.
    pub compute_us: f64,
    /// Memory traffic over the available bandwidth, µs.
    pub memory_us: f64,
    /// Workers that run tasks.
    pub workers_used: usize,
    /// The prediction, µs.
    pub total_us: f64,
}

impl CostModel {
    /// (one worker, all workers) GB/s for a launch moving `bytes` (see
    /// [`CostModel::bandwidth`]).
    pub fn bandwidth_at(&self, bytes: f64) -> (f64, f64) {
        let curve = &self.bandwidth;
        let (Some(first), Some(last)) = (curve.first(), curve.last()) else {
            return (f64::INFINITY, f64::INFINITY);
        };
        if bytes <= first.bytes {
            return (first.one_gbps, first.all_gbps);
        }
        if bytes >= last.bytes {
            return (last.one_gbps, last.all_gbps);
        }
        let i = curve
            .partition_point(|b| b.bytes < bytes)
            .clamp(1, curve.len() - 1);
        let (lo, hi) = (curve[i - 1], curve[i]);
        let f = ((bytes / lo.bytes).ln() / (hi.bytes / lo.bytes).ln()).clamp(0.0, 1.0);
        // Time per byte is what adds up: interpolate the inverses.
        let mix = |a: f64, b: f64| 1.0 / ((1.0 - f) / a + f / b);
        (mix(lo.one_gbps, hi.one_gbps), mix(lo.all_gbps, hi.all_gbps))
    }

    /// The kernel costs at `width` (the nearest calibrated width, scaled, if absent).
    pub fn width_cost(&self, width: usize) -> WidthCost {
        if let Some(w) = self.widths.iter().find(|w| w.width == width) {
            return w.clone();
        }
        WidthCost::guess(width)
    }

    fn group_us(
        &self,
        p: &LaunchProfile,
        wc: &WidthCost,
        config: LaunchConfig,
        rows: usize,
    ) -> f64 {
        let width = wc.width;
        let row_ns = match p.work {
            Work::Rows {
                cols,
                reduce_passes,
                ..
            } => {
                let a = accumulators(cols, config.local, width);
                let ai = a.trailing_zeros() as usize;
                let (elem, fixed, tail) = match p.op.and_then(|op| wc.row(op)) {
                    Some(k) => (k.elem_ns[ai], k.row_ns[ai], k.tail_ns),
                    None => {
                        let g = &wc.graph;
                        let tensors = p.bytes_per_elem / 4.0;
                        let e = if reduce_passes > 0 {
                            // A softmax with its accumulators (and the cost of
                            // any prologue beyond an input and an output).
                            let extra = (tensors - 2.0).max(0.0) * g.map_tensor_ns
                                + (p.flops_per_elem - 12.0).max(0.0) * g.map_flop_ns;
                            g.softmax_elem_ns[ai] + extra
                        } else {
                            tensors * g.map_tensor_ns + p.flops_per_elem * g.map_flop_ns
                        };
                        let r = &wc.rows[0];
                        (
                            e,
                            r.row_ns[ai] * reduce_passes.max(1) as f64,
                            2.0 * e * width as f64,
                        )
                    }
                };
                // A `local` that is not a multiple of W leaves a masked packet per step.
                let steps = cols.div_ceil(config.local.max(1));
                let masked_steps = if config.local.is_multiple_of(width) {
                    usize::from(!cols.is_multiple_of(width))
                } else {
                    steps
                };
                fixed + cols as f64 * elem + masked_steps as f64 * tail
            }
            Work::Attention(a) => {
                let flops = 2.0 * (a.kv_len * (a.dk + a.dv)) as f64;
                match p.op {
                    Some(_) => flops * wc.attn_ns(rows),
                    None => p.flops_per_elem * a.dv as f64 * wc.graph.attn_ns(rows),
                }
            }
        };
        self.per_group_us + rows as f64 * row_ns / 1e3
    }

    /// Predicted µs of one call, with its breakdown.
    pub fn breakdown(
        &self,
        p: &LaunchProfile,
        width: usize,
        config: LaunchConfig,
        grain: Grain,
        workers: usize,
    ) -> Breakdown {
        let wc = self.width_cost(width);
        let block = config.block.clamp(1, p.segment_rows());
        let seg_rows = p.segment_rows();
        let per_seg = seg_rows.div_ceil(block);
        let groups = p.segments() * per_seg;
        let last_rows = seg_rows - (per_seg - 1) * block;
        let g_full = self.group_us(p, &wc, config, block);
        let g_last = self.group_us(p, &wc, config, last_rows);
        let workers = workers.max(1);
        let (tasks, k) = task_split(groups, grain, workers);
        // Group durations in grid order: segments repeat (full…, last); tasks cut that list.
        let total = p.segments() as f64 * ((per_seg - 1) as f64 * g_full + g_last);
        let pooled = tasks > 1 && workers > 1;
        let (overhead, compute, used) = if pooled {
            let (d, d_last) = if p.segments() == 1 {
                // Only the grid's last group is partial, and it ends the last
                // task: every other task is `k` full groups. (Averaging the groups
                // instead predicted 129 rows in blocks of 128 on two workers as
                // two equal halves.)
                let rest = groups.saturating_sub((tasks - 1) * k);
                let last = if rest == 0 {
                    0.0
                } else {
                    (rest - 1) as f64 * g_full + g_last
                };
                (k as f64 * g_full, last)
            } else {
                // Segments repeat (full…, last): tasks average over them.
                let avg = total / groups as f64;
                let d = k as f64 * avg;
                (d, (total - (tasks - 1) as f64 * d).max(0.0))
            };
            let (d, d_last) = (d + self.per_task_us, d_last + self.per_task_us);
            let p_used = workers.min(tasks);
            let t = schedule(tasks, d, d_last, p_used, self.helper_arrival_us);
            let used = if total <= self.helper_arrival_us {
                1
            } else {
                p_used
            };
            (self.pool_launch_us, t, used)
        } else {
            (self.caller_launch_us, total, 1)
        };
        let bytes = p.bytes();
        let bw = if bytes <= (self.private_cache_bytes * used) as f64 {
            f64::INFINITY
        } else {
            let f = if workers > 1 {
                (used - 1) as f64 / (workers - 1) as f64
            } else {
                0.0
            };
            let (one, all) = self.bandwidth_at(bytes);
            one + f * (all - one)
        };
        let memory = bytes / bw / 1e3;
        let body = smooth_max(compute, memory);
        Breakdown {
            overhead_us: overhead,
            compute_us: compute,
            memory_us: memory,
            workers_used: used,
            total_us: overhead + body,
        }
    }

    /// Predicted µs of one call.
    pub fn predict(
        &self,
        p: &LaunchProfile,
        width: usize,
        config: LaunchConfig,
        grain: Grain,
        workers: usize,
    ) -> f64 {
        self.breakdown(p, width, config, grain, workers).total_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Shape;

    #[test]
    fn schedule_matches_hand_cases() {
        // One worker runs everything.
        assert_eq!(schedule(4, 1.0, 1.0, 1, 0.0), 4.0);
        // Two workers, helper at once: half each.
        assert_eq!(schedule(4, 1.0, 1.0, 2, 0.0), 2.0);
        // A helper that arrives after the work is done does not help.
        assert_eq!(schedule(2, 1.0, 1.0, 2, 5.0), 2.0);
    }

    #[test]
    fn a_partial_last_group_is_not_averaged_into_the_others() {
        let m = CostModel::default();
        let p = LaunchProfile::for_op(Op::MaskedSoftmax, &Shape::rows(129, 768)).unwrap();
        let c = |block| LaunchConfig { local: 32, block };
        // 129 rows as 128 + 1 on two workers: the critical path is 128 rows,
        // no shorter than 129 rows in blocks of 33 (33, 33, 33, 30).
        let lopsided = m.breakdown(&p, 8, c(128), Grain::Legacy, 2);
        let even = m.breakdown(&p, 8, c(33), Grain::Tasks(std::num::NonZeroUsize::MIN), 2);
        let caller = m.breakdown(&p, 8, c(128), Grain::Caller, 2);
        assert!(
            lopsided.compute_us > 1.5 * even.compute_us,
            "{lopsided:?} vs {even:?}"
        );
        assert!(
            lopsided.compute_us > 0.95 * caller.compute_us,
            "{lopsided:?} vs {caller:?}"
        );
    }

    #[test]
    fn more_work_costs_more_and_caller_is_cheapest_for_tiny() {
        let m = CostModel::default();
        let small = LaunchProfile::for_op(Op::RmsNorm, &Shape::rows(2, 64)).unwrap();
        let big = LaunchProfile::for_op(Op::RmsNorm, &Shape::rows(2048, 1024)).unwrap();
        let c = LaunchConfig {
            local: 64,
            block: 1,
        };
        let caller = m.predict(&small, 8, c, Grain::Caller, 2);
        let legacy = m.predict(&small, 8, c, Grain::Legacy, 2);
        assert!(caller < legacy);
        let c = LaunchConfig {
            local: 1024,
            block: 64,
        };
        assert!(m.predict(&big, 8, c, Grain::Legacy, 2) < m.predict(&big, 8, c, Grain::Caller, 2));
        assert!(m.predict(&big, 8, c, Grain::Legacy, 2) > caller);
    }
}
