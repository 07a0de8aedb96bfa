//! `taskgrain info`: what this machine offers.

use super::Outcome;
use crate::error::Error;
use crate::packet::Backend;
use serde::Serialize;

#[derive(Serialize)]
struct Info {
    cpu: String,
    arch: &'static str,
    isa: Vec<&'static str>,
    widths: Vec<usize>,
    backends: Vec<&'static str>,
    default_width: usize,
    cores: usize,
}

/// The CPU's model name, from /proc/cpuinfo where there is one.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

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

/// Logical cores available to this process.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(super) fn run(json: bool) -> Result<Outcome, Error> {
    let info = Info {
        cpu: cpu_model(),
        arch: std::env::consts::ARCH,
        isa: isa_features(),
        widths: Backend::available_widths(),
        backends: Backend::all_native().iter().map(|b| b.name()).collect(),
        default_width: Backend::best(16).width(),
        cores: cores(),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&info).expect("info serializes")
        );
    } else {
        println!("cpu:      {}", info.cpu);
        println!("arch:     {}", info.arch);
        println!("isa:      {}", info.isa.join(" "));
        let widths: Vec<String> = info.widths.iter().map(|w| format!("W{w}")).collect();
        println!("widths:   {}", widths.join(", "));
        println!("backends: {}", info.backends.join(", "));
        println!("cores:    {}", info.cores);
    }
    Ok(Outcome::Ok)
}
