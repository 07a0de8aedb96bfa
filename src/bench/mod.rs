//! Measurement: timing primitives, the seed's suites, the report harness and its
//! writers, the roofline, the dispatch-latency benchmark and launch traces.

pub mod dispatch;
pub mod machine;
pub mod report;
pub mod roofline;
pub mod suite_file;
pub mod suites;
pub mod timing;
pub mod trace;
