//! The runtime a caller creates and owns: a worker pool, a packet backend and the
//! full-packet setting. Nothing here is global state.
//!
//! Any `&[f32]` will do for inputs and outputs; cache-line aligned ones
//! ([`buffer`](crate::buffer)) run memory-bound operators fastest.
//!
//! ```
//! use taskgrain::buffer;
//! use taskgrain::ops::{OpInputs, Op, Shape};
//! use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};
//!
//! let rt = Runtime::new(RuntimeConfig::default())?;
//! let (rows, cols) = (4, 64);
//! let x = buffer::filled(1.0, rows * cols);
//! let w = vec![1.0f32; cols]; // a plain Vec works too
//! let mut y = buffer::zeros(rows * cols);
//! let shape = Shape::rows(rows, cols);
//! let inputs = OpInputs::new(Op::RmsNorm, &shape, &[&x, &w])?;
//! rt.run(inputs, &shape, &mut y, &RunOptions::default())?;
//! assert!((y[0] - 1.0).abs() < 1e-5);
//! # Ok::<(), taskgrain::Error>(())
//! ```

use crate::bench::timing::time_calls;
use crate::error::{Error, Result};
use crate::graph::{self, Graph, exec::Arena, exec::Executor, exec::NodeLaunch};
use crate::ops::{self, LaunchConfig, Op, OpInputs, Prepared, Shape};
use crate::packet::Backend;
use crate::plan::calibrate::{self, ModelSource};
use crate::plan::search::Measure;
use crate::plan::{InputsFrom, LaunchProfile, Plan, Planner, Strategy, tuning::TuningTable};
use crate::pool::{Grain, LaunchStats, Pool, PoolConfig};
use crate::simt::PacketMode;
use crate::stats::median;
use rustc_hash::FxHashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to build a [`Runtime`].
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The worker pool (workers requested, oversubscription, pinning, spinning).
    pub pool: PoolConfig,
    /// Packet width 4, 8 or 16; `None` = the widest this CPU has.
    pub width: Option<usize>,
    /// Full-packet specialization on (the default) or off.
    pub mode: PacketMode,
    /// Where the planner's cost model comes from (default: the calibration cache
    /// if valid, else the built-in uncalibrated model; never calibrates implicitly).
    pub model: ModelSource,
    /// Directory of the calibration and tuning caches; `None` =
    /// [`plan::cache::default_dir`](crate::plan::cache::default_dir).
    pub cache_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            pool: PoolConfig::default(),
            width: None,
            mode: PacketMode::FullPacket,
            model: ModelSource::Cached,
            cache_dir: None,
        }
    }
}

/// Per-call choices; `None` lets the planner decide.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Launch geometry of every launch (overrides the strategy's).
    pub config: Option<LaunchConfig>,
    /// Task grain of every launch (overrides the strategy's).
    pub grain: Option<Grain>,
    /// The planning strategy; `None` = [`Strategy::Auto`].
    pub strategy: Option<Strategy>,
    /// Fuse the operator's graph into one launch (the default) or run its
    /// unfused chain of launches.
    pub fusion: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            config: None,
            grain: None,
            strategy: None,
            fusion: true,
        }
    }
}

/// How [`Runtime::run_graph`] asks for launch `i`'s geometry and grain: given
/// its profile, where its inputs come from and a way to time it as the graph
/// runs it (for refinement or search).
pub type Choose<'a> = dyn FnMut(usize, &LaunchProfile, InputsFrom, &mut Measure<'_>) -> Result<(LaunchConfig, Grain)>
    + 'a;

/// Where a graph's launches get their geometry and grain: fixed in advance
/// (one plan per launch, checked by the caller), or chosen launch by launch.
enum Planning<'p, 'c> {
    Fixed(&'p [(LaunchConfig, Grain)]),
    Chosen(&'p mut Choose<'c>),
}

/// How one prepared launch of a graph is run (plainly, or traced).
type LaunchFn<'a> = dyn FnMut(&NodeLaunch<'_>, Grain, &mut [f32]) -> Result<LaunchStats> + 'a;

/// A multi-launch graph call's bindings: its inputs, its arena of
/// intermediates and its output.
struct Bound<'g, 'b> {
    graph: &'g Graph,
    inputs: &'b [&'g [f32]],
    arena: &'b mut Arena,
    out: &'b mut [f32],
}

