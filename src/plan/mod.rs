//! The planner: which launch geometry to run for an operator and shape.
//!
//! [`cost`] predicts a call's time; [`strategy`] turns predictions into the seed's
//! candidate strategies; [`default_config`] and [`default_grain`] are the quick
//! heuristics the runtime falls back on.

pub mod cost;
pub mod strategy;

pub use cost::CostModel;
pub use strategy::{Plan, Planner, Strategy};

use crate::ops::{LaunchConfig, Op, Shape, attention};
use crate::pool::Grain;
use crate::simt::Tiling;

/// Elements a work-group should own so that per-group overhead stays small.
const TARGET_GROUP_ELEMS: usize = 16 * 1024;

/// A good single-worker geometry: `local` covering the whole row (so every row
/// reduction uses 8 packet accumulators and the packets are contiguous), and
/// `block` rows making a group of about 16 K elements.
pub fn default_config(op: Op, shape: &Shape, width: usize) -> LaunchConfig {
    match *shape {
        Shape::Rows { rows, cols } => {
            let sched_cols = crate::ops::schedule_cols(op, cols);
            LaunchConfig {
                local: sched_cols.div_ceil(width).max(1) * width,
                block: (TARGET_GROUP_ELEMS / cols.max(1)).clamp(1, rows),
            }
        }
        Shape::Attention(a) => LaunchConfig {
            local: attention::local_for(&a, width),
            block: a.q_len.min(16),
        },
    }
}

/// Below this many output elements a launch runs on the caller: waking a helper
/// costs more than the work.
const CALLER_ONLY_ELEMS: usize = 32 * 1024;

/// A simple grain: the caller for small launches, otherwise about four tasks per
/// granted worker so a late helper can still share the work.
pub fn default_grain(tiling: &Tiling, workers: usize) -> Grain {
    if workers <= 1 || tiling.len() < CALLER_ONLY_ELEMS || tiling.groups() == 1 {
        return Grain::Caller;
    }
    let k = tiling.groups().div_ceil(4 * workers).max(1);
    Grain::tasks(k).unwrap_or(Grain::Caller)
}
