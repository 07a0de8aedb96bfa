//! The cost model: a prediction of one call's time for an operator, shape,
//! geometry, grain and worker count, without running it.
//!
//! time = launch overhead + max(compute / parallelism, memory traffic / bandwidth)
//!
//! - launch overhead: caller ≈ nothing; the pool pays a publish/wake cost plus a
//!   small cost per task; a helper joins only after it has woken.
//! - compute: packets executed (masked packets cost more; a `local` that is not a
//!   multiple of W wastes lanes) × per-packet cost of the operator, plus a
//!   per-row reduction latency, plus a per-group cost. Reductions with fewer than
//!   four packet accumulators are latency-bound.
//! - parallelism: the most groups any one worker runs, given how the grain cuts the
//!   grid (legacy chunks, dynamic tasks, or the caller alone).
//! - memory: bytes moved over the bandwidth that the granted workers can draw
//!   (one core already draws most of it), or cache bandwidth when the data fits in L2.
//!
//! The constants are [`CostModel::default`] values measured on a Zen 5 core; they
//! are scaled per width and can be replaced by a calibration.

use crate::ops::{LaunchConfig, Op, Shape, attention};
use crate::pool::Grain;
use serde::{Deserialize, Serialize};

/// Machine constants of the cost model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// A launch run by the caller, µs.
    pub caller_launch_us: f64,
    /// Publishing a launch to the pool and collecting it, µs.
    pub pool_launch_us: f64,
    /// Time until a hot helper starts working on a new launch, µs.
    pub helper_arrival_us: f64,
    /// Claiming and starting one task, µs.
    pub per_task_us: f64,
    /// Starting one work-group (dispatch into the kernel), µs.
    pub per_group_us: f64,
    /// Cost of one full W8 packet per operator (ns), in operator order of [`Op::ALL`];
    /// for rope one packet covers a rotation pair of packets.
    pub packet_ns: [f64; 7],
    /// Extra cost of a masked packet relative to a full one (factor).
    pub masked_factor: f64,
    /// Latency of one row's reduction (reductions, square roots, divisions), ns.
    pub row_reduce_ns: f64,
    /// Memory bandwidth one core draws, GB/s.
    pub bw_one_gbps: f64,
    /// Memory bandwidth all cores draw together, GB/s.
    pub bw_all_gbps: f64,
    /// Bytes that stay in a core's caches between calls.
    pub cache_bytes: usize,
    /// Attention throughput of one core at W8, GFLOP/s.
    pub attention_gflops: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            caller_launch_us: 0.03,
            pool_launch_us: 0.4,
            helper_arrival_us: 0.3,
            per_task_us: 0.02,
            per_group_us: 0.006,
            // rmsnorm, layernorm, masked_softmax, swiglu, gelu_residual, rope, attention
            packet_ns: [0.9, 1.5, 6.0, 3.0, 5.0, 1.2, 0.0],
            masked_factor: 2.0,
            row_reduce_ns: 25.0,
            bw_one_gbps: 30.0,
            bw_all_gbps: 40.0,
            cache_bytes: 2 << 20,
            attention_gflops: 60.0,
        }
    }
}

fn op_index(op: Op) -> usize {
    Op::ALL
        .iter()
        .position(|&o| o == op)
        .expect("every op is in ALL")
}

/// Passes over the row that an operator's reduction makes (0 for element-wise).
fn reduce_passes(op: Op) -> f64 {
    match op {
        Op::RmsNorm => 1.0,
        Op::LayerNorm => 2.0,
        Op::MaskedSoftmax => 2.0,
        _ => 0.0,
    }
}

