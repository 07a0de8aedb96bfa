//! Paired A/B of non-temporal output stores for every row operator at one
//! shape, on the caller: `cargo run --release --example stream_ab -- 1024x4096 8`.

use taskgrain::bench::timing::{median, time_calls};
use taskgrain::ops::{self, Op, OwnedInputs, Shape};
use taskgrain::packet::Backend;
use taskgrain::plan::default_config;
use taskgrain::simt::PacketMode;

fn main() -> Result<(), taskgrain::Error> {
    let args: Vec<String> = std::env::args().collect();
    let dims = args.get(1).map_or("1024x4096", String::as_str);
    let width: usize = args.get(2).and_then(|w| w.parse().ok()).unwrap_or(8);
    let backend = Backend::native(width)?;
    println!("op / shape | cached µs | streamed µs | streamed / cached");
    for op in Op::ALL.into_iter().filter(|op| op.is_row_op()) {
        let shape = Shape::parse(op, dims)?;
        let inputs = OwnedInputs::generate(op, shape, 1)?;
        let config = default_config(op, &shape, width);
        let prepare = |stream| {
            ops::prepare(
                inputs.view(),
                &shape,
                backend,
                config,
                PacketMode::FullPacket,
            )
            .map(|l| l.with_stream(stream))
        };
        let (cached, streamed) = (prepare(false)?, prepare(true)?);
        let mut out = vec![0.0f32; ops::output_len(&shape)];
        let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..9 {
            let ta = median(&time_calls(1, 5, || {
                cached.run_on_caller(&mut out).unwrap()
            }));
            let tb = median(&time_calls(1, 5, || {
                streamed.run_on_caller(&mut out).unwrap()
            }));
            a.push(ta);
            b.push(tb);
            ratios.push(tb / ta);
        }
        println!(
            "{op} {shape} | {:.1} | {:.1} | {:.3}",
            median(&a),
            median(&b),
            median(&ratios)
        );
    }
    Ok(())
}
