//! `taskgrain bench peers`: taskgrain side by side with the runtimes a user would
//! otherwise pick — ONNX Runtime, JAX, PyTorch, candle, rten and a numpy
//! baseline — on the same inputs, with the report's method.
//!
//! For every op/shape row the inputs are generated once and handed to the peers
//! as raw f32 files; every peer's answer is checked against the same f64
//! reference as taskgrain's (an answer outside tolerance is flagged, and does not
//! count as the fastest peer); then taskgrain and every peer are timed in rounds,
//! interleaved with the order rotated each round. A row's ratio is, per round,
//! taskgrain's p50 over the fastest peer's p50 of that round; the table shows the
//! median of those ratios and their min–max.
//!
//! The peers live in child processes ([`protocol`]): the `taskgrain-peers`
//! binary (workspace member `peers/`: onnxruntime through its C API, candle,
//! rten) and `bench/peers/peers.py` (jax, torch, numpy). Each is optional: a
//! missing one is a column of `—` with the reason in a footnote, and a peer that
//! crashes, hangs or answers with the wrong shape is reported in its column
//! while the run goes on. `bench/peers/setup.sh` builds the environment.
//!
//! - [`protocol`]: the JSON-lines protocol and the child-process handling.
//! - [`driver`]: discovery of the hosts, the rows, the rounds.
//! - [`freeze`]: the other runtimes' processes stopped while one is timed.
//! - [`table`]: Markdown, JSON and CSV.

pub mod driver;
pub mod freeze;
pub mod protocol;
pub mod table;

pub use driver::{PeersConfig, discover_hosts, parse_suite, parse_threads, run};
pub use protocol::{Host, HostSpec, PeerError};

use crate::bench::report::model::{NamedMap, RatioSummary};
use serde::Serialize;

/// The peers in column order.
pub const PEER_ORDER: [&str; 6] = ["onnxruntime", "jax", "torch", "candle", "rten", "numpy"];

/// The whole comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeersReport {
    /// Settings and machine.
    pub meta: PeersMeta,
    /// One table per thread count, in the order asked.
    pub tables: Vec<PeersTable>,
}

impl PeersReport {
    /// `true` when taskgrain's own answers were all within tolerance.
    pub fn taskgrain_passed(&self) -> bool {
        self.tables
            .iter()
            .flat_map(|t| &t.rows)
            .all(|r| r.taskgrain_ok)
    }
}

/// Settings of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeersMeta {
    /// Element type ("FP32").
    pub dtype: String,
    /// The suite's name (or file).
    pub suite: String,
    /// Rounds per row.
    pub rounds: usize,
    /// Most timed calls per candidate per round.
    pub reps: usize,
    /// Fewest timed calls per candidate per round.
    pub min_reps: usize,
    /// Target length of one candidate's share of a round, ms.
    pub round_ms: f64,
    /// Untimed calls per candidate before the first round.
    pub warmup: usize,
    /// Per-call timeout, s.
    pub timeout_s: f64,
    /// Whether the other runtimes' processes were stopped while one was timed.
    pub freeze: bool,
    /// Seed of the generated inputs.
    pub seed: u64,
    /// taskgrain's packet backend.
    pub backend: String,
    /// How taskgrain was called.
    pub taskgrain_policy: String,
    /// CPU model.
    pub cpu: String,
    /// ISA features.
    pub isa: Vec<String>,
    /// Cores available.
    pub cores: usize,
    /// Load average at start and end.
    pub load_start: Option<f64>,
    /// Load average at the end.
    pub load_end: Option<f64>,
    /// Wall time of the whole comparison, s.
    pub wall_s: f64,
    /// taskgrain's version.
    pub version: String,
}

/// One thread count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeersTable {
    /// Threads every runtime was given.
    pub threads: usize,
    /// Workers taskgrain's pool granted.
    pub workers_granted: usize,
    /// The peers: availability, version, settings, per-call floor.
    pub peers: Vec<PeerInfo>,
    /// taskgrain's own per-call floor (swiglu 1×1), µs.
    pub taskgrain_floor_us: Option<f64>,
    /// The rows.
    pub rows: Vec<PeersRow>,
}

/// A peer of one thread count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeerInfo {
    /// Column name.
    pub name: String,
    /// Which host serves it (`rust`, `python`).
    pub host: String,
    /// Whether it answered hello as available.
    pub available: bool,
    /// Library version.
    pub version: Option<String>,
    /// Threads and settings as the peer states them.
    pub detail: Option<String>,
    /// Why it is missing.
    pub reason: Option<String>,
    /// Median time of a 1-element add, µs.
    pub floor_us: Option<f64>,
}

/// What happened to one candidate on one row.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Cell {
    /// Measured, answer within tolerance.
    Ok {
        /// Median of round p50s, µs.
        time_us: f64,
    },
    /// Measured, answer outside tolerance (flagged; not counted as fastest).
    Wrong {
        /// Median of round p50s, µs.
        time_us: f64,
        /// What the check found.
        why: String,
    },
    /// The peer is not installed or not built.
    Unavailable,
    /// The peer has no such operator.
    Unsupported {
        /// Its message.
        why: String,
    },
    /// It crashed, hung, refused or answered the wrong shape.
    Failed {
        /// What happened.
        why: String,
    },
}

impl Cell {
    /// The time, when measured.
    pub fn time_us(&self) -> Option<f64> {
        match self {
            Cell::Ok { time_us } | Cell::Wrong { time_us, .. } => Some(*time_us),
            _ => None,
        }
    }
}

/// One op/shape at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeersRow {
    /// Operator.
    pub op: String,
    /// Shape dims.
    pub shape: Vec<usize>,
    /// taskgrain's time: median of round p50s, µs.
    pub taskgrain_us: Option<f64>,
    /// taskgrain's answer within tolerance.
    pub taskgrain_ok: bool,
    /// Each peer's cell, in column order.
    pub peers: NamedMap<Cell>,
    /// The graph or code variant each peer ran (e.g. `rms23`, `basic`).
    pub variants: NamedMap<Option<String>>,
    /// The fastest valid peer (by median of round p50s).
    pub fastest_peer: Option<String>,
    /// taskgrain / fastest valid peer of each round: median and min–max.
    pub ratio: RatioSummary,
    /// The per-round ratios.
    pub round_ratios: Vec<f64>,
    /// Every candidate's round p50s, µs.
    pub round_p50_us: NamedMap<Option<Vec<f64>>>,
    /// Calls per round of each candidate.
    pub reps: NamedMap<usize>,
    /// Notes (fallbacks, failures, tolerance).
    pub notes: Vec<String>,
}

impl PeersRow {
    /// `op shape` as the tables print it.
    pub fn label(&self) -> String {
        format!(
            "{} {}",
            self.op,
            crate::bench::report::model::shape_label(&self.shape)
        )
    }
}
