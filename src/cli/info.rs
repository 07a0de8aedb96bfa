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

pub use crate::bench::machine::{cpu_model, isa_features};

pub(super) fn run(json: bool) -> Result<Outcome, Error> {
    let info = Info {
        cpu: cpu_model(),
        arch: std::env::consts::ARCH,
        isa: isa_features(),
        widths: Backend::available_widths(),
        backends: Backend::all_native().iter().map(|b| b.name()).collect(),
        default_width: Backend::best(16).width(),
        cores: crate::pool::available_cores(),
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
