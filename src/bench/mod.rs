//! Benchmarks. (Reconciled with the rest of `bench` on merge.)

pub mod dispatch;
