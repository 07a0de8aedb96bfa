//! The candidate strategies of the seed (DESIGN.md, "Candidate strategies") as the
//! planner chooses them from the cost model, without measuring the target shape.

use super::cost::{CostModel, task_split};
use super::profile::{LaunchProfile, ProfileId, Work};
use super::search::{self, Candidate, Measure};
use super::tuning::{self, Tuned, TuningTable};
use crate::error::{Error, Result};
use crate::ops::{LaunchConfig, Op, Shape, attention};
use crate::packet::Backend;
use crate::pool::Grain;
use crate::simt::PacketMode;
use rustc_hash::FxHashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

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
    /// The production policy: the calibrated cost model's joint choice over
    /// local × block × grain, refined at run time by measurement for launches seen
    /// repeatedly; a tuned (oracle) result when there is one.
    Auto,
    /// Exhaustive measured search over local × block × grain (the reference for
    /// regret); planning returns the tuned result.
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

    /// Every strategy, in report order.
    pub const ALL: [Strategy; 6] = [
        Strategy::Whole,
        Strategy::Local,
        Strategy::JointLegacy,
        Strategy::JointTasks,
        Strategy::Auto,
        Strategy::Oracle,
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
        Strategy::ALL
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
    /// The cost model's prediction for this geometry and grain, µs.
    pub predicted_us: f64,
    /// Where the plan came from.
    pub source: PlanSource,
}

/// How a plan was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanSource {
    /// The cost model alone.
    Model,
    /// Run-time refinement (measured alternatives near the model's choice).
    Refined,
    /// The oracle's exhaustive measured search (tuning table).
    Tuned,
}

impl PlanSource {
    /// `model`, `refined` or `tuned`.
    pub fn name(self) -> &'static str {
        match self {
            PlanSource::Model => "model",
            PlanSource::Refined => "refined",
            PlanSource::Tuned => "tuned",
        }
    }
}

/// Calls of the same launch after which [`Planner::due_for_refinement`] says yes.
pub const REFINE_AFTER: u32 = 3;

/// Alternatives refinement measures besides the model's choice (at most).
const REFINE_ALTERNATIVES: usize = 17;

/// What the planner remembers of one launch: `auto` calls so far, the refined
/// plan, the tuning table's entry (looked up by its text key once), and the
/// `auto` plan they settle on, with its prediction, once it is known (so that
/// later calls pay a lookup, not the cost model).
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    calls: u32,
    refined: Option<(LaunchConfig, Grain)>,
    tuned: Option<(LaunchConfig, Grain)>,
    settled: Option<Plan>,
}

/// A launch's tuned and refined choices, if any.
type SearchState = (Option<(LaunchConfig, Grain)>, Option<(LaunchConfig, Grain)>);

/// Chooses geometry and grain per strategy for one backend, worker count and
/// packet mode. Holds the cost model, the tuning table (oracle results) and the
/// run-time refinement state; a [`Runtime`](crate::runtime::Runtime) owns one.
#[derive(Debug)]
pub struct Planner {
    backend: Backend,
    workers: usize,
    mode: PacketMode,
    model: CostModel,
    tuned: Mutex<TuningTable>,
    /// Keyed with a fast hash: looked up twice per `auto` call.
    seen: Mutex<FxHashMap<ProfileId, Seen>>,
}

