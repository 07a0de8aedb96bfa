//! The planner: which launch geometry and grain to run for an operator and shape
//! — or for any launch described by a [`LaunchProfile`].
//!
//! - [`profile`]: what a launch does (rows, columns, reductions, bytes and flops
//!   per element, attention dimensions), independent of its kernel.
//! - [`cost`]: the cost model, predicting a launch's time for a geometry and grain.
//! - [`calibrate`]: measures the model's constants on this machine (≤ 2 s).
//! - [`interference`]: how much of the CPUs other work took while it measured.
//! - [`cache`]: the calibration and tuning files (per machine and build, checked).
//! - [`strategy`]: the [`Planner`] and its [`Strategy`]s — the seed's four
//!   candidates, `auto` (model + run-time refinement) and `oracle`.
//! - [`search`]: the measured searches (oracle, refinement).
//! - [`tuning`]: oracle results by launch.
//!
//! [`default_config`] and [`default_grain`] are quick heuristics (no model) used
//! where a plain geometry is wanted (roofline, tests).
//!
//! ## Planning a launch that is not one of the seven operators
//!
//! A graph executor describes each launch with a [`LaunchProfile`]
//! ([`LaunchProfile::rows`] for element-wise, row-softmax-like kernels;
//! [`LaunchProfile::attention`] for scores or probs·v kernels) and calls
//! [`Planner::plan_launch`]`(Strategy::Auto, &profile)`. To take part in run-time
//! refinement it calls [`Planner::due_for_refinement`] on every launch and, when
//! that says yes, [`Planner::refine`] with a callback that times the launch with a
//! candidate geometry and grain (see [`search::Measure`]).

pub mod cache;
pub mod calibrate;
pub mod cost;
pub mod interference;
pub mod profile;
pub mod search;
pub mod strategy;
pub mod tuning;

pub use cost::CostModel;
pub use profile::{LaunchProfile, Work};
pub use strategy::{InputsFrom, Plan, PlanSource, Planner, Strategy};

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
