//! The candidate strategies of the seed (DESIGN.md, "Candidate strategies") as the
//! planner chooses them from the cost model, without measuring the target shape.

use super::cost::CostModel;
use crate::error::{Error, Result};
use crate::ops::{LaunchConfig, Op, Shape, attention};
use crate::packet::Backend;
use crate::pool::Grain;
use std::fmt;
use std::str::FromStr;

/// A way of choosing a launch's geometry and grain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// `local` = the whole row (rounded up to W), `block` = 1, grain 0.
    Whole,
    /// `local` chosen from W, 2W, 4W, … up to the row; `block` = 32; grain 0.
    Local,
    /// `local` and `block` chosen jointly; grain 0.
    JointLegacy,
    /// `local`, `block` and grain chosen jointly (grain from 0, 1, 2, 4, … and caller).
    JointTasks,
    /// The production policy (the cost model's joint choice over everything).
    Auto,
    /// Exhaustive measured search: needs a runtime, see the planner issue.
    Oracle,
}

impl Strategy {
    /// The four candidates of the seed's pilot and validation tables.
    pub const SEED: [Strategy; 4] = [
        Strategy::Whole,
        Strategy::Local,
        Strategy::JointLegacy,
        Strategy::JointTasks,
    ];

    /// The name used on the command line and in reports.
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

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Strategy> {
        [
            Strategy::Whole,
            Strategy::Local,
            Strategy::JointLegacy,
            Strategy::JointTasks,
            Strategy::Auto,
            Strategy::Oracle,
        ]
        .into_iter()
        .find(|x| x.name() == s)
        .ok_or_else(|| {
            Error::BadArgument(format!(
                "unknown strategy {s:?} (known: whole, local, joint_legacy, joint_tasks, auto, oracle)"
            ))
        })
    }
}

/// A planned launch: geometry, grain and the model's prediction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// Launch geometry.
    pub config: LaunchConfig,
    /// Task grain.
    pub grain: Grain,
    /// The cost model's prediction, µs.
    pub predicted_us: f64,
}

/// Chooses geometry and grain per strategy for one backend and worker count.
#[derive(Clone, Debug)]
pub struct Planner {
    backend: Backend,
    workers: usize,
    model: CostModel,
}

/// Joint tasks deviates from the legacy choice only for a predicted gain above this
/// factor, so model error cannot turn task grain into a regression.
const TASKS_MARGIN: f64 = 0.9;

impl Planner {
    /// A planner with the default cost model.
    pub fn new(backend: Backend, workers_granted: usize) -> Self {
        Self::with_model(backend, workers_granted, CostModel::default())
    }

    /// A planner with a given (e.g. calibrated) cost model.
    pub fn with_model(backend: Backend, workers_granted: usize, model: CostModel) -> Self {
        Planner {
            backend,
            workers: workers_granted.max(1),
            model,
        }
    }

    /// The cost model.
    pub fn model(&self) -> &CostModel {
        &self.model
    }

    fn predict(&self, op: Op, shape: &Shape, config: LaunchConfig, grain: Grain) -> f64 {
        self.model
            .predict(op, shape, self.backend.width(), config, grain, self.workers)
    }

    fn plan_of(&self, op: Op, shape: &Shape, config: LaunchConfig, grain: Grain) -> Plan {
        Plan {
            config,
            grain,
            predicted_us: self.predict(op, shape, config, grain),
        }
    }

    /// The `local` candidates: W, 2W, 4W, … up to the row (rounded up to W).
    fn local_candidates(&self, op: Op, shape: &Shape) -> Vec<usize> {
        let w = self.backend.width();
        match *shape {
            Shape::Rows { cols, .. } => {
                let sched = crate::ops::schedule_cols(op, cols);
                let row = sched.div_ceil(w) * w;
                let mut v = Vec::new();
                let mut l = w;
                while l < row {
                    v.push(l);
                    l *= 2;
                }
                v.push(row);
                v
            }
            Shape::Attention(a) => vec![attention::local_for(&a, w)],
        }
    }

    /// The `block` candidates: 1, 2, 4, … up to the rows of a segment.
    fn block_candidates(shape: &Shape) -> Vec<usize> {
        let rows = match *shape {
            Shape::Rows { rows, .. } => rows,
            Shape::Attention(a) => a.q_len,
        };
        let mut v = Vec::new();
        let mut b = 1;
        while b < rows {
            v.push(b);
            b *= 2;
        }
        v.push(rows);
        v
    }

    /// The grain candidates: 0, caller and 1, 2, 4, … up to the number of groups.
    fn grain_candidates(groups: usize) -> Vec<Grain> {
        let mut v = vec![Grain::Legacy, Grain::Caller];
        let mut k = 1;
        while k <= groups {
            v.extend(Grain::tasks(k));
            k *= 2;
        }
        v
    }

