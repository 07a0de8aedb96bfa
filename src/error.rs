//! The crate's one error type: every bad input is a typed variant that names the problem.

use thiserror::Error;

/// Everything that can go wrong in taskgrain, from bad shapes to a panicking kernel.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// A width was requested that this CPU cannot run.
    #[error("width W{requested} is not available on this CPU (available: {available})")]
    WidthUnavailable {
        /// The width that was asked for.
        requested: usize,
        /// The widths this CPU has, e.g. "W4, W8, W16".
        available: String,
    },
    /// A width that taskgrain does not implement at all.
    #[error("width W{0} is not supported (taskgrain implements W4, W8 and W16)")]
    WidthUnsupported(usize),
    /// A `--shape` string that does not parse.
    #[error("malformed shape {text:?}: {why}")]
    MalformedShape {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// A dimension that is zero or too large.
    #[error("invalid dimension: {0}")]
    BadDimension(String),
    /// A slice whose length does not match the shape it should hold.
    #[error("shape mismatch: {0}")]
    ShapeMismatch(String),
    /// A launch geometry that cannot run (local or block of 0, and so on).
    #[error("invalid geometry: {0}")]
    BadGeometry(String),
    /// An operator name that does not exist.
    #[error(
        "unknown operator {0:?} (known: rmsnorm, layernorm, masked_softmax, swiglu, gelu_residual, rope, attention)"
    )]
    UnknownOp(String),
    /// Any other argument that is out of its range.
    #[error("invalid argument: {0}")]
    BadArgument(String),
    /// A kernel panicked while running a launch; the pool stays usable.
    #[error("kernel panicked: {0}")]
    KernelPanicked(String),
    /// The runtime could not start its workers.
    #[error("worker pool failed: {0}")]
    Pool(String),
    /// The oracle strategy was asked for a launch that was never searched.
    #[error("no oracle result for {0}: run `taskgrain tune` (or Planner::oracle) for it first")]
    NotTuned(String),
    /// A suite file with a bad row or a bad syntax.
    #[error("{path}:{line}: {message}")]
    SuiteFile {
        /// The file.
        path: String,
        /// 1-based line of the problem.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("i/o error on {path}: {message}")]
    Io {
        /// The file concerned.
        path: String,
        /// The operating system's message.
        message: String,
    },
}

/// Result with taskgrain's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;
