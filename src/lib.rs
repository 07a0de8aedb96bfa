//! taskgrain runs GPU-style (SIMT) kernels for transformer operators on CPUs.
//!
//! Data flows one way: `bench → pool → simt → ops → packet`.
//! - [`packet`]: W-lane f32 SIMD per ISA, chosen at run time, and vector math.
//! - [`simt`]: launch geometry, tiling of a launch into work-groups, the SIMT packet schedule.
//! - [`ops`]: the seven operators, each with an f64 reference.
//! - [`pool`]: the worker pool that runs a launch in tasks of a chosen grain.

pub mod bench;
pub mod error;
pub mod packet;
pub mod pool;
pub mod simt;

pub use error::{Error, Result};