impl<'g> Bound<'g, '_> {
    /// The same bindings, borrowed for a shorter while.
    fn reborrow(&mut self) -> Bound<'g, '_> {
        Bound {
            graph: self.graph,
            inputs: self.inputs,
            arena: &mut *self.arena,
            out: &mut *self.out,
        }
    }
}

/// The graph of one operator call, as [`Runtime::graph`] caches it.
type GraphKey = (Op, Shape, bool);

/// A worker pool plus the kernel settings every call of this runtime uses, and
/// the planner (cost model, tuning table, run-time refinement state).
pub struct Runtime {
    pool: Pool,
    backend: Backend,
    mode: PacketMode,
    planner: Planner,
    cache_dir: PathBuf,
    notes: Vec<String>,
    graphs: Mutex<FxHashMap<GraphKey, Arc<Graph>>>,
    executor: Executor,
}

impl Runtime {
    /// Starts the pool and selects the backend.
    pub fn new(cfg: RuntimeConfig) -> Result<Runtime> {
        let backend = match cfg.width {
            Some(w) => Backend::native(w)?,
            None => Backend::best(16),
        };
        let pool = Pool::new(cfg.pool)?;
        let cache_dir = cfg
            .cache_dir
            .unwrap_or_else(crate::plan::cache::default_dir);
        let (model, mut notes) = calibrate::load_model(&cache_dir, cfg.model)?;
        let (tuning, why) = TuningTable::load(&cache_dir);
        if let Some(why) = why {
            // A runtime that may write the caches rebuilds the file as an empty
            // table (tuned results are stored into it again), so the warning
            // is given once, not on every start.
            let writes = matches!(
                cfg.model,
                ModelSource::CachedOrCalibrate | ModelSource::Recalibrate
            );
            let rebuilt = match writes.then(|| tuning.store(&cache_dir)) {
                Some(Ok(())) => "; rebuilt empty".to_string(),
                Some(Err(e)) => format!("; not rebuilt: {e}"),
                None => String::new(),
            };
            notes.push(format!("tuning cache ignored: {why}{rebuilt}"));
        }
        let planner = Planner::with_model(backend, pool.workers_granted(), model)
            .with_mode(cfg.mode)
            .with_tuning(tuning);
        Ok(Runtime {
            pool,
            backend,
            mode: cfg.mode,
            planner,
            cache_dir,
            notes,
            graphs: Mutex::default(),
            executor: Executor::default(),
        })
    }

    /// The planner (cost model, tuning table, refinement state).
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// The directory of the calibration and tuning caches.
    pub fn cache_dir(&self) -> &std::path::Path {
        &self.cache_dir
    }

    /// What happened while loading the caches (a rejected file, a calibration),
    /// for the caller to show as warnings.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The packet backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The worker pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The full-packet setting.
    pub fn mode(&self) -> PacketMode {
        self.mode
    }

