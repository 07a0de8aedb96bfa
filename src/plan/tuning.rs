//! The tuning table: oracle results per launch (operator, shape, width, workers,
//! packet mode), kept in memory by the planner and stored by `taskgrain tune` in
//! the tuning cache file ([`super::cache`]).

use super::cache::{self, Loaded};
use super::profile::{LaunchProfile, Work};
use crate::error::Result;
use crate::ops::LaunchConfig;
use crate::pool::Grain;
use crate::simt::PacketMode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The kind name of tuning files.
pub const KIND: &str = "tuning";

/// The file name of the tuning cache in a cache directory.
pub const FILE: &str = "tuning.json";

/// One tuned launch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tuned {
    /// Geometry.
    pub config: LaunchConfig,
    /// Grain.
    pub grain: Grain,
    /// Measured µs per call when it was tuned.
    pub measured_us: f64,
}

/// Tuned launches by [`key`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TuningTable {
    /// Entries by key.
    pub entries: BTreeMap<String, Tuned>,
}

/// The key of a launch: what it computes, at which width, on how many workers,
/// in which packet mode, e.g. `rmsnorm 4096x1024 W8 P2 full-packet`.
pub fn key(p: &LaunchProfile, width: usize, workers: usize, mode: PacketMode) -> String {
    let what = match p.op {
        Some(op) => op.name().to_string(),
        None => format!("custom(b{:.3},f{:.3})", p.bytes_per_elem, p.flops_per_elem),
    };
    let dims = match p.work {
        Work::Rows {
            rows,
            cols,
            out_cols,
            reduce_passes,
        } => match p.op {
            Some(_) => format!("{rows}x{out_cols}"),
            None => format!("{rows}x{cols}/{out_cols}r{reduce_passes}"),
        },
        Work::Attention(a) => format!(
            "{}x{}x{}x{}x{}x{}x{}",
            a.batch, a.q_heads, a.kv_heads, a.q_len, a.kv_len, a.dk, a.dv
        ),
    };
    let mode = if mode.full_packet() {
        "full-packet"
    } else {
        "all-masked"
    };
    format!("{what} {dims} W{width} P{workers} {mode}")
}

impl TuningTable {
    /// The tuning file in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    /// Reads the tuning file of `dir`: a missing file is an empty table; a
    /// corrupted or foreign one is an empty table plus the reason (a warning).
    pub fn load(dir: &Path) -> (TuningTable, Option<String>) {
        match cache::load::<TuningTable>(&Self::path(dir), KIND) {
            Loaded::Valid(t) => (t, None),
            Loaded::Missing => (TuningTable::default(), None),
            Loaded::Rejected(why) => (TuningTable::default(), Some(why)),
        }
    }

    /// Writes the table to the tuning file of `dir`.
    pub fn store(&self, dir: &Path) -> Result<()> {
        cache::store(&Self::path(dir), KIND, self)
    }
}
