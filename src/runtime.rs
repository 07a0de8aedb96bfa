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

use crate::error::Result;
use crate::ops::{self, LaunchConfig, OpInputs, Prepared, Shape};
use crate::packet::Backend;
use crate::plan;
use crate::pool::{Grain, LaunchStats, Pool, PoolConfig};
use crate::simt::PacketMode;

/// How to build a [`Runtime`].
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The worker pool (workers requested, oversubscription, pinning, spinning).
    pub pool: PoolConfig,
    /// Packet width 4, 8 or 16; `None` = the widest this CPU has.
    pub width: Option<usize>,
    /// Full-packet specialization on (the default) or off.
    pub mode: PacketMode,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            pool: PoolConfig::default(),
            width: None,
            mode: PacketMode::FullPacket,
        }
    }
}

/// Per-call choices; `None` lets the planner decide.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Launch geometry.
    pub config: Option<LaunchConfig>,
    /// Task grain.
    pub grain: Option<Grain>,
}

/// A worker pool plus the kernel settings every call of this runtime uses.
pub struct Runtime {
    pool: Pool,
    backend: Backend,
    mode: PacketMode,
}

impl Runtime {
    /// Starts the pool and selects the backend.
    pub fn new(cfg: RuntimeConfig) -> Result<Runtime> {
        let backend = match cfg.width {
            Some(w) => Backend::native(w)?,
            None => Backend::best(16),
        };
        Ok(Runtime {
            pool: Pool::new(cfg.pool)?,
            backend,
            mode: cfg.mode,
        })
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

    /// Runs one operator call: plans what `opts` leaves open, prepares and launches.
    pub fn run(
        &self,
        inputs: OpInputs<'_>,
        shape: &Shape,
        out: &mut [f32],
        opts: &RunOptions,
    ) -> Result<LaunchStats> {
        let op = inputs.op();
        let config = opts
            .config
            .unwrap_or_else(|| plan::default_config(op, shape, self.backend.width()));
        let launch = self.prepare(inputs, shape, config)?;
        let grain = opts
            .grain
            .unwrap_or_else(|| plan::default_grain(launch.tiling(), self.pool.workers_granted()));
        self.launch(&launch, grain, out)
    }
}
