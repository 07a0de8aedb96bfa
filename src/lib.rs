//! taskgrain runs GPU-style (SIMT) kernels for transformer operators on CPUs.
//!
//! Data flows one way: `cli → bench → plan → runtime → pool → ops → simt/packet`.
//! - [`packet`]: W-lane f32 SIMD per ISA, chosen at run time, and vector math.
//! - [`simt`]: launch tiling into work-groups and the SIMT packet schedule of a row.
//! - [`buffer`]: cache-line aligned tensor storage.
//! - [`ops`]: the seven operators, each with an f64 reference.
//! - [`pool`]: the worker pool that runs a launch in tasks of a chosen grain.
//! - [`runtime`]: the value a caller owns: a pool, a backend, the packet mode.
//! - [`plan`]: which geometry and grain a launch gets.
//! - [`bench`](mod@bench): timing, suites, roofline, dispatch latency.
//! - [`stats`]: the median and quantile of measured samples, shared by all of them.

pub mod bench;
pub mod buffer;
pub mod cli;
pub mod error;
pub mod graph;
pub mod ops;
pub mod packet;
pub mod plan;
pub mod pool;
pub mod runtime;
pub mod simt;
pub mod stats;

pub use error::{Error, Result};
