//! Runs the sections: inputs once per row, a verification launch per candidate,
//! then rounds of interleaved timing (each candidate's samples in turns of at
//! most 10, after a warm-up) with the candidate order rotated. The rounds are
//! taken round-major over the rows of every section: round 1 of every row,
//! then round 2, … (see `WINDOW_BYTES`). A sample is one call, or for a row
//! whose fastest candidate runs under 5 µs, as many back-to-back calls as make
//! it last 5 µs.

use super::model::{
    CandidateConfig, FixedGeometry, Meta, NamedMap, PlanInfo, RatioSpec, Report, RowResult,
    SectionResult,
};
use super::stats::{paired_ratios, rotation, summarize, table_time, turns};
use super::{Planner, Strategy};
use crate::bench::suites::Suite;
use crate::bench::timing::{SAMPLE_US, calls_for, median, time_samples};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::graph::exec::node_profile;
use crate::ops::{self, LaunchConfig, Op, OwnedInputs, Shape};
use crate::packet::Backend;
use crate::plan::calibrate::ModelSource;
use crate::pool::CallerPin;
use crate::pool::{Grain, PoolConfig};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::simt::PacketMode;
use std::path::PathBuf;

/// How to run the report. [`Default`] is the seed's setting.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportConfig {
    /// Rounds per row (≥ 1).
    pub rounds: usize,
    /// Timed samples per candidate per round (≥ 1): a sample is one call, or
    /// several back-to-back calls in a row whose calls are short (see
    /// [`SAMPLE_US`]).
    pub reps: usize,
    /// Untimed calls per candidate before each round of a row (other rows'
    /// rounds ran in between).
    pub warmup: usize,
    /// Workers requested (the calling thread included).
    pub workers: usize,
    /// Packet width; `None` = the widest ≤ 8 (the seed's W8).
    pub width: Option<usize>,
    /// Full-packet specialization.
    pub full_packet: bool,
    /// Fusion: each operator one launch (`true`), or DESIGN.md's unfused chain
    /// of launches, each planned on its own (`false`, the seed's setting).
    pub fusion: bool,
    /// Seed of the generated inputs.
    pub seed: u64,
    /// Pin the calling thread to the first allowed CPU while measuring (the
    /// pool's helpers are pinned to the others; see the pool's `affinity` module).
    pub pin_caller: bool,
    /// Where the planner's cost model comes from (default: the calibration
    /// cache, calibrating first if it is missing or invalid).
    pub model: ModelSource,
    /// The calibration cache directory (`None` = the default location).
    pub cache_dir: Option<PathBuf>,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            rounds: 7,
            reps: 50,
            warmup: 5,
            workers: 8,
            width: None,
            full_packet: true,
            fusion: false,
            seed: 1,
            pin_caller: true,
            model: ModelSource::CachedOrCalibrate,
            cache_dir: None,
        }
    }
}

impl ReportConfig {
    /// Rejects settings the harness cannot honour.
    pub fn validate(&self) -> Result<()> {
        if self.rounds == 0 {
            return Err(Error::BadArgument("--rounds must be at least 1".into()));
        }
        if self.reps == 0 {
            return Err(Error::BadArgument("--reps must be at least 1".into()));
        }
        if self.workers == 0 {
            return Err(Error::BadArgument("--workers must be at least 1".into()));
        }
        Ok(())
    }
}

/// Where a section's candidates come from.
#[derive(Clone, Debug, PartialEq)]
pub enum CandidateSet {
    /// One candidate per planner strategy, named after it.
    Strategies(Vec<Strategy>),
    /// A fixed geometry and one candidate per grain, named `grain_<code>`.
    FixedGrain {
        /// The geometry every candidate runs.
        config: LaunchConfig,
        /// The grains.
        grains: Vec<Grain>,
    },
}

/// A section to run: its candidates, its ratio and its rows.
#[derive(Clone, Debug, PartialEq)]
pub struct SectionSpec {
    /// Section name.
    pub name: String,
    /// The candidates.
    pub candidates: CandidateSet,
    /// Numerator and denominator of the paired ratio (candidate names).
    pub ratio: (String, String),
    /// Every candidate must run the same kernel variant with byte-identical output.
    pub requires_identical: bool,
    /// The rows.
    pub cases: Vec<(Op, Shape)>,
}

