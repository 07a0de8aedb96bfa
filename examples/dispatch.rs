//! Prints the dispatch benchmark: `cargo run --release --example dispatch [-- --json] [--workers N]`.

use taskgrain::bench::dispatch::{DispatchConfig, measure_dispatch, render_markdown};

fn main() -> Result<(), taskgrain::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = DispatchConfig::default();
    if let Some(i) = args.iter().position(|a| a == "--workers") {
        cfg.workers = args
            .get(i + 1)
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| taskgrain::Error::BadArgument("--workers needs a number".into()))?;
    }
    if args.iter().any(|a| a == "--no-pin") {
        cfg.pin = false;
    }
    let report = measure_dispatch(&cfg)?;
    if args.iter().any(|a| a == "--json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serializable")
        );
    } else {
        print!("{}", render_markdown(&report));
    }
    Ok(())
}
