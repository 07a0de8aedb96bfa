//! What machine a measurement ran on: CPU model and SIMD features.

/// The CPU's model name (the one the planner's caches record).
pub use crate::plan::cache::cpu_model;

/// The SIMD features taskgrain cares about that this CPU reports.
pub fn isa_features() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! probe {
            ($($f:tt),*) => {$(
                if std::arch::is_x86_feature_detected!($f) {
                    v.push($f);
                }
            )*};
        }
        probe!(
            "sse4.1", "avx", "avx2", "fma", "avx512f", "avx512vl", "avx512bw"
        );
    }
    v
}

/// The 1-minute load average (Linux `/proc/loadavg`), if known: other work on
/// the machine while a benchmark runs, which the report states.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
