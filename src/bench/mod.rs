//! Measurement: timing primitives and the benchmark suites.

pub mod roofline;
pub mod suites;
pub mod timing;