/// Work of one group, µs, on one worker (compute only).
fn group_compute_us(
    m: &CostModel,
    op: Op,
    shape: &Shape,
    width: usize,
    config: LaunchConfig,
    rows_in_group: usize,
) -> f64 {
    let w = width as f64;
    match *shape {
        Shape::Rows { cols, .. } => {
            let sched = crate::ops::schedule_cols(op, cols);
            let local = config.local;
            let slots = local.div_ceil(width);
            let steps = sched.div_ceil(local);
            let per_step_full = if local.is_multiple_of(width) {
                slots
            } else {
                slots - 1
            };
            let mut full = steps * per_step_full;
            let mut masked = steps * slots - full;
            // The last step may be short of packets; count what the row really needs.
            let needed = sched.div_ceil(width);
            if full + masked > needed && local.is_multiple_of(width) {
                full = sched / width;
                masked = needed - full;
            }
            // Per-packet costs are W8 figures; per element the cost is about width-independent.
            let packet = m.packet_ns[op_index(op)] * w / 8.0;
            let mut row_ns = (full as f64 + masked as f64 * m.masked_factor) * packet;
            // Reductions with few accumulators are bound by the add latency (4 cycles).
            let acc = if local >= sched {
                8
            } else {
                1usize << slots.trailing_zeros().min(3)
            };
            if reduce_passes(op) > 0.0 && acc < 4 {
                let latency_ns = 1.2 * reduce_passes(op) * (full + masked) as f64 / acc as f64;
                row_ns = row_ns.max(latency_ns);
            }
            row_ns += m.row_reduce_ns * (reduce_passes(op) > 0.0) as usize as f64;
            m.per_group_us + rows_in_group as f64 * row_ns / 1e3
        }
        Shape::Attention(a) => {
            let flops_per_row = a.kv_len as f64 * 2.0 * (a.dk + a.dv) as f64;
            let gflops = m.attention_gflops * (w / 8.0).min(2.0);
            // Small query blocks reload the keys for every block.
            let reuse = (rows_in_group as f64).min(8.0) / 8.0;
            let eff = 0.5 + 0.5 * reuse;
            m.per_group_us + rows_in_group as f64 * flops_per_row / (gflops * eff) / 1e3
        }
    }
}

impl CostModel {
    /// Predicted µs of one call.
    pub fn predict(
        &self,
        op: Op,
        shape: &Shape,
        width: usize,
        config: LaunchConfig,
        grain: Grain,
        workers: usize,
    ) -> f64 {
        let (segments, seg_rows, bytes) = match *shape {
            Shape::Rows { rows, .. } => (1, rows, crate::ops::traffic_bytes(op, shape)),
            Shape::Attention(a) => (
                a.batch * a.q_heads,
                a.q_len,
                crate::ops::traffic_bytes(op, shape),
            ),
        };
        let block = config.block.max(1);
        let per_seg = seg_rows.div_ceil(block);
        let groups = segments * per_seg;
        let last_rows = seg_rows - (per_seg - 1) * block;
        let full_group = group_compute_us(self, op, shape, width, config, block.min(seg_rows));
        let last_group = group_compute_us(self, op, shape, width, config, last_rows);
        let total_compute = segments as f64 * ((per_seg - 1) as f64 * full_group + last_group);

        let workers = workers.max(1);
        let (tasks, per_task_groups) = match grain {
            Grain::Caller => (1, groups),
            Grain::Legacy => (workers.min(groups), groups.div_ceil(workers.min(groups))),
            Grain::Tasks(k) => (groups.div_ceil(k.get()), k.get().min(groups)),
        };
        let pooled = tasks > 1 && workers > 1;
        let overhead = if pooled {
            self.pool_launch_us + tasks as f64 * self.per_task_us
        } else {
            self.caller_launch_us
        };
        let compute = if pooled {
            let active = workers.min(tasks) as f64;
            // The caller starts at once; helpers arrive later, so very short launches
            // get little help.
            let balanced = (total_compute + self.helper_arrival_us * (active - 1.0)) / active;
            let biggest_task = per_task_groups as f64 * full_group;
            balanced.max(biggest_task)
        } else {
            total_compute
        };
        let used = if pooled { workers.min(tasks) } else { 1 };
        let bw = if bytes <= self.cache_bytes * used {
            // cache-resident: bandwidth is not the limit
            f64::INFINITY
        } else if used > 1 {
            self.bw_all_gbps
        } else {
            self.bw_one_gbps
        };
        let memory = bytes as f64 / bw / 1e3;
        overhead + compute.max(memory)
    }

    /// The geometry that `whole` uses.
    pub fn whole_config(op: Op, shape: &Shape, width: usize) -> LaunchConfig {
        match *shape {
            Shape::Rows { cols, .. } => {
                let sched = crate::ops::schedule_cols(op, cols);
                LaunchConfig {
                    local: sched.div_ceil(width) * width,
                    block: 1,
                }
            }
            Shape::Attention(a) => LaunchConfig {
                local: attention::local_for(&a, width),
                block: 1,
            },
        }
    }
}