    /// Prepares a launch with this runtime's backend and packet mode.
    pub fn prepare<'a>(
        &self,
        inputs: OpInputs<'a>,
        shape: &Shape,
        config: LaunchConfig,
    ) -> Result<Prepared<'a>> {
        ops::prepare(inputs, shape, self.backend, config, self.mode)
    }

    /// Runs a prepared launch with `grain` on this runtime's pool.
    pub fn launch(
        &self,
        launch: &Prepared<'_>,
        grain: Grain,
        out: &mut [f32],
    ) -> Result<LaunchStats> {
        self.pool
            .launch(launch.tiling(), grain, out, &|g, o| launch.run_group(g, o))
    }

    /// Times `calls` calls that prepare and launch `inputs` with `config` and
    /// `grain` into `out`, one by one; their median µs. (The measurement behind
    /// refinement and the oracle, as the bench times a call of 5 µs or more.)
    pub fn time_launch(
        &self,
        inputs: OpInputs<'_>,
        shape: &Shape,
        out: &mut [f32],
        config: LaunchConfig,
        grain: Grain,
        calls: usize,
    ) -> Result<f64> {
        self.median_call_us(calls, || match self.prepare(inputs, shape, config) {
            Ok(ref launch) => self.launch(launch, grain, out),
            Err(e) => Err(e),
        })
    }

    /// The plan `strategy` gives one launch described by `profile`, whose
    /// inputs come from `inputs`. `auto` counts the launch and, on the
    /// [`REFINE_AFTER`](crate::plan::strategy::REFINE_AFTER)-th call of the same
    /// launch, refines its plan by timing a few alternatives with `measure`;
    /// `oracle` runs the exhaustive search the first time a launch is seen
    /// without a tuned result.
    pub fn plan_launch(
        &self,
        strategy: Strategy,
        profile: &LaunchProfile,
        inputs: InputsFrom,
        measure: &mut Measure<'_>,
    ) -> Result<Plan> {
        match strategy {
            Strategy::Auto if self.planner.due_for_refinement(profile) => {
                return self.planner.refine(profile, inputs, measure);
            }
            Strategy::Oracle if self.planner.plan_launch(strategy, profile).is_err() => {
                return self.planner.oracle(profile, measure);
            }
            _ => {}
        }
        self.planner.plan_launch(strategy, profile)?.ok_or_else(|| {
            Error::BadArgument(format!(
                "the {strategy} strategy does not apply to this launch ({:?})",
                profile.work
            ))
        })
    }

    /// The plan `strategy` gives a one-launch call of `inputs`' operator (what
    /// fusion makes of every operator), refining or searching on these inputs
    /// like [`Runtime::plan_launch`] (writing `out`).
    pub fn plan_call(
        &self,
        strategy: Strategy,
        inputs: OpInputs<'_>,
        shape: &Shape,
        out: &mut [f32],
    ) -> Result<Plan> {
        let profile = LaunchProfile::for_op(inputs.op(), shape)?;
        let mut measure =
            |c: LaunchConfig, g: Grain, n: usize| self.time_launch(inputs, shape, out, c, g, n);
        self.plan_launch(strategy, &profile, InputsFrom::Caller, &mut measure)
    }

    /// The graph `op` runs at `shape` with fusion on or off (built once per
    /// runtime and shape, then shared).
    pub fn graph(&self, op: Op, shape: &Shape, fusion: bool) -> Result<Arc<Graph>> {
        let key = (op, *shape, fusion);
        let mut cache = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = cache.get(&key) {
            return Ok(Arc::clone(g));
        }
        let g = Arc::new(graph::for_op(op, shape, fusion)?);
        cache.insert(key, Arc::clone(&g));
        Ok(g)
    }

    /// Runs `graph` once: its inputs are `inputs` (in graph-input order), its
    /// result goes to `out`. For each launch in order, `choose(i, profile,
    /// measure)` gives the geometry and grain (`measure` times that launch alone
    /// on these inputs, for refinement or search). Intermediates come from a
    /// reused arena.
    pub fn run_graph(
        &self,
        graph: &Graph,
        inputs: &[&[f32]],
        out: &mut [f32],
        choose: &mut Choose<'_>,
    ) -> Result<LaunchStats> {
        self.exec_plainly(graph, inputs, out, &mut Planning::Chosen(choose))
    }

    /// [`Runtime::run_planned`], with the last launch recorded as a timeline
    /// (which worker ran which group, when) instead of run plainly.
    pub fn trace_planned(
        &self,
        graph: &Graph,
        inputs: &[&[f32]],
        out: &mut [f32],
        plans: &[(LaunchConfig, Grain)],
    ) -> Result<crate::bench::trace::LaunchTrace> {
        check_plans(graph, plans)?;
        let last = graph.launches() - 1;
        let mut trace = None;
        self.exec_graph(
            graph,
            inputs,
            out,
            &mut Planning::Fixed(plans),
            &mut |l, g, dst| {
                if l.index() != last {
                    return self.launch_plainly(l, g, dst);
                }
                let t = crate::bench::trace::trace_launch(
                    self,
                    l.tiling(),
                    &|k, o| l.run_group(k, o),
                    l.variant(),
                    g,
                    dst,
                )?;
                let stats = t.stats;
                trace = Some(t);
                Ok(stats)
            },
        )?;
        Ok(trace.expect("the last launch ran"))
    }

    /// [`Runtime::exec_graph`] with every launch run plainly on the pool.
    ///
    /// A graph that is one launch of an operator's own kernel (every fused
    /// operator) is prepared as that operator directly: the executor's
    /// [`NodeLaunch`], a few hundred bytes built and moved per call, was a
    /// sixth of a small launch's time (rmsnorm 17x65 on the caller).
    fn exec_plainly(
        &self,
        graph: &Graph,
        inputs: &[&[f32]],
        out: &mut [f32],
        planning: &mut Planning<'_, '_>,
    ) -> Result<LaunchStats> {
        let Some((op, shape)) = graph.compiled_operator() else {
            return self.exec_graph(graph, inputs, out, planning, &mut |l, g, dst| {
                self.launch_plainly(l, g, dst)
            });
        };
        check_bindings(graph, inputs, out)?;
        // The graph validated its shape when it was built, and its inputs' lengths
        // were just checked: what `ops::prepare` would check again.
        let bound = OpInputs::bind(op, inputs);
        let prepare = |c| ops::prepare_checked(bound, &shape, self.backend, c, self.mode);
        let (config, grain) = {
            let mut measure = |c: LaunchConfig, g: Grain, n: usize| {
                self.median_call_us(n, || match prepare(c) {
                    Ok(ref l) => self.launch(l, g, out),
                    Err(e) => Err(e),
                })
            };
            plan_node(graph, 0, &[], planning, &mut measure)?
        };
        // Borrowed where it was built, as in `exec_graph`: moving the prepared
        // launch out of its `Result` copied its 209 bytes twice per call.
        match prepare(config) {
            Ok(ref launch) => self.launch(launch, grain, out),
            Err(e) => Err(e),
        }
    }

    /// Runs one prepared graph launch on the pool with grain `g`, writing `dst`.
    fn launch_plainly(&self, l: &NodeLaunch<'_>, g: Grain, dst: &mut [f32]) -> Result<LaunchStats> {
        self.pool
            .launch(l.tiling(), g, dst, &|k, o| l.run_group(k, o))
    }

    fn exec_graph(
        &self,
        graph: &Graph,
        inputs: &[&[f32]],
        out: &mut [f32],
        planning: &mut Planning<'_, '_>,
        launch: &mut LaunchFn<'_>,
    ) -> Result<LaunchStats> {
        check_bindings(graph, inputs, out)?;
        if graph.launches() == 1 {
            // One launch writing the output (what fusion makes of every
            // operator): no intermediates, so no arena from the executor.
            let no_intermediates = Arena::default();
            let tensor = |t| no_intermediates.tensor(graph, inputs, t);
            let prepare = |c| NodeLaunch::prepare(graph, 0, &tensor, self.backend, c, self.mode);
            let plan = {
                let mut measure = |c: LaunchConfig, g: Grain, n: usize| {
                    self.median_call_us(n, || match prepare(c) {
                        Ok(ref l) => self.launch_plainly(l, g, out),
                        Err(e) => Err(e),
                    })
                };
                plan_node(graph, 0, &[], planning, &mut measure)?
            };
            // Borrowed where it was built (`ref`): a prepared launch is a few
            // hundred bytes, and moving it out of its `Result` is a memcpy per call.
            return match prepare(plan.0) {
                Ok(ref l) => launch(l, plan.1, out),
                Err(e) => Err(e),
            };
        }
        let mut arena = self.executor.take();
        arena.fit(graph);
        let mut chosen = arena.take_plans();
        let result = (|| {
            let mut stats = LaunchStats::default();
            let mut bound = Bound {
                graph,
                inputs,
                arena: &mut arena,
                out,
            };
            for i in 0..graph.launches() {
                let plan = {
                    let mut measure = |c: LaunchConfig, g: Grain, n: usize| {
                        self.time_in_graph(bound.reborrow(), &chosen, i, (c, g), n)
                    };
                    plan_node(graph, i, &chosen, planning, &mut measure)?
                };
                chosen.push(plan);
                stats.merge(self.run_node(bound.reborrow(), i, plan, launch)?);
            }
            Ok(stats)
        })();
        arena.put_plans(chosen);
        self.executor.give(arena);
        result
    }

    /// Prepares launch `i` of `b.graph` with `plan` and runs it with `launch`
    /// into the tensor it writes (the output, or its intermediate in the arena).
    fn run_node(
        &self,
        b: Bound<'_, '_>,
        i: usize,
        (config, grain): (LaunchConfig, Grain),
        launch: &mut LaunchFn<'_>,
    ) -> Result<LaunchStats> {
        let Bound {
            graph,
            inputs,
            arena,
            out,
        } = b;
        let written = graph.nodes()[i].output;
        let mut own = if written == graph.output() {
            None
        } else {
            Some(arena.take(written))
        };
        let result = {
            let tensor = |t| arena.tensor(graph, inputs, t);
            let dst = match own.as_mut() {
                Some(buf) => &mut buf[..],
                None => out,
            };
            // Borrowed where it was built (`ref`): a prepared launch is a few
            // hundred bytes, and moving it out of its `Result` is a memcpy per call.
            match NodeLaunch::prepare(graph, i, &tensor, self.backend, config, self.mode) {
                Ok(ref l) => launch(l, grain, dst),
                Err(e) => Err(e),
            }
        };
        if let Some(buf) = own {
            arena.put(written, buf);
        }
        result
    }

    /// The median µs of launch `i` of `b.graph` with `candidate` (prepared and
    /// launched, as a call does), measured where the graph runs it: each of
    /// `calls` (at least one) timed launches, and one untimed before them,
    /// follows a rerun of the launches that write its inputs (with their plans
    /// in `chosen`). Timed back to back instead, a launch would find its
    /// inputs where its own last call read them, not where their producer's
    /// workers wrote them. Measured here (Intel Xeon, 2 workers),
    /// gelu_residual 64x256 unfused took 8.1 µs with its `add` pooled like its
    /// `gelu`, and 10.7 µs with the `add` on the caller, where `auto` had kept
    /// it (see [`InputsFrom::Pool`]).
    fn time_in_graph(
        &self,
        mut b: Bound<'_, '_>,
        chosen: &[(LaunchConfig, Grain)],
        i: usize,
        candidate: (LaunchConfig, Grain),
        calls: usize,
    ) -> Result<f64> {
        let graph = b.graph;
        // Launch `i` after its producers: its µs and its stats.
        let mut once = || -> Result<(f64, LaunchStats)> {
            for j in (0..i).filter(|&j| graph.feeds(j, i)) {
                self.run_node(b.reborrow(), j, chosen[j], &mut |l, g, dst| {
                    self.launch_plainly(l, g, dst)
                })?;
            }
            let t = Instant::now();
            let stats = self.run_node(b.reborrow(), i, candidate, &mut |l, g, dst| {
                self.launch_plainly(l, g, dst)
            })?;
            Ok((t.elapsed().as_secs_f64() * 1e6, stats))
        };
        warm_up(self.pooled(), &mut || once().map(|(_, stats)| stats))?;
        let times = (0..calls.max(1))
            .map(|_| once().map(|(us, _)| us))
            .collect::<Result<Vec<f64>>>()?;
        Ok(median(&times))
    }

    /// Whether the pool has helpers to hand tasks to.
    fn pooled(&self) -> bool {
        self.pool.workers_granted() > 1
    }

    /// The median µs of `calls` (at least one) calls of `call` (a launch,
    /// prepared as a call prepares it), each timed alone, after
    /// [`warm_up`] (which also warms the caches).
    ///
    /// This is how the bench times calls of 5 µs and more (the p50 of calls
    /// timed one by one, each preparing its launch); shorter ones it times in
    /// samples of back-to-back calls, as one step of the clock (10 ns on a
    /// Firecracker guest) is several percent of a sub-µs call. Timed both ways
    /// in the same rounds (`examples/timing_ab.rs`), the pooled/caller ratios
    /// of rmsnorm 64x256 (0.92 alone, 0.88 batched), attention
    /// 1x4x2x16x32x16x16 (0.62, 0.63), swiglu 3x1024 (0.79, 0.79),
    /// gelu_residual 17x66 (1.41, 1.34) and layernorm 17x66 (1.79, 1.82)
    /// agreed within 1–6 % (AMD EPYC, 2026-12-08). Refinement and the oracle
    /// still time calls alone: refinement's margins were set that way. The
    /// preparation is timed too, as the bench times it: timed without it,
    /// two-group plans of fused swiglu and layernorm 17x66 once read 0.74–0.78
    /// of the caller's plan where, prepared, they read 0.83–0.93.
    pub(crate) fn median_call_us(
        &self,
        calls: usize,
        mut call: impl FnMut() -> Result<LaunchStats>,
    ) -> Result<f64> {
        warm_up(self.pooled(), &mut call)?;
        let mut failure = None;
        let times = time_calls(0, calls.max(1), || {
            if let Err(e) = call() {
                failure.get_or_insert(e);
            }
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(median(&times)),
        }
    }

    /// Untimed calls of `graph` with `plans` before they are timed: one, and
    /// more while a call hands tasks to the pool and no helper takes any (see
    /// [`warm_up`]).
    pub(crate) fn warm_up_planned(
        &self,
        graph: &Graph,
        inputs: &[&[f32]],
        out: &mut [f32],
        plans: &[(LaunchConfig, Grain)],
    ) -> Result<()> {
        warm_up(self.pooled(), &mut || {
            self.run_planned(graph, inputs, out, plans)
        })
        .map(|_| ())
    }

    /// Runs `graph` with a fixed geometry and grain per launch (`plans[i]` for
    /// launch `i`): what the benchmarks time.
    pub fn run_planned(
        &self,
        graph: &Graph,
        inputs: &[&[f32]],
        out: &mut [f32],
        plans: &[(LaunchConfig, Grain)],
    ) -> Result<LaunchStats> {
        check_plans(graph, plans)?;
        self.exec_plainly(graph, inputs, out, &mut Planning::Fixed(plans))
    }

    /// The kernel variant each launch of `graph` runs with `plans`, joined by ` → `.
    pub fn graph_variant(
        &self,
        graph: &Graph,
        inputs: &[&[f32]],
        plans: &[(LaunchConfig, Grain)],
    ) -> Result<String> {
        let mut arena = self.executor.take();
        arena.fit(graph);
        check_plans(graph, plans)?;
        let mut names = Vec::with_capacity(graph.launches());
        for (i, &(c, _)) in plans.iter().enumerate() {
            let tensor = |t| arena.tensor(graph, inputs, t);
            let l = NodeLaunch::prepare(graph, i, &tensor, self.backend, c, self.mode);
            names.push(l.map(|l| l.variant()));
        }
        self.executor.give(arena);
        Ok(names.into_iter().collect::<Result<Vec<_>>>()?.join(" → "))
    }

    /// Runs one operator call: its graph (fused unless `opts.fusion` is off),
    /// each launch planned with `opts.strategy` (default `auto`, refined after a
    /// few calls of the same launch) unless `opts` fixes its geometry and grain.
    pub fn run(
        &self,
        inputs: OpInputs<'_>,
        shape: &Shape,
        out: &mut [f32],
        opts: &RunOptions,
    ) -> Result<LaunchStats> {
        let op = inputs.op();
        let graph = self.graph(op, shape, opts.fusion)?;
        let (tensors, n) = inputs.tensors();
        let strategy = opts.strategy.unwrap_or(Strategy::Auto);
        self.run_graph(
            &graph,
            &tensors[..n],
            out,
            &mut |_, profile, from, measure| match (opts.config, opts.grain) {
                (Some(c), Some(g)) => Ok((c, g)),
                (c, g) => {
                    let plan = self.plan_launch(strategy, profile, from, measure)?;
                    Ok((c.unwrap_or(plan.config), g.unwrap_or(plan.grain)))
                }
            },
        )
    }
}

