//! Scaling with workers, paired: each row run on the caller alone and on the
//! pool with several grains, at one fixed geometry, interleaved round by round
//! (rotated order). Prints each candidate's median round p50 and, for the
//! fastest pooled grain, the paired ratio caller / pooled with its range.
//!
//! `cargo run --release --example scaling -- [workers] [rounds] [calls] [op:shape ...]`
//! (default: 2 workers, 7 rounds, 50 calls, gelu_residual 257x1538 and attention
//! 1x4x1x64x128x32x32, the pool issue's rows).

#[path = "common/mod.rs"]
mod common;

use taskgrain::bench::report::stats::{paired_ratios, summarize};
use taskgrain::bench::timing::median;
use taskgrain::ops::{self, OwnedInputs};
use taskgrain::plan::default_config;
use taskgrain::pool::Grain;
use taskgrain::runtime::RunOptions;

const ROWS: [&str; 2] = ["gelu_residual:257x1538", "attention:1x4x1x64x128x32x32"];

fn main() -> Result<(), taskgrain::Error> {
    let (args, rt) = common::setup(50, &ROWS)?;
    let w = rt.backend().width();
    let grains = [
        Grain::Caller,
        Grain::Legacy,
        Grain::from(1),
        Grain::from(2),
        Grain::from(4),
    ];
    for (op, shape) in args.rows {
        let inputs = OwnedInputs::generate(op, shape, 1)?;
        let mut out = vec![0.0f32; ops::output_len(&shape)];
        let config = default_config(op, &shape, w);
        let mut times = vec![Vec::new(); grains.len()];
        let mut call = |g: Grain| {
            let opts = RunOptions {
                config: Some(config),
                grain: Some(g),
                ..RunOptions::default()
            };
            rt.run(inputs.view(), &shape, &mut out, &opts).map(|_| ())
        };
        for &g in &grains {
            for _ in 0..5 {
                call(g)?;
            }
        }
        for r in 0..args.rounds {
            for k in 0..grains.len() {
                let i = (k + r) % grains.len();
                times[i].push(common::p50(args.calls, || call(grains[i]))?);
            }
        }
        println!(
            "{op} {shape} (local {}, block {}):",
            config.local, config.block
        );
        for (g, t) in grains.iter().zip(&times) {
            println!("  {:>12} {:>9.1} µs", format!("{g}"), median(t));
        }
        let best = (1..grains.len())
            .min_by(|&a, &b| median(&times[a]).total_cmp(&median(&times[b])))
            .unwrap_or(1);
        let s = summarize(&paired_ratios(&times[0], &times[best]));
        println!(
            "  caller / {}: {:.2} ({:.2}–{:.2})",
            grains[best],
            s.median.unwrap_or(f64::NAN),
            s.min.unwrap_or(f64::NAN),
            s.max.unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
