//! Measurement: timing primitives, the seed's suites, the report harness and its
//! writers, the roofline, the dispatch-latency benchmark, launch traces and the
//! comparison with other runtimes (`peers`).

pub mod dispatch;
pub mod machine;
pub mod peers;
pub mod report;
pub mod roofline;
pub mod suite_file;
pub mod suites;
pub mod timing;
pub mod trace;