/// The longest [`warm_up`] waits for a parked helper to take part
/// in a pooled call before measuring it anyway.
const HELPER_WAKE_WAIT: Duration = Duration::from_millis(2);

/// Untimed calls of `call` before it is measured: one, then, if the pool has
/// helpers (`pooled`), more while a call hands tasks to them and none takes
/// any, for at most [`HELPER_WAKE_WAIT`]; returns how many calls it made.
/// The helpers park while a candidate runs on the caller alone, and one
/// untimed call does not bring a parked helper back: here one took 30–70 µs
/// after a caller-only run, at times over 600 µs (AMD EPYC KVM guest,
/// 2 vCPUs, 2026-12-08). With one untimed call, the calls of a pooled plan
/// ran on the caller alone, a few µs slower than the caller's own plan, until
/// the helper arrived, and refinement kept unfused swiglu 64x256's `silu` on
/// the caller: `auto` ran 1.89× the oracle.
fn warm_up(pooled: bool, call: &mut dyn FnMut() -> Result<LaunchStats>) -> Result<usize> {
    let start = Instant::now();
    let mut calls = 0;
    loop {
        let stats = call()?;
        calls += 1;
        let waiting = pooled && stats.tasks > 1 && !stats.helped;
        if !waiting || start.elapsed() >= HELPER_WAKE_WAIT {
            return Ok(calls);
        }
    }
}

