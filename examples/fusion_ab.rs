//! Paired A/B of fusion on against fusion off, as a user runs it: the library's
//! default path (`auto`, refined after a few calls), each launch of the unfused
//! graph planned on its own. Rounds interleave the two, each timing N calls;
//! the paired ratio is unfused p50 / fused p50 of the same round.
//!
//! `cargo run --release --example fusion_ab -- [workers] [rounds] [calls] [op:shape ...]`
//! (default: 2 workers, 7 rounds, 20 calls, the rows).

#[path = "common/mod.rs"]
mod common;

use taskgrain::bench::report::stats::{paired_ratios, summarize};
use taskgrain::bench::timing::median;
use taskgrain::ops::{self, OwnedInputs};
use taskgrain::runtime::RunOptions;

const ROWS: [&str; 6] = [
    "masked_softmax:4096x1024",
    "swiglu:4096x1024",
    "gelu_residual:4096x1024",
    "attention:1x4x2x16x32x16x16",
    "attention:1x4x1x64x128x32x32",
    "attention:1x8x8x512x2048x64x64",
];

fn main() -> Result<(), taskgrain::Error> {
    let (args, rt) = common::setup(20, &ROWS)?;
    println!("op shape | launches off/on | unfused µs | fused µs | unfused/fused (range)");
    for (op, shape) in args.rows {
        let inputs = OwnedInputs::generate(op, shape, 1)?;
        let mut out = vec![0.0f32; ops::output_len(&shape)];
        let opts = |fusion| RunOptions {
            fusion,
            ..RunOptions::default()
        };
        let mut call = |fusion: bool| rt.run(inputs.view(), &shape, &mut out, &opts(fusion));
        // Past refinement for both, so the rounds time the kept plans.
        for _ in 0..4 {
            call(false)?;
            call(true)?;
        }
        let (mut off, mut on) = (Vec::new(), Vec::new());
        for r in 0..args.rounds {
            for fusion in if r % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            } {
                let t = common::p50(args.calls, || call(fusion).map(|_| ()))?;
                if fusion { on.push(t) } else { off.push(t) }
            }
        }
        let s = summarize(&paired_ratios(&off, &on));
        let l = |f| rt.graph(op, &shape, f).map(|g| g.launches());
        println!(
            "{op} {shape} | {}/{} | {:.1} | {:.1} | {:.2} ({:.2}–{:.2})",
            l(false)?,
            l(true)?,
            median(&off),
            median(&on),
            s.median.unwrap_or(f64::NAN),
            s.min.unwrap_or(f64::NAN),
            s.max.unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
