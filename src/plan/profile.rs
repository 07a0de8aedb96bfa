//! What the planner needs to know about a launch, independent of which kernel
//! runs it: a [`LaunchProfile`].
//!
//! The seven operators have profiles ([`LaunchProfile::for_op`]); a launch of a
//! graph (fusion's primitive kernels: element-wise unary/binary, row softmax,
//! attention scores, probs·v) describes its own work with
//! [`LaunchProfile::rows`] or [`LaunchProfile::attention`] and is planned by
//! [`Planner::plan_launch`](super::Planner::plan_launch) exactly like an operator.
//!
//! ```
//! use taskgrain::plan::{LaunchProfile, Planner, Strategy};
//! use taskgrain::packet::Backend;
//!
//! // A row softmax over 128 × 4096: reads one tensor, writes one, ~12 flops per
//! // element (exp ≈ 10), two reduction passes (max, sum).
//! let p = LaunchProfile::rows(128, 4096, 4096, 8.0, 12.0, 2);
//! let plan = Planner::new(Backend::best(8), 2).plan_launch(Strategy::Auto, &p)?.unwrap();
//! assert!(plan.config.block >= 1 && plan.predicted_us > 0.0);
//! # Ok::<(), taskgrain::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::ops::{self, AttnShape, Op, Shape};

/// The shape of a launch's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Work {
    /// A row launch: `rows` rows whose SIMT schedule covers `cols` columns
    /// (rope schedules C/2 rotation pairs), `out_cols` output elements per row.
    Rows {
        /// Rows of the launch.
        rows: usize,
        /// Columns the work-items stride over (the `local` candidates go up to this).
        cols: usize,
        /// Output elements per row.
        out_cols: usize,
        /// Passes over the row that end in a reduction (0 = element-wise).
        reduce_passes: u32,
    },
    /// A flash-style attention launch (groups own `block` query rows of one
    /// batch × query head; `local` is fixed by the head dimensions).
    Attention(AttnShape),
}

/// A description of one launch's work: enough for the cost model to predict any
/// geometry and grain, without the kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchProfile {
    /// The calibrated operator whose kernel this launch runs, if it is one of the
    /// seven; `None` for other kernels (their cost comes from `flops_per_elem`).
    pub op: Option<Op>,
    /// The work's shape.
    pub work: Work,
    /// Bytes read and written per scheduled element (every input and the output
    /// once, divided by rows × cols); for attention, per output element.
    pub bytes_per_elem: f64,
    /// Arithmetic per scheduled element, in flops (count an exp or erf as ~10).
    /// Used for kernels without a calibration of their own.
    pub flops_per_elem: f64,
}

/// A launch profile's identity for the planner's in-memory tables (its
/// per-element costs by bit pattern): building and hashing it allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProfileId {
    op: Option<Op>,
    work: Work,
    bytes_per_elem: u64,
    flops_per_elem: u64,
}

impl LaunchProfile {
    /// This profile's identity.
    pub fn id(&self) -> ProfileId {
        ProfileId {
            op: self.op,
            work: self.work,
            bytes_per_elem: self.bytes_per_elem.to_bits(),
            flops_per_elem: self.flops_per_elem.to_bits(),
        }
    }

    /// A row launch of some kernel that is not one of the seven operators.
    pub fn rows(
        rows: usize,
        cols: usize,
        out_cols: usize,
        bytes_per_elem: f64,
        flops_per_elem: f64,
        reduce_passes: u32,
    ) -> LaunchProfile {
        LaunchProfile {
            op: None,
            work: Work::Rows {
                rows,
                cols,
                out_cols,
                reduce_passes,
            },
            bytes_per_elem,
            flops_per_elem,
        }
    }

    /// An attention-shaped launch of some kernel that is not the fused operator
    /// (e.g. a scores or probs·v kernel): its cost is scaled from the calibrated
    /// attention kernel by `flops_per_elem` relative to the fused one's.
    pub fn attention(a: AttnShape, bytes_per_elem: f64, flops_per_elem: f64) -> LaunchProfile {
        LaunchProfile {
            op: None,
            work: Work::Attention(a),
            bytes_per_elem,
            flops_per_elem,
        }
    }