impl SectionSpec {
    /// The seed's section for `suite`, with its rows.
    pub fn for_suite(suite: Suite) -> SectionSpec {
        Self::for_suite_with(suite, suite.cases())
    }

    /// The seed's section for `suite` on a custom list of rows.
    pub fn for_suite_with(suite: Suite, cases: Vec<(Op, Shape)>) -> SectionSpec {
        match suite {
            Suite::Pilot | Suite::Validation => SectionSpec {
                name: suite.name().into(),
                candidates: CandidateSet::Strategies(vec![
                    Strategy::Whole,
                    Strategy::Local,
                    Strategy::JointLegacy,
                    Strategy::JointTasks,
                ]),
                ratio: ("joint_tasks".into(), "joint_legacy".into()),
                requires_identical: false,
                cases,
            },
            Suite::FixedGrain => SectionSpec {
                name: suite.name().into(),
                candidates: CandidateSet::FixedGrain {
                    config: LaunchConfig {
                        local: 8,
                        block: 32,
                    },
                    grains: [0, 1, 3, u32::MAX].map(Grain::from_u32).to_vec(),
                },
                ratio: ("grain_4294967295".into(), "grain_0".into()),
                requires_identical: true,
                cases,
            },
        }
    }

    /// The `auto` section: our policy against the oracle on `cases`, paired
    /// ratio auto / oracle.
    pub fn auto(cases: Vec<(Op, Shape)>) -> SectionSpec {
        SectionSpec {
            name: "auto".into(),
            candidates: CandidateSet::Strategies(vec![Strategy::Auto, Strategy::Oracle]),
            ratio: ("auto".into(), "oracle".into()),
            requires_identical: false,
            cases,
        }
    }

    /// A section named `name` comparing `strategies` on `cases`; the paired ratio
    /// is joint_tasks / joint_legacy when both are present, else last / first.
    pub fn strategies(
        name: &str,
        strategies: Vec<Strategy>,
        cases: Vec<(Op, Shape)>,
    ) -> Result<SectionSpec> {
        if strategies.is_empty() {
            return Err(Error::BadArgument(
                "--strategies needs at least one strategy".into(),
            ));
        }
        let has = |s| strategies.contains(&s);
        let ratio = if has(Strategy::JointTasks) && has(Strategy::JointLegacy) {
            ("joint_tasks".to_string(), "joint_legacy".to_string())
        } else if has(Strategy::Auto) && has(Strategy::Oracle) {
            ("auto".to_string(), "oracle".to_string())
        } else {
            (
                strategies[strategies.len() - 1].name().to_string(),
                strategies[0].name().to_string(),
            )
        };
        Ok(SectionSpec {
            name: name.into(),
            candidates: CandidateSet::Strategies(strategies),
            ratio,
            requires_identical: false,
            cases,
        })
    }

    /// Candidate names in column order.
    pub fn candidate_names(&self) -> Vec<String> {
        match &self.candidates {
            CandidateSet::Strategies(s) => s.iter().map(|s| s.name().to_string()).collect(),
            CandidateSet::FixedGrain { grains, .. } => grains
                .iter()
                .map(|g| format!("grain_{}", g.as_u32()))
                .collect(),
        }
    }

    fn check(&self) -> Result<()> {
        let names = self.candidate_names();
        for r in [&self.ratio.0, &self.ratio.1] {
            if !names.contains(r) {
                return Err(Error::BadArgument(format!(
                    "section {}: ratio candidate {r:?} is not one of {names:?}",
                    self.name
                )));
            }
        }
        Ok(())
    }
}

/// What the harness reports while it runs.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// Section name.
    pub section: &'a str,
    /// The row being measured, e.g. `rmsnorm 17×65`.
    pub row: &'a str,
    /// Rounds finished in this row; 0 when the row has just been prepared
    /// (its plans resolved, every candidate verified), before its rounds.
    pub round: usize,
}

/// The benchmark harness: a runtime, a planner and the settings.
pub struct Harness {
    runtime: Runtime,
    cfg: ReportConfig,
}

