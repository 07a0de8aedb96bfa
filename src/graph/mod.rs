//! Operators as graphs of launches, and the fusion pass.
//!
//! A [`Graph`] is a list of nodes in execution order; each node is one launch
//! (a kernel, its input tensors, its output tensor) and edges are tensors. Every
//! operator has an unfused graph ([`op_graph`], fixed by DESIGN.md), and
//! [`fuse()`] rewrites any graph into fewer launches: element-wise chains become
//! one expression, element-wise consumers become prologues or epilogues of their
//! neighbours, and scores → softmax → probs·v becomes one flash-style launch.
//! With fusion on, each of the seven operators is one launch.
//!
//! The runtime runs a graph launch by launch on its pool
//! ([`Runtime::run_graph`](crate::runtime::Runtime::run_graph)), each launch with
//! its own planned geometry and grain, intermediates in a reused [`exec::Arena`].
//!
//! **Bitwise equality.** rmsnorm, layernorm and rope are one launch either way.
//! swiglu, gelu_residual and masked_softmax give the same bits fused and unfused:
//! an intermediate is rounded to f32 whether it sits in a register or in memory,
//! and the fused expression applies the same functions in the same order.
//! Attention does not: the flash kernel's online softmax rescales partial sums and
//! orders its sums differently from scores → softmax → probs·v; both are checked
//! against the f64 reference.

pub mod build;
pub mod exec;
pub mod fuse;
pub mod ir;
pub(crate) mod kernels;

pub use build::op_graph;
pub use fuse::fuse;
pub use ir::{
    Binary, Epilogue, Expr, Graph, GraphBuilder, Kernel, MAX_INPUTS, MAX_STEPS, Node, Step,
    TensorId, TensorShape, Unary,
};

use crate::error::Result;
use crate::ops::{Op, Shape};

/// The graph `op` runs at `shape`: fused (one launch) or as DESIGN.md's
/// unfused chain.
pub fn for_op(op: Op, shape: &Shape, fusion: bool) -> Result<Graph> {
    let g = op_graph(op, shape)?;
    Ok(if fusion { fuse(&g) } else { g })
}
