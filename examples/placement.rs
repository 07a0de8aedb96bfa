//! Where the output lies relative to the input, and what it costs: one row
//! operator's launch on the caller, cached and streamed, with the output at
//! several byte distances (mod 4 KiB) after input 0:
//! `cargo run --release --example placement -- rmsnorm 4096x1024 8`.
//!
//! A load whose address matches a pending store's in the low 12 bits waits for
//! it ("4K aliasing"); streamed stores stay pending long, so the direction in
//! which a streamed pass walks its row matters (`ops::walks_down`). Times are
//! the fastest of 25 calls per cell, in µs.

mod stores;

use stores::{cached_and_streamed, output_buffer, window_at};
use taskgrain::bench::timing::time_calls;
use taskgrain::ops::{self, Op, OwnedInputs, Shape};
use taskgrain::packet::Backend;

/// Byte distances, mod 4096, of the output after input 0 (3968 = 128 before it).
const DISTANCES: [usize; 12] = [0, 16, 32, 64, 96, 128, 192, 256, 1024, 2048, 3072, 3968];

fn main() -> Result<(), taskgrain::Error> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("rmsnorm", String::as_str);
    let op = Op::ALL
        .into_iter()
        .find(|o| o.name() == name && o.is_row_op())
        .ok_or_else(|| taskgrain::Error::BadArgument(format!("not a row operator: {name}")))?;
    let dims = args.get(2).map_or("4096x1024", String::as_str);
    let width: usize = args.get(3).and_then(|w| w.parse().ok()).unwrap_or(8);
    let backend = Backend::native(width)?;
    let shape = Shape::parse(op, dims)?;
    let inputs = OwnedInputs::generate(op, shape, 1)?;
    let (cached, streamed) = cached_and_streamed(&inputs, &shape, backend)?;
    let len = ops::output_len(&shape);
    let mut buf = output_buffer(len);
    println!("{op} {shape} W{width}: fastest call, µs");
    println!("output at | cached | streamed");
    for d in DISTANCES {
        let out = window_at(&mut buf, &inputs, d, len);
        let fastest = |t: Vec<f64>| t.into_iter().fold(f64::MAX, f64::min);
        let (mut a, mut b) = (f64::MAX, f64::MAX);
        for _ in 0..5 {
            a = a.min(fastest(time_calls(1, 5, || {
                cached.run_on_caller(out).unwrap()
            })));
            b = b.min(fastest(time_calls(1, 5, || {
                streamed.run_on_caller(out).unwrap()
            })));
        }
        println!("+{d} | {a:.0} | {b:.0}");
    }
    Ok(())
}
