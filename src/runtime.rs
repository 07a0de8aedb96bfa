//! The runtime a caller creates and owns: a worker pool, a packet backend and the
//! full-packet setting. Nothing here is global state.
//!
//! ```
//! use taskgrain::ops::{OpInputs, Op, Shape};
//! use taskgrain::runtime::{RunOptions, Runtime, RuntimeConfig};
//!
//! let rt = Runtime::new(RuntimeConfig::default())?;
//! let (rows, cols) = (4, 64);
//! let x = vec![1.0f32; rows * cols];
//! let w = vec![1.0f32; cols];
//! let mut y = vec![0.0f32; rows * cols];
//! let shape = Shape::rows(rows, cols);
//! let inputs = OpInputs::new(Op::RmsNorm, &shape, &[&x, &w])?;
//! rt.run(inputs, &shape, &mut y, &RunOptions::default())?;
//! assert!((y[0] - 1.0).abs() < 1e-5);
//! # Ok::<(), taskgrain::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::ops::{self, LaunchConfig, OpInputs, Prepared, Shape};
use crate::packet::Backend;
use crate::plan::calibrate::{self, ModelSource};
use crate::plan::{LaunchProfile, Plan, Planner, Strategy, tuning::TuningTable};
use crate::pool::{Grain, LaunchStats, Pool, PoolConfig};
use crate::simt::PacketMode;
use std::path::PathBuf;
use std::time::Instant;

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
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Launch geometry (overrides the strategy's).
    pub config: Option<LaunchConfig>,
    /// Task grain (overrides the strategy's).
    pub grain: Option<Grain>,
    /// The planning strategy; `None` = [`Strategy::Auto`].
    pub strategy: Option<Strategy>,
}

/// A worker pool plus the kernel settings every call of this runtime uses, and
/// the planner (cost model, tuning table, run-time refinement state).
pub struct Runtime {
    pool: Pool,
    backend: Backend,
    mode: PacketMode,
    planner: Planner,
    cache_dir: PathBuf,
    notes: Vec<String>,
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
        notes.extend(why.map(|w| format!("tuning cache ignored: {w}")));
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

    /// Times `calls` back-to-back launches of `inputs` with `config` and `grain`
    /// into `out`; µs per call. (The measurement behind refinement and the oracle.)
    pub fn time_launch(
        &self,
        inputs: OpInputs<'_>,
        shape: &Shape,
        out: &mut [f32],
        config: LaunchConfig,
        grain: Grain,
        calls: usize,
    ) -> Result<f64> {
        let launch = self.prepare(inputs, shape, config)?;
        let calls = calls.max(1);
        let t = Instant::now();
        for _ in 0..calls {
            self.launch(&launch, grain, out)?;
        }
        Ok(t.elapsed().as_secs_f64() * 1e6 / calls as f64)
    }

    /// The plan `strategy` gives this call. `auto` counts the call and, on the
    /// [`REFINE_AFTER`](crate::plan::strategy::REFINE_AFTER)-th call of the same
    /// launch, refines its plan by timing a few alternatives on these inputs
    /// (writing `out`, which any later launch overwrites). `oracle` runs the
    /// exhaustive search the first time a launch is seen without a tuned result.
    pub fn plan_call(
        &self,
        strategy: Strategy,
        inputs: OpInputs<'_>,
        shape: &Shape,
        out: &mut [f32],
    ) -> Result<Plan> {
        let op = inputs.op();
        let profile = LaunchProfile::for_op(op, shape)?;
        let mut measure =
            |c: LaunchConfig, g: Grain, n: usize| self.time_launch(inputs, shape, out, c, g, n);
        match strategy {
            Strategy::Auto if self.planner.due_for_refinement(&profile) => {
                return self.planner.refine(&profile, &mut measure);
            }
            Strategy::Oracle if self.planner.plan_launch(strategy, &profile).is_err() => {
                return self.planner.oracle(&profile, &mut measure);
            }
            _ => {}
        }
        self.planner
            .plan_launch(strategy, &profile)?
            .ok_or_else(|| {
                Error::BadArgument(format!("the {strategy} strategy does not apply to {op}"))
            })
    }

    /// Runs one operator call: plans what `opts` leaves open (by default with
    /// `auto`, refined after a few calls of the same launch), prepares and launches.
    pub fn run(
        &self,
        inputs: OpInputs<'_>,
        shape: &Shape,
        out: &mut [f32],
        opts: &RunOptions,
    ) -> Result<LaunchStats> {
        let (config, grain) = match (opts.config, opts.grain) {
            (Some(c), Some(g)) => (c, g),
            _ => {
                let strategy = opts.strategy.unwrap_or(Strategy::Auto);
                let plan = self.plan_call(strategy, inputs, shape, out)?;
                (
                    opts.config.unwrap_or(plan.config),
                    opts.grain.unwrap_or(plan.grain),
                )
            }
        };
        let launch = self.prepare(inputs, shape, config)?;
        self.launch(&launch, grain, out)
    }
}