impl Harness {
    /// Starts the runtime (pool and backend) for `cfg`.
    pub fn new(cfg: ReportConfig) -> Result<Harness> {
        cfg.validate()?;
        let backend = match cfg.width {
            Some(w) => Backend::native(w)?,
            None => Backend::best(8),
        };
        let runtime = Runtime::new(RuntimeConfig {
            pool: PoolConfig::with_workers(cfg.workers),
            width: Some(backend.width()),
            mode: PacketMode::from_switch(cfg.full_packet),
            model: cfg.model,
            cache_dir: cfg.cache_dir.clone(),
        })?;
        Ok(Harness { runtime, cfg })
    }

    fn planner(&self) -> &Planner {
        self.runtime.planner()
    }

    /// Notes from loading the planner's caches (warnings, a calibration).
    pub fn notes(&self) -> &[String] {
        self.runtime.notes()
    }

    /// The runtime every candidate runs on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The report's header data.
    pub fn meta(&self) -> Meta {
        let b = self.runtime.backend();
        Meta {
            dtype: "FP32".into(),
            width: b.width(),
            backend: b.name().into(),
            workers_requested: self.runtime.pool().workers_requested(),
            workers_granted: self.runtime.pool().workers_granted(),
            cores: self.runtime.pool().cores(),
            full_packet: self.cfg.full_packet,
            fusion: self.cfg.fusion,
            rounds: self.cfg.rounds,
            reps: self.cfg.reps,
            warmup: self.cfg.warmup,
            seed: self.cfg.seed,
            cpu: crate::bench::machine::cpu_model(),
            isa: crate::bench::machine::isa_features()
                .into_iter()
                .map(String::from)
                .collect(),
            load_start: None,
            caller_cpu: None,
            load_end: crate::bench::machine::load_average(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }

    /// Total rounds `run` will time (for a progress bar; `Progress` reports
    /// these, and once per row its preparation, as round 0).
    pub fn total_rounds(&self, specs: &[SectionSpec]) -> usize {
        specs.iter().map(|s| s.cases.len()).sum::<usize>() * self.cfg.rounds
    }

    /// Runs every section; `progress` is called once per row when it is
    /// prepared and after each of its rounds.
    ///
    /// The rows of all the sections are prepared (inputs, plans, verification)
    /// a window at a time, windows of at most `WINDOW_BYTES` of buffers (a
    /// larger row is a window of its own); then round 1 of every row of the
    /// window is timed, then round 2, and so on, so a row's rounds are spread
    /// over the whole window (tens of seconds for the seed's sections) rather
    /// than taken within a few milliseconds. See `WINDOW_BYTES` for why.
    pub fn run(
        &self,
        specs: &[SectionSpec],
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<Report> {
        for s in specs {
            s.check()?;
        }
        let load_start = crate::bench::machine::load_average();
        let pin = if self.cfg.pin_caller {
            CallerPin::first_allowed()
        } else {
            CallerPin::none()
        };
        let mut rows: Vec<Vec<RowResult>> = specs
            .iter()
            .map(|s| Vec::with_capacity(s.cases.len()))
            .collect();
        let mut window: Vec<RowRun> = Vec::new();
        let mut bytes = 0usize;
        for (section, spec) in specs.iter().enumerate() {
            for (op, shape) in &spec.cases {
                let need = row_bytes(*op, shape);
                if !window.is_empty() && bytes + need > WINDOW_BYTES {
                    self.time_window(specs, std::mem::take(&mut window), &mut rows, progress)?;
                    bytes = 0;
                }
                let row = self.prepare_row(spec, section, *op, shape)?;
                progress(Progress {
                    section: &spec.name,
                    row: &row.label,
                    round: 0,
                });
                window.push(row);
                bytes += need;
            }
        }
        self.time_window(specs, window, &mut rows, progress)?;
        let mut sections: Vec<SectionResult> = specs
            .iter()
            .zip(rows)
            .map(|(spec, rows)| section_result(spec, rows))
            .collect();
        // Every row carries every strategy's plan as the planner ends the run
        // (refined and tuned plans included).
        for sec in &mut sections {
            for row in &mut sec.rows {
                let op: Op = row.op.parse()?;
                let shape = Shape::from_dims(op, &row.shape)?;
                row.plans = self.plans_of(op, &shape)?;
            }
            sec.prediction = super::model::PredictionQuality::of(sec);
        }
        Ok(Report {
            meta: Meta {
                load_start,
                caller_cpu: pin.cpu(),
                ..self.meta()
            },
            sections,
        })
    }

    /// Every strategy's plan for a row, as the planner stands (`null`: not
    /// applicable, or the oracle never searched this launch). For a graph of
    /// several launches: the last launch's geometry and grain, the sum of the
    /// launches' predictions, and the source of the last.
    fn plans_of(&self, op: Op, shape: &Shape) -> Result<NamedMap<Option<PlanInfo>>> {
        let graph = self.runtime.graph(op, shape, self.cfg.fusion)?;
        let planner = self.planner();
        let mut v = Vec::new();
        for s in Strategy::ALL {
            let mut total: Option<PlanInfo> = None;
            for i in 0..graph.launches() {
                let p = node_profile(&graph, i)?;
                let plan = match s {
                    Strategy::Auto => match planner.refined(&p) {
                        Some(x) => Some(x),
                        None => planner.plan_launch(s, &p)?,
                    },
                    Strategy::Oracle => planner.plan_launch(s, &p).ok().flatten(),
                    _ => planner.plan_launch(s, &p)?,
                };
                let Some(plan) = plan else {
                    total = None;
                    break;
                };
                let before = total.map_or(0.0, |t| t.predicted_us);
                total = Some(PlanInfo {
                    predicted_us: before + plan.predicted_us,
                    ..PlanInfo::from(plan)
                });
            }
            v.push((s.name().to_string(), total));
        }
        Ok(NamedMap(v))
    }

    /// Each candidate's plan for every launch of `graph`; `None` = unsupported.
    /// `auto` is refined on these inputs as repeated calls would be (ignoring
    /// any tuned result); `oracle` always searches afresh.
    fn resolve(
        &self,
        spec: &SectionSpec,
        graph: &Graph,
        tensors: &[&[f32]],
    ) -> Result<Vec<Option<GraphPlan>>> {
        let n = graph.launches();
        match &spec.candidates {
            CandidateSet::Strategies(list) => {
                let planner = self.planner();
                let len = graph.tensor(graph.output()).shape.len();
                let mut scratch = crate::buffer::zeros(len);
                let mut v = Vec::with_capacity(list.len());
                for &s in list {
                    let mut plans = Vec::with_capacity(n);
                    if matches!(s, Strategy::Auto | Strategy::Oracle) {
                        // Both measure each launch on these inputs as the graph runs.
                        self.runtime.run_graph(
                            graph,
                            tensors,
                            &mut scratch,
                            &mut |_, p, from, measure| {
                                let plan = match s {
                                    Strategy::Auto => match planner.refined(p) {
                                        Some(x) => x,
                                        None => planner.refine(p, from, measure)?,
                                    },
                                    _ => planner.oracle(p, measure)?,
                                };
                                plans.push((plan.config, plan.grain));
                                Ok((plan.config, plan.grain))
                            },
                        )?;
                        v.push(Some(plans));
                        continue;
                    }
                    for i in 0..n {
                        match planner.plan_launch(s, &node_profile(graph, i)?)? {
                            Some(plan) => plans.push((plan.config, plan.grain)),
                            None => break,
                        }
                    }
                    v.push((plans.len() == n).then_some(plans));
                }
                Ok(v)
            }
            CandidateSet::FixedGrain { config, grains } => Ok(grains
                .iter()
                .map(|&g| Some(vec![(*config, g); n]))
                .collect()),
        }
    }

    /// Times the rounds of a window of prepared rows round-major (round 1 of
    /// every row, then round 2, …) and appends each row's result to its
    /// section's `rows`.
    fn time_window(
        &self,
        specs: &[SectionSpec],
        mut window: Vec<RowRun>,
        rows: &mut [Vec<RowResult>],
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<()> {
        for round in 0..self.cfg.rounds {
            for row in &mut window {
                self.time_round(row, round)?;
                progress(Progress {
                    section: &specs[row.section].name,
                    row: &row.label,
                    round: round + 1,
                });
            }
        }
        for row in window {
            let section = row.section;
            rows[section].push(self.finish_row(&specs[section], row)?);
        }
        Ok(())
    }

    /// Prepares a row: its inputs, its candidates' plans (refinement and the
    /// oracle search run here), one verification launch per candidate, the
    /// warm-up and the probe that sets its calls per sample.
    fn prepare_row(
        &self,
        spec: &SectionSpec,
        section: usize,
        op: Op,
        shape: &Shape,
    ) -> Result<RowRun> {
        let rt = &self.runtime;
        let names = spec.candidate_names();
        let label = format!("{op} {}", super::model::shape_label(&shape.dims()));
        let inputs = OwnedInputs::generate(op, *shape, self.cfg.seed)?;
        let reference = ops::reference(inputs.view(), shape);
        let tol = ops::tolerance(op);
        let graph = rt.graph(op, shape, self.cfg.fusion)?;
        let view = inputs.view();
        let (tensor_array, tensor_count) = view.tensors();
        let tensors = &tensor_array[..tensor_count];
        let resolved = self.resolve(spec, &graph, tensors)?;
        let active: Vec<usize> = (0..names.len())
            .filter(|&i| resolved[i].is_some())
            .collect();
        let len = ops::output_len(shape);
        // One output buffer for every candidate: where a buffer lands in the
        // caches (its physical pages) can change a launch's time by 10–30 %, and
        // that must not be credited to one candidate's plan. Identical plans
        // measured this way pair at ≈ 1.0; with a buffer each they did not.
        let mut out = crate::buffer::filled(f32::NAN, len);
        let mut problems = Vec::new();
        let mut ok = true;
        let mut max_abs_err = 0.0f64;
        let mut hashes: Vec<Option<String>> = vec![None; names.len()];
        let mut variants: Vec<Option<String>> = vec![None; names.len()];

        // Verification: one launch per candidate into a NaN-poisoned buffer, so
        // a group that is never written cannot hide behind stale data.
        for &i in &active {
            let plans = resolved[i].as_ref().expect("active");
            out.fill(f32::NAN);
            rt.run_planned(&graph, tensors, &mut out, plans)?;
            let check = ops::compare(&out, &reference, tol);
            max_abs_err = max_abs_err.max(check.max_abs_err);
            if !check.ok {
                ok = false;
                problems.push(format!(
                    "{}: {} of {len} elements outside tolerance (max |err| {:.3e})",
                    names[i], check.failures, check.max_abs_err
                ));
            }
            hashes[i] = Some(ops::output_hash(&out));
            variants[i] = Some(rt.graph_variant(&graph, tensors, plans)?);
        }

        // Calls per sample, one count for every candidate of the row (so each
        // pays the same share of a clock read): enough calls of the fastest to
        // last `SAMPLE_US`. Timed alone, a 0.2 µs call reads in the clock's
        // steps (10 ns on a Firecracker guest), and one step is 5 %.
        let mut fastest_us = f64::INFINITY;
        for &i in &active {
            let plans = resolved[i].as_ref().expect("active");
            for _ in 0..self.cfg.warmup {
                rt.run_planned(&graph, tensors, &mut out, plans)?;
            }
            let single = rt.median_call_us(PROBE_CALLS, || {
                rt.run_planned(&graph, tensors, &mut out, plans)
            })?;
            fastest_us = fastest_us.min(single);
        }
        // 1 when no candidate runs (`calls_for` of an infinite call).
        let per_sample = calls_for(fastest_us, SAMPLE_US);
        let per_turn = samples_per_turn(fastest_us * per_sample as f64);
        Ok(RowRun {
            section,
            op,
            shape: *shape,
            label,
            p50s: vec![Vec::with_capacity(self.cfg.rounds); names.len()],
            names,
            inputs,
            graph,
            resolved,
            active,
            out,
            per_sample,
            per_turn,
            hashes,
            variants,
            problems,
            ok,
            max_abs_err,
        })
    }

    /// Times one round of a prepared row: the warm-up calls of every
    /// candidate (other rows ran since its last round), then every candidate
    /// N samples, in turns of `per_turn` (at most `TURN_SAMPLES`), the candidates' order
    /// rotated per round. A turn of several samples starts with untimed calls
    /// until a pooled plan's helpers take part (`Runtime::warm_up_planned`):
    /// they park during a caller-only candidate's turn longer than their spin
    /// (100 µs), and came back 30–70 µs later, at times after 600 µs, so the
    /// first calls of the next pooled turn ran on the caller alone. A turn of
    /// one sample (a call of 500 µs or more) does without: a second call
    /// would double the row's time, and a helper that late costs a call that
    /// long at most half its delay, 7 % of 500 µs for 2 workers.
    fn time_round(&self, row: &mut RowRun, round: usize) -> Result<()> {
        let rt = &self.runtime;
        let view = row.inputs.view();
        let (tensor_array, tensor_count) = view.tensors();
        let tensors = &tensor_array[..tensor_count];
        let (graph, out) = (&row.graph, &mut row.out);
        for &i in &row.active {
            let plans = row.resolved[i].as_ref().expect("active");
            for _ in 0..self.cfg.warmup {
                rt.run_planned(graph, tensors, out, plans)?;
            }
        }
        let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(self.cfg.reps); row.names.len()];
        for samples in turns(self.cfg.reps, row.per_turn) {
            for j in rotation(row.active.len(), round) {
                let i = row.active[j];
                let plans = row.resolved[i].as_ref().expect("active");
                if row.per_turn > 1 {
                    rt.warm_up_planned(graph, tensors, out, plans)?;
                }
                let mut failure = None;
                times[i].extend(time_samples(0, samples, row.per_sample, || {
                    if let Err(e) = rt.run_planned(graph, tensors, out, plans) {
                        failure = Some(e);
                    }
                }));
                if let Some(e) = failure {
                    return Err(e);
                }
            }
        }
        for &i in &row.active {
            row.p50s[i].push(median(&times[i]));
        }
        Ok(())
    }

    /// A row's result after its rounds: each candidate runs once more into a
    /// poisoned buffer and must reproduce its verified output bit for bit;
    /// then the identity checks and the paired ratios.
    fn finish_row(&self, spec: &SectionSpec, row: RowRun) -> Result<RowResult> {
        let RowRun {
            op,
            shape,
            names,
            inputs,
            graph,
            resolved,
            active,
            mut out,
            per_sample,
            per_turn,
            p50s,
            hashes,
            variants,
            mut problems,
            mut ok,
            max_abs_err,
            ..
        } = row;
        let view = inputs.view();
        let (tensor_array, tensor_count) = view.tensors();
        let tensors = &tensor_array[..tensor_count];
        for &i in &active {
            out.fill(f32::NAN);
            let plans = resolved[i].as_ref().expect("active");
            self.runtime.run_planned(&graph, tensors, &mut out, plans)?;
            let h = ops::output_hash(&out);
            if hashes[i].as_deref() != Some(h.as_str()) {
                ok = false;
                problems.push(format!(
                    "{}: output changed between calls ({} then {h})",
                    names[i],
                    hashes[i].as_deref().unwrap_or("-")
                ));
            }
        }

        let (mut outputs_identical, mut kernel_identical) = (None, None);
        if spec.requires_identical && !active.is_empty() {
            let h0 = &hashes[active[0]];
            let same_out = active.iter().all(|&i| &hashes[i] == h0);
            let v0 = &variants[active[0]];
            let same_kernel = active.iter().all(|&i| &variants[i] == v0);
            if !same_out {
                problems.push(format!(
                    "outputs differ between candidates: {}",
                    active
                        .iter()
                        .map(|&i| format!("{}={}", names[i], hashes[i].as_deref().unwrap_or("-")))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if !same_kernel {
                problems.push(format!(
                    "kernel variants differ between candidates: {}",
                    active
                        .iter()
                        .map(|&i| format!("{}={}", names[i], variants[i].as_deref().unwrap_or("-")))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            outputs_identical = Some(same_out);
            kernel_identical = Some(same_kernel);
        }

        let idx = |name: &str| names.iter().position(|n| n == name).expect("checked");
        let (num, den) = (idx(&spec.ratio.0), idx(&spec.ratio.1));
        let round_ratios = if p50s[num].is_empty() || p50s[den].is_empty() {
            Vec::new()
        } else {
            paired_ratios(&p50s[num], &p50s[den])
        };
        Ok(RowResult {
            op: op.name().into(),
            shape: shape.dims(),
            times_us: NamedMap(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n.clone(), table_time(&p50s[i])))
                    .collect(),
            ),
            ratio: summarize(&round_ratios),
            round_ratios,
            round_p50_us: NamedMap(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n.clone(), (!p50s[i].is_empty()).then(|| p50s[i].clone())))
                    .collect(),
            ),
            configs: NamedMap(
                names
                    .iter()
                    .zip(&resolved)
                    .map(|(n, r)| {
                        let last = r.as_ref().and_then(|plans| plans.last());
                        (n.clone(), last.map(|&(c, g)| candidate_config(c, g)))
                    })
                    .collect(),
            ),
            launches: graph.launches(),
            calls_per_sample: per_sample,
            samples_per_turn: per_turn,
            launch_configs: NamedMap(if graph.launches() > 1 {
                names
                    .iter()
                    .zip(&resolved)
                    .map(|(n, r)| {
                        let all = r.as_ref().map(|plans| {
                            plans.iter().map(|&(c, g)| candidate_config(c, g)).collect()
                        });
                        (n.clone(), all)
                    })
                    .collect()
            } else {
                Vec::new()
            }),
            variants: NamedMap(names.iter().cloned().zip(variants).collect()),
            plans: NamedMap(Vec::new()),
            output_hashes: NamedMap(names.iter().cloned().zip(hashes).collect()),
            outputs_identical,
            kernel_identical,
            max_abs_err,
            ok,
            problems,
        })
    }
}

/// The samples a candidate takes in one turn of a round before the next
/// candidate's turn: a round's N samples per candidate are taken in turns, so
/// a change in the machine's speed during the round lands on every candidate
/// alike. Each candidate running its N calls in one go, large rows' paired
/// ratios spread over 0.63–1.68 between the rounds of one run for two
/// identical plans (4096x1024, 50 calls of 0.5–0.7 ms, AMD EPYC, 2 vCPUs,
/// 2026-12-06). A turn's first call may find the caches as another plan left
/// them; in turns of 10 it is one call in 10, which the round's median hardly
/// sees.
pub(crate) const TURN_SAMPLES: usize = 10;

/// The longest a turn lasts, µs, where a sample is long enough to cut turns
/// short of [`TURN_SAMPLES`] (one sample at least). The host's slow phases
/// last 50–500 ms (see [`WINDOW_BYTES`]); a turn of 10 calls of 1.5 ms is
/// 15 ms, and a round of four candidates 300 ms, so a phase fell on one
/// candidate's turns and not another's: two identical plans (joint_tasks and
/// joint_legacy both legacy, local 32, block 2048) of rmsnorm 4096x1024 read
/// round ratios 0.84–1.09 and a median of 1.067 in one bench, the round p50s
/// of one plan 1357–1790 µs (AMD EPYC, 2 vCPUs, 2026-12-07). A call that long
/// streams its data from memory, so the cache state the previous turn leaves
/// hardly matters to it.
pub(crate) const TURN_US: f64 = 1000.0;

/// Samples per turn for a row whose samples last about `sample_us`: as many as
/// fit in [`TURN_US`], between 1 and [`TURN_SAMPLES`].
fn samples_per_turn(sample_us: f64) -> usize {
    if sample_us.is_finite() && sample_us > 0.0 {
        ((TURN_US / sample_us) as usize).clamp(1, TURN_SAMPLES)
    } else {
        TURN_SAMPLES
    }
}

/// Calls per candidate, after the warm-up, whose median sets a row's calls
/// per sample.
const PROBE_CALLS: usize = 5;

/// The most bytes of inputs and outputs held by the rows of one window, whose
/// rounds are timed round-major. The host's slow phases (the caller's calls
/// 1.5× slower, or helpers late) last 50–500 ms and cover 15–25 % of the time
/// (a 0.6 µs launch timed in 50 ms windows for 20 s, AMD EPYC, 2 vCPUs,
/// 2026-12-07): a row whose rounds are all taken within a few milliseconds
/// lands in one phase, and where its candidates feel the phase differently,
/// every round of it pairs at the same skewed ratio (1.19 for all 7 rounds of
/// a 0.8 µs row). Rounds a full pass of the window apart meet the phases
/// independently, and the median round is the typical one. Phases of 10 s or
/// more also occur: with a window per section (a pass of about 2 s), rows
/// read 1.24 in five rounds of seven, so the window spans the sections, and
/// 2 GiB holds every row of the seed's four (a pass of about 8 s).
const WINDOW_BYTES: usize = 2 << 30;

/// A row between its preparation and its result: inputs, plans, what the
/// verification found, and the round p50s timed so far.
struct RowRun {
    /// Its section's index in the specs of the run.
    section: usize,
    op: Op,
    shape: Shape,
    label: String,
    names: Vec<String>,
    inputs: OwnedInputs,
    graph: std::sync::Arc<Graph>,
    /// Every candidate's plan per launch; `None` = unsupported.
    resolved: Vec<Option<GraphPlan>>,
    /// The candidates with a plan.
    active: Vec<usize>,
    /// The output buffer every candidate writes (see `Harness::prepare_row`).
    out: crate::buffer::AlignedBuf,
    per_sample: usize,
    /// Samples per turn ([`samples_per_turn`]).
    per_turn: usize,
    /// Per candidate, one p50 per timed round.
    p50s: Vec<Vec<f64>>,
    hashes: Vec<Option<String>>,
    variants: Vec<Option<String>>,
    problems: Vec<String>,
    ok: bool,
    max_abs_err: f64,
}

/// Bytes of the buffers a row holds from its preparation to its result: its
/// inputs and its output.
fn row_bytes(op: Op, shape: &Shape) -> usize {
    let elements: usize = ops::input_lens(op, shape).iter().sum::<usize>() + ops::output_len(shape);
    elements * std::mem::size_of::<f32>()
}

/// One geometry and grain per launch of a graph.
type GraphPlan = Vec<(LaunchConfig, Grain)>;

/// A section's result from its rows' results, in the order of its cases
/// (`prediction` is filled in once the planner's final plans are known).
fn section_result(spec: &SectionSpec, rows: Vec<RowResult>) -> SectionResult {
    let fixed = match &spec.candidates {
        CandidateSet::FixedGrain { config, .. } => Some(FixedGeometry {
            local: config.local,
            block: config.block,
        }),
        CandidateSet::Strategies(_) => None,
    };
    SectionResult {
        name: spec.name.clone(),
        candidates: spec.candidate_names(),
        ratio: RatioSpec {
            num: spec.ratio.0.clone(),
            den: spec.ratio.1.clone(),
        },
        requires_identical: spec.requires_identical,
        fixed,
        prediction: None,
        rows,
    }
}

fn candidate_config(c: LaunchConfig, g: Grain) -> CandidateConfig {
    CandidateConfig {
        local: c.local,
        block: c.block,
        grain: g.as_u32(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::suites::seed_cases;

    #[test]
    fn the_seed_sections_fit_one_window() {
        let sections = [
            Suite::Pilot.cases(),
            Suite::Validation.cases(),
            Suite::FixedGrain.cases(),
            seed_cases(),
        ];
        let bytes: usize = sections
            .iter()
            .flatten()
            .map(|(op, shape)| row_bytes(*op, shape))
            .sum();
        assert!(bytes < WINDOW_BYTES, "{bytes} bytes");
    }

    #[test]
    fn turns_last_about_a_millisecond_and_hold_one_sample_at_least() {
        for (sample_us, want) in [
            (5.0, TURN_SAMPLES),
            (100.0, TURN_SAMPLES),
            (250.0, 4),
            (600.0, 1),
            (1500.0, 1),
            (f64::INFINITY, TURN_SAMPLES),
        ] {
            assert_eq!(samples_per_turn(sample_us), want, "{sample_us} µs");
        }
    }
}