    /// The profile of one call of `op` at `shape` (validated).
    pub fn for_op(op: Op, shape: &Shape) -> Result<LaunchProfile> {
        shape.validate(op)?;
        let bytes = ops::traffic_bytes(op, shape) as f64;
        Ok(match *shape {
            Shape::Rows { rows, cols } => {
                let sched = ops::schedule_cols(op, cols);
                let elems = (rows * sched) as f64;
                LaunchProfile {
                    op: Some(op),
                    work: Work::Rows {
                        rows,
                        cols: sched,
                        out_cols: cols,
                        reduce_passes: reduce_passes(op),
                    },
                    bytes_per_elem: bytes / elems,
                    flops_per_elem: nominal_flops(op),
                }
            }
            Shape::Attention(a) => {
                let out = a.lens()[3] as f64;
                LaunchProfile {
                    op: Some(op),
                    work: Work::Attention(a),
                    bytes_per_elem: bytes / out,
                    flops_per_elem: a.flops() / out,
                }
            }
        })
    }

    /// Rejects a profile the model cannot reason about (zero sizes, non-finite costs).
    pub fn validate(&self) -> Result<()> {
        let ok_dims = match self.work {
            Work::Rows {
                rows,
                cols,
                out_cols,
                ..
            } => rows > 0 && cols > 0 && out_cols > 0,
            Work::Attention(a) => {
                a.batch > 0
                    && a.q_heads > 0
                    && a.kv_heads > 0
                    && a.q_len > 0
                    && a.kv_len > 0
                    && a.dk > 0
                    && a.dv > 0
            }
        };
        if !ok_dims {
            return Err(Error::BadDimension(format!(
                "launch profile with a zero dimension: {:?}",
                self.work
            )));
        }
        for (name, v) in [
            ("bytes_per_elem", self.bytes_per_elem),
            ("flops_per_elem", self.flops_per_elem),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::BadArgument(format!(
                    "launch profile: {name} must be finite and ≥ 0, got {v}"
                )));
            }
        }
        Ok(())
    }

    /// Rows a group's `block` counts in (query rows of one segment for attention).
    pub fn segment_rows(&self) -> usize {
        match self.work {
            Work::Rows { rows, .. } => rows,
            Work::Attention(a) => a.q_len,
        }
    }

    /// Segments of the grid (1 for rows; batch × query heads for attention).
    pub fn segments(&self) -> usize {
        match self.work {
            Work::Rows { .. } => 1,
            Work::Attention(a) => a.batch * a.q_heads,
        }
    }

    /// Work-groups of the grid for `block`.
    pub fn groups(&self, block: usize) -> usize {
        self.segments() * self.segment_rows().div_ceil(block.max(1))
    }

    /// Scheduled elements of the launch (rows × cols; output elements for attention).
    pub fn elements(&self) -> usize {
        match self.work {
            Work::Rows { rows, cols, .. } => rows * cols,
            Work::Attention(a) => a.lens()[3],
        }
    }

    /// Total bytes moved by one call.
    pub fn bytes(&self) -> f64 {
        self.bytes_per_elem * self.elements() as f64
    }
}

/// Passes over a row that end in a reduction.
pub fn reduce_passes(op: Op) -> u32 {
    match op {
        Op::RmsNorm => 1,
        Op::LayerNorm | Op::MaskedSoftmax => 2,
        _ => 0,
    }
}

/// A nominal count of flops per scheduled element of each operator (an exp, erf
/// or division counts as ~10): what relates an uncalibrated kernel's
/// `flops_per_elem` to the calibrated ones.
pub fn nominal_flops(op: Op) -> f64 {
    match op {
        Op::RmsNorm => 4.0,
        Op::LayerNorm => 7.0,
        Op::MaskedSoftmax => 15.0,
        Op::SwiGlu => 14.0,
        Op::GeluResidual => 18.0,
        Op::Rope => 12.0,
        Op::Attention => 0.0,
    }
}
