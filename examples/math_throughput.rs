//! In-cache throughput of the vector math at one width, on the caller:
//! `cargo run --release --example math_throughput -- 8`. Prints ns per packet for
//! N(0,1) inputs (what swiglu and gelu_residual see), for 0.5·N(0,1) (almost no lane
//! takes a slow path) and for inputs spread over the tails (which take the rare slow
//! paths).

use std::hint::black_box;
use taskgrain::bench::timing::{median, time_calls};
use taskgrain::packet::{Backend, Packet, WithPacket, dispatch, math};

#[derive(Clone, Copy, Debug)]
enum F {
    Exp,
    Exp2Flush,
    Erf,
    Sigmoid,
    Silu,
    Gelu,
    SwiGlu,
}

struct Run<'a> {
    f: F,
    x: &'a [f32],
    y: &'a mut [f32],
}

macro_rules! each {
    ($p:expr, $x:expr, $y:expr, |$v:ident| $body:expr) => {{
        let (p, x, y) = ($p, $x, $y);
        for i in (0..x.len()).step_by(P::W) {
            let $v = p.load_at(x, i);
            p.store_at(y, i, $body);
        }
    }};
}

impl WithPacket for Run<'_> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let (x, y) = (self.x, self.y);
        match self.f {
            F::Exp => each!(p, x, y, |v| math::exp(p, v)),
            F::Exp2Flush => each!(p, x, y, |v| math::exp2_flush(p, v)),
            F::Erf => each!(p, x, y, |v| math::erf(p, v)),
            F::Sigmoid => each!(p, x, y, |v| math::sigmoid(p, v)),
            F::Silu => each!(p, x, y, |v| math::silu(p, v)),
            F::Gelu => each!(p, x, y, |v| math::gelu(p, v)),
            F::SwiGlu => each!(p, x, y, |v| p.mul(p.mul(v, math::sigmoid(p, v)), v)),
        }
    }
}

/// Deterministic N(0,1) samples (xorshift + Box–Muller).
fn normal(n: usize, scale: f32) -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (next(), next());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32 * scale
        })
        .collect()
}

fn main() -> Result<(), taskgrain::Error> {
    let width: usize = std::env::args()
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or(8);
    let backend = Backend::native(width)?;
    let n = 4096;
    let reps = 200;
    println!(
        "{} · ns per packet of {width}, {n} inputs in L1",
        backend.name()
    );
    println!("function | 0.5·N(0,1) | N(0,1) | 8·N(0,1)");
    for f in [
        F::Exp,
        F::Exp2Flush,
        F::Erf,
        F::Sigmoid,
        F::Silu,
        F::Gelu,
        F::SwiGlu,
    ] {
        let mut row = Vec::new();
        for scale in [0.5, 1.0, 8.0] {
            let x = normal(n, scale);
            let mut y = vec![0.0f32; n];
            let mut rounds = Vec::new();
            for _ in 0..7 {
                let t = time_calls(1, 9, || {
                    for _ in 0..reps {
                        dispatch(
                            backend,
                            Run {
                                f,
                                x: black_box(&x),
                                y: &mut y,
                            },
                        );
                    }
                    black_box(&mut y);
                });
                rounds.push(median(&t));
            }
            let packets = (n / width * reps) as f64;
            row.push(median(&rounds) * 1e3 / packets);
        }
        println!("{f:?} | {:.2} | {:.2} | {:.2}", row[0], row[1], row[2]);
    }
    Ok(())
}