impl Clone for Planner {
    fn clone(&self) -> Self {
        Planner {
            backend: self.backend,
            workers: self.workers,
            mode: self.mode,
            model: self.model.clone(),
            tuned: Mutex::new(self.tuning()),
            seen: Mutex::new(lock(&self.seen).clone()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `true` when no output bit of launch `p` depends on `local`: element-wise
/// work with no row reduction (maps, swiglu, gelu_residual, rope), where every
/// element is computed by the same lane arithmetic whatever the packet it falls
/// in. A row reduction's order follows `local` (its packet accumulators), so
/// `auto` fixes `local` per shape there, for bytes that do not depend on the
/// worker count.
pub fn local_is_free(p: &LaunchProfile) -> bool {
    matches!(
        p.work,
        Work::Rows {
            reduce_passes: 0,
            ..
        }
    )
}

/// `auto` keeps a launch on the caller when the model puts it there under
/// this fraction of the calibrated hot helper arrival
/// ([`CostModel::helper_arrival_us`]): no hand-off can pay for itself that
/// soon, and refinement's measurements of such a launch are mostly jitter.
/// Above it, refinement measures the pool's plans and keeps them only if they
/// are clearly faster side by side. A fixed 2 µs (set on an Intel Xeon,
/// where rmsnorm 17x65 took 0.7 µs on the caller and 1.2–2.3 µs as 4 pooled
/// tasks) kept five seed launches of 1.1–2.5 µs on the caller on an AMD EPYC
/// whose helpers arrive in 1.1–2.0 µs: masked_softmax, swiglu and
/// gelu_residual 3x1024, rmsnorm 64x256 and attention 1x4x2x16x32x16x16 ran
/// 13–35 % slower there than the oracle's pooled plans (2 workers,
/// 2026-12-06).
const CALLER_ONLY_ARRIVALS: f64 = 0.5;

/// How much more compute than at the cheapest `local` the model may put on
/// the `local` that `auto` takes for a row reduction, to take more packet
/// accumulators: the model's resolution between accumulator counts. More
/// accumulators run the same element instructions on shorter dependency
/// chains (only the final horizontal sums, in the per-row cost, grow), so
/// where the model cannot tell two counts apart `auto` takes the larger.
/// Taking the fewer, it ran rmsnorm at 4 accumulators where 8 were 1–5 %
/// faster (3x1024, 129x768, 257x1538: auto / oracle 1.03–1.06 on an AMD EPYC,
/// with 4 and 8 level in the calibration; 0–2.5 % on an Intel Xeon), and the
/// fused masked_softmax at 1 where 2–8 were 8–10 % faster. Counts the model
/// puts within 2 % measured within noise or favoured the larger: layernorm
/// 4 against 8 accumulators 0–2 % apart, masked_softmax 2, 4 and 8 within
/// 1.5 % (AMD EPYC, W8, caller, 2026-12-06).
///
/// The graph's own row softmax (the unfused chains') is the exception: there
/// `auto` takes the *fewest* accumulators within the tolerance
/// ([`fewest_accumulators_near_cheapest`]).
const ACCUMULATORS_TOLERANCE: f64 = 0.02;

/// Whether `auto` takes the fewest packet accumulators among those the
/// model puts within [`ACCUMULATORS_TOLERANCE`] of the cheapest for launch
/// `p` (else the most): for the graph's own row softmax. This host runs in
/// phases of 0.1–10 s, one ~1.4× faster than the other
/// (`examples/phases.rs`). In the fast phase that softmax costs the same with
/// 1, 2 and 8 accumulators; in the slow one the whole row (8) costs 17–21 %
/// more than local W (1): masked_softmax 3x1024 unfused, its softmax at local
/// 1024 against 8, read 0.99–1.00 of it in 100 ms windows of the fast phase
/// and 1.15–1.25 in the slow (median by phase, 32x1024: 1.00 and 1.21;
/// 129x768: 0.99 and 1.19; 257x1538: 1.00 and 1.19; 64x4096: 0.99 and 1.20;
/// local 16 against 8: 0.99–1.00 in both, 32: 1.04). A calibration taken in the fast phase
/// (a third of them) puts the four counts within 2 % with 8 the cheapest,
/// and `auto` ran the whole row at 1.04–1.12× the oracle's local 8 or 16
/// (3x1024, 129x768, 257x1538; AMD EPYC, W8, 2026-12-07). The row operators'
/// own kernels keep the most: rmsnorm 32x1024's whole row ran 8–15 % faster
/// than 2 accumulators in both phases.
fn fewest_accumulators_near_cheapest(p: &LaunchProfile) -> bool {
    p.op.is_none() && matches!(p.work, Work::Rows { reduce_passes, .. } if reduce_passes > 0)
}

/// `auto`'s pooled plans give every worker at least this many tasks (every
/// row its own task when there are fewer rows): a static split ends with
/// its slowest worker, and the workers of a shared machine do not keep one
/// speed. Measured here (Intel Xeon, 2 vCPUs under KVM, 2026-12-05): in some
/// phases of the machine the fused masked_softmax 4096x1024 took 1745–1776 µs
/// as two chunks (legacy) and 1423–1461 µs as 8 to 128 tasks (9 interleaved
/// rounds), in others the two were level; one full bench read auto / oracle
/// 1.15–1.17 on four large rows where auto ran legacy or two-task plans and
/// the oracle many tasks. Refinement still measures legacy and coarser grains,
/// except in launches above [`COARSE_SPLIT_MAX_ARRIVALS`].
const MIN_TASKS_PER_WORKER: usize = 4;

/// A launch that takes at least this many hot helper arrivals on the caller
/// alone ([`CostModel::helper_arrival_us`]; 0.5–1.2 ms here, as calibrations
/// put a helper's arrival at 1.0–2.5 µs) is planned and refined among fine
/// splits only ([`LONG_LAUNCH_TASKS_PER_WORKER`]): more tasks cost it nothing
/// measurable,
/// and a coarse split that won refinement's few milliseconds ends with
/// whichever worker the host slows later. In one full
/// bench, refinement had taken coarse splits (legacy's two chunks, or four
/// tasks) for 7 launches of the 1024x4096 and 4096x1024 rows, and 6 of those
/// rows read 1.03–1.14 of the oracle's fine splits, against 0.96–1.02 for
/// the 5 large rows refined to balanced splits; in another, four tasks of
/// swiglu 1024x4096 read 1.64. Coarse splits of the 257x1538 rows (40–220
/// µs) read 0.99–1.01 (AMD EPYC, 2 workers, 2026-12-07). With this rule, 1 of
/// 36 large rows read over 1.05 in three full benches, against 11 of 84 in
/// seven without it.
const COARSE_SPLIT_MAX_ARRIVALS: f64 = 500.0;

/// The fewest tasks per worker of a pooled plan for a launch above
/// [`COARSE_SPLIT_MAX_ARRIVALS`] (or a task per row). The model prices a task
/// (0.01–0.03 µs here) and not the end of a launch that waits for a slowed
/// worker's last task, so it takes the coarsest split it is allowed: with
/// [`MIN_TASKS_PER_WORKER`], masked_softmax 65536x64 ran as 8 tasks of
/// 8192 rows (about 600 µs each) and read 1.072 (1.015–1.090) of the oracle's
/// 128 tasks with fusion off and 1.059 (1.039–1.120) against 256 with fusion
/// on, 7 paired rounds each. At 32 per worker the tasks of a 0.7 ms launch on
/// two workers cost about 2 µs together and a slowed worker's last task holds
/// the launch up by at most 1/32 of its share (AMD EPYC, 2 vCPUs, 2026-12-07).
const LONG_LAUNCH_TASKS_PER_WORKER: usize = 32;

/// Where a launch finds its inputs, which refinement needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputsFrom {
    /// The caller: a launch alone, or one whose inputs no pooled launch of its
    /// graph wrote.
    Caller,
    /// Partly the pool's workers: a launch of the same graph wrote some of them
    /// on the pool just before. A plan on the caller reads those from the other
    /// cores' caches, which the model of the launch alone does not see, so
    /// refinement measures the pool's plans too (in the graph, after the
    /// launches that write its inputs), even for a launch the model puts under
    /// half a hot helper's arrival on the caller.
    Pool,
}

/// Joint tasks deviates from the legacy choice only for a predicted gain above this
/// factor, and above the hot helper's arrival time (see
/// [`Planner::tasks_pay_off`]), so model error cannot turn task grain into a
/// regression.
const TASKS_MARGIN: f64 = 0.9;

impl Planner {
    /// A planner with the default (uncalibrated) cost model, full-packet mode.
    pub fn new(backend: Backend, workers_granted: usize) -> Self {
        Self::with_model(backend, workers_granted, CostModel::default())
    }

    /// A planner with a given (e.g. calibrated) cost model, full-packet mode.
    pub fn with_model(backend: Backend, workers_granted: usize, model: CostModel) -> Self {
        Planner {
            backend,
            workers: workers_granted.max(1),
            mode: PacketMode::FullPacket,
            model,
            tuned: Mutex::new(TuningTable::default()),
            seen: Mutex::new(FxHashMap::default()),
        }
    }

    /// The same planner for launches in packet mode `mode` (part of tuning keys).
    pub fn with_mode(mut self, mode: PacketMode) -> Self {
        self.mode = mode;
        self
    }

    /// The same planner with the oracle results of `table` (see [`tuning`]).
    pub fn with_tuning(self, table: TuningTable) -> Self {
        *lock(&self.tuned) = table;
        lock(&self.seen).clear();
        self
    }

    /// The cost model.
    pub fn model(&self) -> &CostModel {
        &self.model
    }

    /// The backend plans are made for.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Workers granted (the pool the plans are for).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// A copy of the tuning table.
    pub fn tuning(&self) -> TuningTable {
        lock(&self.tuned).clone()
    }

    /// Runs `f` on what this planner remembers of launch `p`, creating the
    /// record (with its tuning-table entry) the first time `p` is seen, so
    /// later calls of the same launch neither format keys nor allocate.
    fn with_seen<R>(&self, p: &LaunchProfile, f: impl FnOnce(&mut Seen) -> R) -> R {
        let mut seen = lock(&self.seen);
        let s = seen.entry(p.id()).or_insert_with(|| Seen {
            tuned: lock(&self.tuned)
                .entries
                .get(&self.key(p))
                .map(|t| (t.config, t.grain)),
            ..Seen::default()
        });
        f(s)
    }

    /// The tuning key of `profile` for this planner.
    pub fn key(&self, profile: &LaunchProfile) -> String {
        tuning::key(profile, self.backend.width(), self.workers, self.mode)
    }

    /// The model's prediction for `profile` run with `config` and `grain`, µs.
    pub fn predict(&self, profile: &LaunchProfile, config: LaunchConfig, grain: Grain) -> f64 {
        self.model
            .predict(profile, self.backend.width(), config, grain, self.workers)
    }

    fn plan_of(&self, p: &LaunchProfile, config: LaunchConfig, grain: Grain) -> Plan {
        Plan {
            config,
            grain,
            predicted_us: self.predict(p, config, grain),
            source: PlanSource::Model,
        }
    }

    /// `auto`'s plan of `p` from its tuned or refined choice (read together as
    /// `state`), remembered as settled unless a search changed `state` meanwhile.
    fn settle(&self, p: &LaunchProfile, state: SearchState) -> Plan {
        let plan = match state {
            (Some((c, g)), _) => Plan {
                source: PlanSource::Tuned,
                ..self.plan_of(p, c, g)
            },
            (None, Some((c, g))) => Plan {
                source: PlanSource::Refined,
                ..self.plan_of(p, c, g)
            },
            (None, None) => return self.auto_plan(p),
        };
        self.with_seen(p, |s| {
            if (s.tuned, s.refined) == state {
                s.settled = Some(plan);
            }
        });
        plan
    }

    fn attention_local(&self, p: &LaunchProfile) -> usize {
        match p.work {
            Work::Attention(a) => attention::local_for(&a, self.backend.width()),
            Work::Rows { .. } => 0,
        }
    }

    fn locals(&self, p: &LaunchProfile) -> Vec<usize> {
        search::local_candidates(p, self.backend.width(), self.attention_local(p))
    }

    /// [`Planner::locals`] that run distinct code (see [`search::distinct_locals`]).
    fn distinct_locals(&self, p: &LaunchProfile) -> Vec<usize> {
        search::distinct_locals(p, self.backend.width(), &self.locals(p))
    }

    fn best<I: IntoIterator<Item = Plan>>(plans: I) -> Plan {
        plans
            .into_iter()
            .min_by(|a, b| a.predicted_us.total_cmp(&b.predicted_us))
            .expect("every candidate space is non-empty")
    }

    /// The plan `strategy` picks for `op` at `shape`; `Ok(None)` when the strategy
    /// does not apply (`local` for attention). See [`Planner::plan_launch`].
    pub fn plan(&self, strategy: Strategy, op: Op, shape: &Shape) -> Result<Option<Plan>> {
        self.plan_launch(strategy, &LaunchProfile::for_op(op, shape)?)
    }

    /// The plan `strategy` picks for a launch described by `profile`, without
    /// measuring it:
    /// - `whole`, `local`, `joint_legacy`, `joint_tasks`: the seed's candidates,
    ///   chosen by the cost model (`local` is `Ok(None)` for attention);
    /// - `auto`: the oracle's result if this launch was tuned, else the result of
    ///   run-time refinement if it ran, else the model's best over
    ///   local × block × grain;
    /// - `oracle`: the tuned result; [`Error::NotTuned`] if the launch was never
    ///   searched (run [`Planner::oracle`], or `taskgrain tune`).
    pub fn plan_launch(&self, strategy: Strategy, p: &LaunchProfile) -> Result<Option<Plan>> {
        p.validate()?;
        let w = self.backend.width();
        let plan = match strategy {
            Strategy::Whole => {
                let config = match p.work {
                    Work::Rows { cols, .. } => LaunchConfig {
                        local: cols.div_ceil(w) * w,
                        block: 1,
                    },
                    Work::Attention(_) => LaunchConfig {
                        local: self.attention_local(p),
                        block: 1,
                    },
                };
                self.plan_of(p, config, Grain::Legacy)
            }
            Strategy::Local => {
                let Work::Rows { rows, .. } = p.work else {
                    return Ok(None);
                };
                let block = rows.min(32);
                Self::best(
                    self.locals(p)
                        .into_iter()
                        .map(|local| self.plan_of(p, LaunchConfig { local, block }, Grain::Legacy)),
                )
            }
            Strategy::JointLegacy => self.joint_legacy(p),
            Strategy::JointTasks => {
                let legacy = self.joint_legacy(p);
                let best = self.joint_all(p);
                if self.tasks_pay_off(&best, &legacy) {
                    best
                } else {
                    legacy
                }
            }
            Strategy::Auto => match self.with_seen(p, |s| (s.settled, (s.tuned, s.refined))) {
                (Some(plan), _) => plan,
                (None, state) => self.settle(p, state),
            },
            Strategy::Oracle => {
                let Some((c, g)) = self.with_seen(p, |s| s.tuned) else {
                    return Err(Error::NotTuned(self.key(p)));
                };
                Plan {
                    source: PlanSource::Tuned,
                    ..self.plan_of(p, c, g)
                }
            }
        };
        Ok(Some(plan))
    }

    /// Whether `joint_tasks` takes `best` over `legacy`: for a predicted gain
    /// above [`TASKS_MARGIN`] and above the hot helper's arrival time, the
    /// jitter of any pooled launch. A relative margin alone does not cover a
    /// small launch: rmsnorm 64x256 as 4 tasks, predicted over 10 % faster
    /// than legacy's single group (2.5 µs), measured 3.6 % slower (Intel
    /// Xeon, 2 workers, 2026-12-05).
    fn tasks_pay_off(&self, best: &Plan, legacy: &Plan) -> bool {
        let gain = legacy.predicted_us - best.predicted_us;
        best.predicted_us < legacy.predicted_us * TASKS_MARGIN
            && gain > self.model.helper_arrival_us
    }

    fn joint_legacy(&self, p: &LaunchProfile) -> Plan {
        let mut plans = Vec::new();
        for local in self.locals(p) {
            for block in search::block_candidates(p) {
                plans.push(self.plan_of(p, LaunchConfig { local, block }, Grain::Legacy));
            }
        }
        Self::best(plans)
    }

    /// Every candidate of the joint space local × block × grain, with the
    /// model's prediction (`locals` that run identical code are kept once).
    pub fn joint_space(&self, p: &LaunchProfile) -> Vec<Plan> {
        let locals = self.distinct_locals(p);
        let mut v = Vec::new();
        for &local in &locals {
            for block in search::block_candidates(p) {
                let config = LaunchConfig { local, block };
                for grain in search::grain_candidates(p.groups(block)) {
                    v.push(self.plan_of(p, config, grain));
                }
            }
        }
        v
    }

    /// Whether a launch whose best plan on the caller is `on_caller` keeps to
    /// the caller's plans: the model puts it under [`CALLER_ONLY_ARRIVALS`]
    /// of a hot helper's arrival there.
    fn caller_only(&self, on_caller: &Plan) -> bool {
        on_caller.predicted_us < CALLER_ONLY_ARRIVALS * self.model.helper_arrival_us
    }

    /// The whole launch `p` on the caller at the `local` that `auto` uses: the
    /// one with the most packet accumulators (the fewest for the graph's own
    /// softmax: [`fewest_accumulators_near_cheapest`]) among those whose
    /// compute the model puts within [`ACCUMULATORS_TOLERANCE`] of the
    /// cheapest, whatever the pool. (The launch's memory traffic is the same
    /// at every `local`: compared in the total, which a memory-bound launch
    /// flattens, rmsnorm's 2 accumulators, 40 % dearer in compute, came within
    /// 5 % of its 8 at 257x1538 and ran 13 % slower on 2 workers.) A row's reduction order
    /// depends on `local`, so fixing it per shape keeps `auto`'s output bytes
    /// the same for every worker count and grain; only `block` and the grain
    /// adapt to the pool. Nor does `local` follow a measurement, whose winner
    /// between accumulator counts can change with the host's phase: rmsnorm
    /// 4096x1024 (streamed, W8) ran 5–7.5 % faster on the caller at 4
    /// accumulators than at 8 in one half hour and 0–6 % slower in the next,
    /// with the same binary. On 2 workers, side by side, the two were within
    /// 2 % where the launch took ~600 µs and 8 ran 1–4 % ahead where it took
    /// ~400 µs (AMD EPYC, 2026-12-06).
    fn auto_on_caller(&self, p: &LaunchProfile) -> Plan {
        let block = p.segment_rows();
        let width = self.backend.width();
        let compute = |local| {
            let config = LaunchConfig { local, block };
            (self.model.breakdown(p, width, config, Grain::Caller, 1)).compute_us
        };
        // In increasing `local`, so in increasing accumulator count.
        let by_local: Vec<(usize, f64)> = self
            .distinct_locals(p)
            .into_iter()
            .map(|local| (local, compute(local)))
            .collect();
        let cheapest = by_local.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
        let near = cheapest * (1.0 + ACCUMULATORS_TOLERANCE);
        let mut candidates = by_local.iter().filter(|x| x.1 <= near);
        let chosen = if fewest_accumulators_near_cheapest(p) {
            candidates.next()
        } else {
            candidates.next_back()
        };
        let local = chosen.map_or(by_local[0].0, |x| x.0);
        self.plan_of(p, LaunchConfig { local, block }, Grain::Caller)
    }

    /// The joint space at `auto`'s local (that of `whole`, the launch's
    /// [`Planner::auto_on_caller`] plan): block × grain — or local × block ×
    /// grain where no output bit depends on `local` ([`local_is_free`]); only
    /// the caller's plans for a launch the model puts under
    /// [`CALLER_ONLY_ARRIVALS`] of a helper's arrival on the caller
    /// ([`Planner::caller_only`]); and of the pool's plans, those with
    /// [`Planner::min_tasks`] tasks.
    fn auto_space(&self, p: &LaunchProfile, whole: Plan) -> Vec<Plan> {
        let local = whole.config.local;
        let free = local_is_free(p);
        let tiny = self.caller_only(&whole);
        let min_tasks = self.min_tasks(p, &whole);
        let mut v = self.joint_space(p);
        v.retain(|x| {
            (free || x.config.local == local)
                && (!tiny || x.grain == Grain::Caller)
                && self.balanced(p, x, min_tasks)
        });
        if v.is_empty() {
            v.push(whole);
        }
        v
    }

    /// The fewest tasks of `auto`'s pooled plans for launch `p`, whose
    /// [`Planner::auto_on_caller`] plan is `whole`: [`MIN_TASKS_PER_WORKER`]
    /// per worker, [`LONG_LAUNCH_TASKS_PER_WORKER`] in a long launch
    /// ([`Planner::long_launch`]), or a task per row where there are fewer.
    fn min_tasks(&self, p: &LaunchProfile, whole: &Plan) -> usize {
        let per_worker = if self.long_launch(whole) {
            LONG_LAUNCH_TASKS_PER_WORKER
        } else {
            MIN_TASKS_PER_WORKER
        };
        p.groups(1).min(per_worker * self.workers)
    }

    /// Whether plan `x` of launch `p` runs on the caller alone or cuts the
    /// launch into at least `min_tasks` tasks ([`Planner::min_tasks`]).
    fn balanced(&self, p: &LaunchProfile, x: &Plan, min_tasks: usize) -> bool {
        let (tasks, _) = task_split(p.groups(x.config.block), x.grain, self.workers);
        x.grain == Grain::Caller || self.workers == 1 || tasks >= min_tasks
    }

    /// Whether a launch whose [`Planner::auto_on_caller`] plan is `on_caller`
    /// is long enough that `auto` plans and refinement measures only fine
    /// splits (see [`COARSE_SPLIT_MAX_ARRIVALS`]).
    fn long_launch(&self, on_caller: &Plan) -> bool {
        self.workers > 1
            && on_caller.predicted_us >= COARSE_SPLIT_MAX_ARRIVALS * self.model.helper_arrival_us
    }

    /// `auto`'s model choice before (or without) refinement.
    fn auto_plan(&self, p: &LaunchProfile) -> Plan {
        Self::best(self.auto_space(p, self.auto_on_caller(p)))
    }

    fn joint_all(&self, p: &LaunchProfile) -> Plan {
        let legacy = self.joint_legacy(p);
        let best = Self::best(self.joint_space(p));
        if best.predicted_us < legacy.predicted_us {
            best
        } else {
            legacy
        }
    }

    /// The oracle: an exhaustive measured search of the joint space (see
    /// [`search::successive_halving`]); the result is added to the tuning table.
    /// `measure` times a launch of `profile` with a candidate geometry and grain.
    pub fn oracle(&self, p: &LaunchProfile, measure: &mut Measure<'_>) -> Result<Plan> {
        p.validate()?;
        let space = self.joint_space(p);
        let cands: Vec<Candidate> = space.iter().map(|x| (x.config, x.grain)).collect();
        let pred: Vec<f64> = space.iter().map(|x| x.predicted_us).collect();
        let found = search::successive_halving(&cands, &pred, measure)?;
        let (config, grain) = found.candidate;
        self.with_seen(p, |s| {
            s.tuned = Some(found.candidate);
            s.settled = None;
        });
        lock(&self.tuned).entries.insert(
            self.key(p),
            Tuned {
                config,
                grain,
                measured_us: found.measured_us,
            },
        );
        Ok(Plan {
            source: PlanSource::Tuned,
            ..self.plan_of(p, config, grain)
        })
    }

    /// Counts one call of the launch `profile` planned by `auto`; `true` exactly
    /// once, on the [`REFINE_AFTER`]-th call of a launch that is neither tuned
    /// nor refined yet: the caller should then run [`Planner::refine`].
    pub fn due_for_refinement(&self, p: &LaunchProfile) -> bool {
        self.with_seen(p, |s| {
            if s.tuned.is_some() {
                return false;
            }
            s.calls = s.calls.saturating_add(1);
            s.calls == REFINE_AFTER && s.refined.is_none()
        })
    }

    /// The alternatives refinement measures: the model's choice first, then the
    /// model's next best distinct plans and the neighbours of its choice (block
    /// halved and doubled; legacy, caller and tasks of half or twice the groups).
    /// A launch the model puts under half a hot helper's arrival on the caller
    /// keeps to the caller's plans here too, as in `Planner::auto_space`,
    /// unless its inputs come from the pool; a long one
    /// (`COARSE_SPLIT_MAX_ARRIVALS`) to splits of `Planner::min_tasks` tasks.
    pub fn refinement_candidates(&self, p: &LaunchProfile, inputs: InputsFrom) -> Vec<Plan> {
        let whole = self.auto_on_caller(p);
        let mut out = self.refinement_neighbourhood(p, whole);
        if inputs == InputsFrom::Caller && self.caller_only(&whole) {
            out.retain(|x| x.grain == Grain::Caller);
        }
        if self.long_launch(&whole) {
            let min_tasks = self.min_tasks(p, &whole);
            out.retain(|x| self.balanced(p, x, min_tasks));
        }
        out
    }

    /// [`Planner::refinement_candidates`] before the caller-only filter
    /// (`whole` is the launch's [`Planner::auto_on_caller`] plan).
    fn refinement_neighbourhood(&self, p: &LaunchProfile, whole: Plan) -> Vec<Plan> {
        let mut space = self.auto_space(p, whole);
        // A stable sort: the first is `auto_plan`'s choice (the first minimum).
        space.sort_by(|a, b| a.predicted_us.total_cmp(&b.predicted_us));
        let first = space[0];
        let mut out = vec![first];
        let push = |out: &mut Vec<Plan>, x: Plan| {
            if !out
                .iter()
                .any(|o| o.config == x.config && o.grain == x.grain)
            {
                out.push(x);
            }
        };
        let c = first.config;
        let rows = p.segment_rows();
        let blocks = [c.block / 2, c.block * 2]
            .into_iter()
            .filter(|&b| b >= 1 && b <= rows);
        for block in blocks {
            push(
                &mut out,
                self.plan_of(p, LaunchConfig { block, ..c }, first.grain),
            );
        }
        let groups = p.groups(c.block);
        let mut grains = vec![Grain::Legacy, Grain::Caller];
        if let Grain::Tasks(k) = first.grain {
            grains.extend(Grain::tasks(k.get() / 2));
            grains.extend(Grain::tasks((k.get() * 2).min(groups)));
        } else {
            grains.extend(Grain::tasks(groups.div_ceil(4 * self.workers)));
        }
        for g in grains {
            push(&mut out, self.plan_of(p, c, g));
        }
        // Where `local` changes no output bit, the other locals too: the model
        // ranks them by a few percent it cannot resolve.
        if local_is_free(p) {
            for local in self.distinct_locals(p) {
                push(
                    &mut out,
                    self.plan_of(p, LaunchConfig { local, ..c }, first.grain),
                );
            }
        }
        // Parallel shapes the model may underrate: about 1, 2, 4, … 32 groups
        // per worker, legacy chunks and single-group tasks. (One group per
        // worker was the oracle's plan for fused 3x1024 rows, which the model
        // puts on the caller.)
        let per_seg = (rows as f64).max(1.0);
        for per_worker in [1usize, 2, 4, 8, 16, 32] {
            let want = (per_worker * self.workers) as f64 / p.segments() as f64;
            let block = ((per_seg / want).ceil() as usize).clamp(1, rows);
            if p.groups(block) < 2 {
                continue;
            }
            for g in [Grain::Legacy, Grain::tasks(1).expect("1 ≠ 0")] {
                push(&mut out, self.plan_of(p, LaunchConfig { block, ..c }, g));
            }
        }
        for x in space {
            if out.len() > REFINE_ALTERNATIVES {
                break;
            }
            push(&mut out, x);
        }
        out
    }

    /// Whether plan `x` of launch `p` hands work to the pool's helpers: more
    /// than one task with more than one worker (one task runs on the caller,
    /// whatever its grain).
    fn hands_off(&self, p: &LaunchProfile, x: &Plan) -> bool {
        let (tasks, _) = task_split(p.groups(x.config.block), x.grain, self.workers);
        self.workers > 1 && tasks > 1
    }

    /// The refined plan of `profile`, if refinement ran for it.
    pub fn refined(&self, p: &LaunchProfile) -> Option<Plan> {
        let (c, g) = self.with_seen(p, |s| s.refined)?;
        Some(Plan {
            source: PlanSource::Refined,
            ..self.plan_of(p, c, g)
        })
    }

    /// Run-time refinement of `profile`, whose inputs come from `inputs`:
    /// measures [`Planner::refinement_candidates`] with `measure` and keeps
    /// the model's choice unless an alternative timed side by side with it is
    /// clearly faster (see [`search::refine`]: more clearly for a pooled
    /// alternative to a choice on the caller); later `auto` plans of this
    /// launch return it.
    pub fn refine(
        &self,
        p: &LaunchProfile,
        inputs: InputsFrom,
        measure: &mut Measure<'_>,
    ) -> Result<Plan> {
        p.validate()?;
        let cands = self.refinement_candidates(p, inputs);
        let c: Vec<Candidate> = cands.iter().map(|x| (x.config, x.grain)).collect();
        let pred: Vec<f64> = cands.iter().map(|x| x.predicted_us).collect();
        let hands_off: Vec<bool> = cands.iter().map(|x| self.hands_off(p, x)).collect();
        let found = search::refine(&c, &pred, &hands_off, measure)?;
        self.with_seen(p, |s| {
            s.refined = Some(found.candidate);
            s.settled = None;
        });
        Ok(Plan {
            source: PlanSource::Refined,
            ..self.plan_of(p, found.candidate.0, found.candidate.1)
        })
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
            if (tasks.config, tasks.grain) != (legacy.config, legacy.grain) {
                assert!(tasks.predicted_us < TASKS_MARGIN * legacy.predicted_us);
                let gain = legacy.predicted_us - tasks.predicted_us;
                assert!(gain > p.model().helper_arrival_us, "{op} {shape}");
            }
            // A helper that arrives after every launch has ended leaves task
            // grain nothing to gain.
            let late = Planner::with_model(
                b,
                2,
                CostModel {
                    helper_arrival_us: 1e6,
                    ..CostModel::default()
                },
            );
            let (lt, ll) = (
                late.plan(Strategy::JointTasks, op, &shape)
                    .unwrap()
                    .unwrap(),
                late.plan(Strategy::JointLegacy, op, &shape)
                    .unwrap()
                    .unwrap(),
            );
            assert_eq!((lt.config, lt.grain), (ll.config, ll.grain), "{op} {shape}");
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

    /// Refinement measures only the caller's plans of a launch the model puts
    /// under half a helper's arrival there, and still offers the pool to
    /// larger ones, and to any launch whose inputs come from the pool; slower
    /// helpers keep more launches on the caller.
    #[test]
    fn refinement_keeps_tiny_launches_on_the_caller() {
        let tiny_with = |helper_arrival_us: f64| {
            let model = CostModel {
                helper_arrival_us,
                ..CostModel::default()
            };
            let p = Planner::with_model(Backend::best(8), 2, model);
            let mut tiny = 0;
            for (op, shape) in seed_cases() {
                let profile = LaunchProfile::for_op(op, &shape).unwrap();
                let cands = p.refinement_candidates(&profile, InputsFrom::Caller);
                assert_eq!(cands[0], p.auto_plan(&profile), "{op} {shape}");
                let pooled = |c: &[Plan]| c.iter().any(|x| x.grain != Grain::Caller);
                let on_caller = p.auto_on_caller(&profile);
                if p.caller_only(&on_caller) {
                    assert!(
                        on_caller.predicted_us < 0.5 * helper_arrival_us,
                        "{op} {shape}"
                    );
                    tiny += 1;
                    assert!(!pooled(&cands), "{op} {shape}: {cands:?}");
                } else {
                    assert!(pooled(&cands), "{op} {shape}: {cands:?}");
                }
                let after_pool = p.refinement_candidates(&profile, InputsFrom::Pool);
                assert_eq!(after_pool[0], cands[0], "{op} {shape}");
                if profile.groups(1) > 1 {
                    assert!(pooled(&after_pool), "{op} {shape}: {after_pool:?}");
                }
            }
            tiny
        };
        let (fast, slow) = (tiny_with(0.5), tiny_with(4.0));
        assert!(slow > 0, "no seed row is under 2 µs on the caller");
        assert!(
            slow > fast,
            "{slow} launches kept on the caller, {fast} with faster helpers"
        );
    }

    /// Refinement measures coarse splits (legacy's chunks, a few tasks) of the
    /// seed's shorter launches, but only balanced splits of its long ones;
    /// with one worker, every plan runs on the caller and none is dropped.
    #[test]
    fn refinement_keeps_long_launches_to_balanced_splits() {
        let p = Planner::new(Backend::best(8), 2);
        let (mut long, mut coarse) = (0, 0);
        for (op, shape) in seed_cases() {
            let profile = LaunchProfile::for_op(op, &shape).unwrap();
            let cands = p.refinement_candidates(&profile, InputsFrom::Caller);
            assert_eq!(cands[0], p.auto_plan(&profile), "{op} {shape}");
            let whole = p.auto_on_caller(&profile);
            let min_tasks = p.min_tasks(&profile, &whole);
            let unbalanced = cands
                .iter()
                .filter(|x| !p.balanced(&profile, x, min_tasks))
                .count();
            if p.long_launch(&whole) {
                long += 1;
                assert_eq!(unbalanced, 0, "{op} {shape}: {cands:?}");
                assert!(cands.len() > 1, "{op} {shape}: nothing to refine");
            } else {
                coarse += usize::from(unbalanced > 0);
            }
        }
        assert!(long > 0, "no seed launch is long");
        assert!(
            coarse > 0,
            "no shorter seed launch has a coarse alternative"
        );
        let one = Planner::new(Backend::best(8), 1);
        let profile = LaunchProfile::for_op(Op::RmsNorm, &Shape::rows(1024, 4096)).unwrap();
        assert!(!one.long_launch(&one.auto_on_caller(&profile)));
    }

    /// Only plans of more than one task on more than one worker hand off work.
    #[test]
    fn hands_off_means_several_tasks_on_several_workers() {
        let profile = LaunchProfile::for_op(Op::RmsNorm, &Shape::rows(17, 66)).unwrap();
        let on = |workers: usize, block: usize, grain: Grain| {
            let p = Planner::new(Backend::best(8), workers);
            let x = p.plan_of(&profile, LaunchConfig { local: 72, block }, grain);
            p.hands_off(&profile, &x)
        };
        let tasks = |k| Grain::tasks(k).expect("k ≠ 0");
        assert!(!on(2, 1, Grain::Caller));
        assert!(!on(2, 17, Grain::Legacy));
        assert!(!on(2, 1, tasks(17)));
        assert!(!on(1, 1, Grain::Legacy));
        assert!(on(2, 9, Grain::Legacy));
        assert!(on(2, 1, tasks(16)));
        assert!(on(8, 1, tasks(1)));
    }

    /// `auto`'s model plan on the pool cuts the launch into at least
    /// `MIN_TASKS_PER_WORKER` tasks per worker, a long launch into
    /// `LONG_LAUNCH_TASKS_PER_WORKER`, or a task per row.
    #[test]
    fn auto_gives_every_worker_several_tasks() {
        let mut cases = seed_cases();
        cases.push((Op::MaskedSoftmax, Shape::rows(65536, 64)));
        for workers in [2, 3, 8] {
            let p = Planner::new(Backend::best(8), workers);
            let (mut pooled, mut long) = (0, 0);
            for (op, shape) in &cases {
                let profile = LaunchProfile::for_op(*op, shape).unwrap();
                let plan = p.auto_plan(&profile);
                if plan.grain == Grain::Caller {
                    continue;
                }
                pooled += 1;
                let per_worker = if p.long_launch(&p.auto_on_caller(&profile)) {
                    long += 1;
                    LONG_LAUNCH_TASKS_PER_WORKER
                } else {
                    MIN_TASKS_PER_WORKER
                };
                let groups = profile.groups(plan.config.block);
                let (tasks, _) = task_split(groups, plan.grain, workers);
                let want = profile.groups(1).min(per_worker * workers);
                assert!(tasks >= want, "{op} {shape}, {workers} workers: {plan:?}");
            }
            assert!(pooled > 0, "no seed row is pooled with {workers} workers");
            assert!(long > 0, "no pooled row is long with {workers} workers");
        }
    }

    /// A row reduction's `local` under `auto`: the most accumulators whose
    /// compute the model puts within `ACCUMULATORS_TOLERANCE` of the
    /// cheapest on the caller.
    #[test]
    fn auto_takes_more_accumulators_within_the_tolerance() {
        let shape = Shape::rows(64, 1024);
        let profile = LaunchProfile::for_op(Op::MaskedSoftmax, &shape).unwrap();
        let b = Backend::best(8);
        let w = b.width();
        let planner = |elem_ns: [f64; 4]| {
            let mut model = CostModel::default();
            let wc = model.widths.iter_mut().find(|x| x.width == w).unwrap();
            let i = crate::plan::cost::ROW_OPS
                .iter()
                .position(|&o| o == Op::MaskedSoftmax)
                .unwrap();
            wc.rows[i].elem_ns = elem_ns;
            wc.rows[i].row_ns = [0.0; 4];
            Planner::with_model(b, 2, model)
        };
        // 1, 2, 4 and 8 accumulators: locals W, 2W, 4W and the row.
        let near = |x: f64| 1.0 + x * ACCUMULATORS_TOLERANCE;
        for (elem_ns, local) in [
            ([near(0.8), near(0.5), near(0.2), 1.0], 1024),
            ([1.0, near(0.5), near(0.8), near(1.5)], 4 * w),
            ([1.0, near(0.5), near(1.5), near(2.0)], 2 * w),
            ([1.0, near(1.5), near(2.0), near(3.0)], w),
        ] {
            let chosen = planner(elem_ns).auto_on_caller(&profile);
            assert_eq!(chosen.config.local, local, "{elem_ns:?}");
            assert_eq!(chosen.grain, Grain::Caller);
        }
    }

    /// The graph's own row softmax under `auto`: the fewest accumulators
    /// whose compute the model puts within `ACCUMULATORS_TOLERANCE` of the
    /// cheapest (a calibration in the host's fast phase puts the whole row
    /// level with local W, and it runs ~20 % slower in the slow phase).
    #[test]
    fn auto_takes_the_fewest_accumulators_within_the_tolerance_for_the_graph_softmax() {
        // An unfused chain's softmax: one input, one output, two reductions.
        let profile = LaunchProfile::rows(64, 1024, 1024, 8.0, 12.0, 2);
        assert!(fewest_accumulators_near_cheapest(&profile));
        let b = Backend::best(8);
        let w = b.width();
        let planner = |softmax_elem_ns: [f64; 4]| {
            let mut model = CostModel::default();
            let wc = model.widths.iter_mut().find(|x| x.width == w).unwrap();
            wc.graph.softmax_elem_ns = softmax_elem_ns;
            wc.rows[0].row_ns = [0.0; 4];
            Planner::with_model(b, 2, model)
        };
        let near = |x: f64| 1.0 + x * ACCUMULATORS_TOLERANCE;
        for (elem_ns, local) in [
            // The fast phase's calibration: flat, the whole row cheapest.
            ([near(0.8), near(0.9), near(0.95), 1.0], w),
            // The slow phase's: the whole row dearer.
            ([1.0, near(0.5), near(3.0), near(10.0)], w),
            ([near(1.5), near(0.5), 1.0, near(2.0)], 2 * w),
            ([near(3.0), near(2.0), near(1.5), 1.0], 1024),
        ] {
            let chosen = planner(elem_ns).auto_on_caller(&profile);
            assert_eq!(chosen.config.local, local, "{elem_ns:?}");
        }
        // The row operators' own kernels keep the most.
        for op in [Op::RmsNorm, Op::LayerNorm, Op::MaskedSoftmax] {
            let p = LaunchProfile::for_op(op, &Shape::rows(64, 1024)).unwrap();
            assert!(!fewest_accumulators_near_cheapest(&p), "{op}");
        }
        let map = LaunchProfile::rows(64, 1024, 1024, 12.0, 1.0, 0);
        assert!(!fewest_accumulators_near_cheapest(&map));
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