    fn groups(shape: &Shape, block: usize) -> usize {
        match *shape {
            Shape::Rows { rows, .. } => rows.div_ceil(block),
            Shape::Attention(a) => a.batch * a.q_heads * a.q_len.div_ceil(block),
        }
    }

    fn best<I: IntoIterator<Item = Plan>>(plans: I) -> Plan {
        plans
            .into_iter()
            .min_by(|a, b| a.predicted_us.total_cmp(&b.predicted_us))
            .expect("every candidate space is non-empty")
    }

    /// The plan `strategy` picks for `op` at `shape`; `Ok(None)` when the strategy
    /// does not apply (`local` for attention). `Oracle` needs measurements and is an
    /// error here.
    pub fn plan(&self, strategy: Strategy, op: Op, shape: &Shape) -> Result<Option<Plan>> {
        shape.validate(op)?;
        let w = self.backend.width();
        let plan = match strategy {
            Strategy::Whole => {
                let config = CostModel::whole_config(op, shape, w);
                self.plan_of(op, shape, config, Grain::Legacy)
            }
            Strategy::Local => {
                if op == Op::Attention {
                    return Ok(None);
                }
                let block = match *shape {
                    Shape::Rows { rows, .. } => rows.min(32),
                    Shape::Attention(_) => unreachable!("attention returned above"),
                };
                Self::best(self.local_candidates(op, shape).into_iter().map(|local| {
                    self.plan_of(op, shape, LaunchConfig { local, block }, Grain::Legacy)
                }))
            }
            Strategy::JointLegacy => self.joint_legacy(op, shape),
            Strategy::JointTasks | Strategy::Auto => {
                let legacy = self.joint_legacy(op, shape);
                let mut best = legacy;
                for local in self.local_candidates(op, shape) {
                    for block in Self::block_candidates(shape) {
                        let config = LaunchConfig { local, block };
                        for grain in Self::grain_candidates(Self::groups(shape, block)) {
                            let p = self.plan_of(op, shape, config, grain);
                            if p.predicted_us < best.predicted_us {
                                best = p;
                            }
                        }
                    }
                }
                if best.predicted_us < legacy.predicted_us * TASKS_MARGIN {
                    best
                } else {
                    legacy
                }
            }
            Strategy::Oracle => {
                return Err(Error::BadArgument(
                    "the oracle strategy measures: it needs a runtime and inputs".into(),
                ));
            }
        };
        Ok(Some(plan))
    }

    fn joint_legacy(&self, op: Op, shape: &Shape) -> Plan {
        let mut plans = Vec::new();
        for local in self.local_candidates(op, shape) {
            for block in Self::block_candidates(shape) {
                plans.push(self.plan_of(op, shape, LaunchConfig { local, block }, Grain::Legacy));
            }
        }
        Self::best(plans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::suites::seed_cases;

    #[test]
    fn strategies_follow_the_seed_definitions() {
        let b = Backend::best(8);
        let p = Planner::new(b, 2);
        for (op, shape) in seed_cases() {
            let whole = p.plan(Strategy::Whole, op, &shape).unwrap().unwrap();
            assert_eq!(whole.config.block, 1);
            assert_eq!(whole.grain, Grain::Legacy);
            let local = p.plan(Strategy::Local, op, &shape).unwrap();
            match op {
                Op::Attention => assert!(local.is_none()),
                _ => {
                    let l = local.unwrap();
                    assert_eq!(l.grain, Grain::Legacy);
                    assert!(l.config.local.is_multiple_of(b.width()));
                }
            }
            let legacy = p.plan(Strategy::JointLegacy, op, &shape).unwrap().unwrap();
            assert_eq!(legacy.grain, Grain::Legacy);
            let tasks = p.plan(Strategy::JointTasks, op, &shape).unwrap().unwrap();
            assert!(tasks.predicted_us <= legacy.predicted_us);
            for plan in [whole, legacy, tasks] {
                assert!(plan.predicted_us.is_finite() && plan.predicted_us > 0.0);
            }
        }
        assert!(
            p.plan(Strategy::Oracle, Op::RmsNorm, &Shape::rows(2, 2))
                .is_err()
        );
        assert_eq!(
            "joint_tasks".parse::<Strategy>().unwrap(),
            Strategy::JointTasks
        );
        assert!("fastest".parse::<Strategy>().is_err());
    }

    #[test]
    #[ignore = "prints the plans of the seed's rows"]
    fn print_plans() {
        let p = Planner::new(Backend::best(8), 2);
        for (op, shape) in seed_cases() {
            let line: Vec<String> = Strategy::SEED
                .iter()
                .map(|&s| match p.plan(s, op, &shape).unwrap() {
                    Some(pl) => format!(
                        "{}: l{} b{} g{} {:.1}us",
                        s, pl.config.local, pl.config.block, pl.grain, pl.predicted_us
                    ),
                    None => format!("{s}: -"),
                })
                .collect();
            println!("{op} {shape}: {}", line.join(" | "));
        }
    }
}
