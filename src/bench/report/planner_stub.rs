//! TEMPORARY stand-in for the planner's `crate::plan::{Strategy, Plan, Planner}`,
//! which is being written in parallel. Same names and signatures; the harness
//! imports them through one `use` line in `mod.rs`, which switches to
//! `crate::plan` when it lands, and this file is then deleted.
//!
//! The stand-in's choices follow DESIGN.md's candidate table with the crate's
//! current heuristics (`plan::default_config` / `plan::default_grain`); they are
//! not the planner's.

use crate::error::{Error, Result};
use crate::ops::{LaunchConfig, Op, Shape, attention};
use crate::packet::Backend;
use crate::plan::{default_config, default_grain};
use crate::pool::Grain;
use crate::simt::Tiling;

/// A candidate strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Whole row per work-item set, one row per group, legacy grain.
    Whole,
    /// Planner-chosen local, block 32, legacy grain.
    Local,
    /// Joint local and block, legacy grain.
    JointLegacy,
    /// Joint local, block and grain.
    JointTasks,
    /// The production policy.
    Auto,
    /// Exhaustive measured search.
    Oracle,
}

impl Strategy {
    /// The strategy's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Whole => "whole",
            Strategy::Local => "local",
            Strategy::JointLegacy => "joint_legacy",
            Strategy::JointTasks => "joint_tasks",
            Strategy::Auto => "auto",
            Strategy::Oracle => "oracle",
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Strategy> {
        use Strategy::*;
        [Whole, Local, JointLegacy, JointTasks, Auto, Oracle]
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| Error::BadArgument(format!("unknown candidate {s:?}")))
    }
}

/// A planned launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// Geometry.
    pub config: LaunchConfig,
    /// Grain.
    pub grain: Grain,
    /// Predicted time, µs (the stand-in does not predict: NaN).
    pub predicted_us: f64,
}

/// The stand-in planner.
#[derive(Clone, Debug)]
pub struct Planner {
    backend: Backend,
    workers: usize,
}

impl Planner {
    /// A planner for `backend` and a pool of `workers_granted` workers.
    pub fn new(backend: Backend, workers_granted: usize) -> Self {
        Planner {
            backend,
            workers: workers_granted,
        }
    }

    /// The launch `strategy` picks; `Ok(None)` when unsupported.
    pub fn plan(&self, strategy: Strategy, op: Op, shape: &Shape) -> Result<Option<Plan>> {
        temporary_stub_plan(self.backend, self.workers, strategy, op, shape)
    }
}

/// TEMPORARY: the stand-in's choices (see the module docs).
fn temporary_stub_plan(
    backend: Backend,
    workers: usize,
    strategy: Strategy,
    op: Op,
    shape: &Shape,
) -> Result<Option<Plan>> {
    shape.validate(op)?;
    let w = backend.width();
    let joint = default_config(op, shape, w);
    let plan = |config: LaunchConfig, grain| {
        Some(Plan {
            config,
            grain,
            predicted_us: f64::NAN,
        })
    };
    Ok(match (strategy, *shape) {
        (Strategy::Whole, Shape::Rows { .. }) => plan(
            LaunchConfig {
                local: joint.local,
                block: 1,
            },
            Grain::Legacy,
        ),
        (Strategy::Whole, Shape::Attention(a)) => plan(
            LaunchConfig {
                local: attention::local_for(&a, w),
                block: 1,
            },
            Grain::Legacy,
        ),
        (Strategy::Local, Shape::Rows { .. }) => plan(
            LaunchConfig {
                local: joint.local,
                block: 32,
            },
            Grain::Legacy,
        ),
        (Strategy::Local, Shape::Attention(_)) => None,
        (Strategy::JointLegacy, _) => plan(joint, Grain::Legacy),
        (Strategy::JointTasks | Strategy::Auto | Strategy::Oracle, _) => {
            let tiling = match *shape {
                Shape::Rows { rows, cols } => Tiling::rows(rows, cols, joint.block)?,
                Shape::Attention(a) => {
                    Tiling::segmented(a.batch * a.q_heads, a.q_len, a.dv, joint.block)?
                }
            };
            plan(joint, default_grain(&tiling, workers))
        }
    })
}