/// Launch `i`'s geometry and grain under `planning`, after launches `0..i`
/// ran with the plans in `chosen`; `measure` times the launch as the graph
/// runs it (for refinement or search).
fn plan_node(
    graph: &Graph,
    i: usize,
    chosen: &[(LaunchConfig, Grain)],
    planning: &mut Planning<'_, '_>,
    measure: &mut Measure<'_>,
) -> Result<(LaunchConfig, Grain)> {
    match planning {
        Planning::Fixed(plans) => Ok(plans[i]),
        Planning::Chosen(choose) => {
            let profile = graph::exec::node_profile(graph, i)?;
            let pooled = (0..i).any(|j| chosen[j].1 != Grain::Caller && graph.feeds(j, i));
            let inputs = if pooled {
                InputsFrom::Pool
            } else {
                InputsFrom::Caller
            };
            choose(i, &profile, inputs, measure)
        }
    }
}

/// Checks that there is one plan per launch.
fn check_plans(graph: &Graph, plans: &[(LaunchConfig, Grain)]) -> Result<()> {
    if plans.len() == graph.launches() {
        Ok(())
    } else {
        Err(Error::BadArgument(format!(
            "{} plans for a graph of {} launches",
            plans.len(),
            graph.launches()
        )))
    }
}

/// Checks that `inputs` and `out` have the lengths `graph` expects.
fn check_bindings(graph: &Graph, inputs: &[&[f32]], out: &[f32]) -> Result<()> {
    if inputs.len() != graph.inputs().len() {
        return Err(Error::ShapeMismatch(format!(
            "the graph takes {} inputs, got {}",
            graph.inputs().len(),
            inputs.len()
        )));
    }
    for (&t, x) in graph.inputs().iter().zip(inputs) {
        let want = graph.tensor(t);
        if x.len() != want.shape.len() {
            return Err(Error::ShapeMismatch(format!(
                "input {} {} needs {} elements, got {}",
                want.name,
                want.shape,
                want.shape.len(),
                x.len()
            )));
        }
    }
    let want = graph.tensor(graph.output()).shape;
    if out.len() != want.len() {
        return Err(Error::ShapeMismatch(format!(
            "output has {} elements, expected {} ({want})",
            out.len(),
            want.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(tasks: usize, helped: bool) -> LaunchStats {
        LaunchStats {
            tasks,
            helped,
            ..LaunchStats::default()
        }
    }

    /// Calls of `warm_up` over a sequence of launch stats (the last repeated).
    fn warm_calls(pooled: bool, seq: &[LaunchStats]) -> usize {
        let mut k = 0;
        let mut call = || {
            let s = seq[k.min(seq.len() - 1)];
            k += 1;
            Ok(s)
        };
        warm_up(pooled, &mut call).expect("no error")
    }

    #[test]
    fn warm_up_waits_until_a_pooled_call_is_helped() {
        let cold = stats(4, false);
        let hot = stats(4, true);
        assert_eq!(warm_calls(true, &[cold, cold, cold, hot]), 4);
        assert_eq!(warm_calls(true, &[hot]), 1);
        // Nothing to wait for: one call on the caller, or a pool of one worker.
        assert_eq!(warm_calls(true, &[stats(1, false)]), 1);
        assert_eq!(warm_calls(false, &[cold]), 1);
        // A helper that never comes: the wait ends (after HELPER_WAKE_WAIT).
        assert!(warm_calls(true, &[cold]) > 1);
    }

    #[test]
    fn warm_up_returns_the_first_error() {
        let mut calls = 0;
        let mut failing = || {
            calls += 1;
            Err(Error::KernelPanicked("boom".into()))
        };
        assert!(matches!(
            warm_up(true, &mut failing),
            Err(Error::KernelPanicked(_))
        ));
        assert_eq!(calls, 1);
    }
}
