//! Paired A/B of non-temporal output stores for every row operator at one
//! shape, on the caller, with the output placed at several byte distances
//! (mod 4 KiB) after the first input: `cargo run --release --example stream_ab -- 1024x4096 8`.
//!
//! The distance matters because a load whose address matches a pending store's
//! in the low 12 bits waits for it ("4K aliasing"), and a streamed store stays
//! pending far longer than a cached one.

mod stores;

use stores::{cached_and_streamed, output_buffer, window_at};
use taskgrain::bench::timing::{median, time_calls};
use taskgrain::ops::{self, Op, OwnedInputs, Shape};
use taskgrain::packet::Backend;

/// Byte distances, mod 4096, of the output after the first input.
const DISTANCES: [usize; 7] = [0, 16, 32, 64, 256, 1024, 4000];

fn main() -> Result<(), taskgrain::Error> {
    let args: Vec<String> = std::env::args().collect();
    let dims = args.get(1).map_or("1024x4096", String::as_str);
    let width: usize = args.get(2).and_then(|w| w.parse().ok()).unwrap_or(8);
    let backend = Backend::native(width)?;
    println!(
        "streamed / cached p50 at output distance (bytes mod 4096) from input 0; cached µs at 0"
    );
    println!(
        "op / shape | cached µs | {}",
        DISTANCES.map(|d| format!("+{d}")).join(" | ")
    );
    for op in Op::ALL.into_iter().filter(|op| op.is_row_op()) {
        let shape = Shape::parse(op, dims)?;
        let inputs = OwnedInputs::generate(op, shape, 1)?;
        let (cached, streamed) = cached_and_streamed(&inputs, &shape, backend)?;
        let len = ops::output_len(&shape);
        let mut buf = output_buffer(len);
        let (mut first_cached, mut cells) = (0.0, Vec::new());
        for d in DISTANCES {
            let out = window_at(&mut buf, &inputs, d, len);
            let (mut a, mut ratios) = (Vec::new(), Vec::new());
            for _ in 0..7 {
                let ta = median(&time_calls(1, 5, || cached.run_on_caller(out).unwrap()));
                let tb = median(&time_calls(1, 5, || streamed.run_on_caller(out).unwrap()));
                a.push(ta);
                ratios.push(tb / ta);
            }
            if d == 0 {
                first_cached = median(&a);
            }
            cells.push(format!("{:.2}", median(&ratios)));
        }
        println!("{op} {shape} | {first_cached:.1} | {}", cells.join(" | "));
    }
    Ok(())
}
