//! Measurement: timing primitives, the seed's suites, the roofline and the
//! dispatch-latency benchmark.

pub mod dispatch;
pub mod roofline;
pub mod suites;
pub mod timing;
