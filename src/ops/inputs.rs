//! Operator inputs: borrowed views checked against a shape, and seeded generation.

use super::shape::{AttnShape, Op, Shape};
use crate::buffer::{self, AlignedBuf};
use crate::error::{Error, Result};

/// Borrowed inputs of one operator call, checked against its shape.
#[derive(Clone, Copy, Debug)]
pub enum OpInputs<'a> {
    /// `x[R,C]`, `w[C]`.
    RmsNorm {
        /// Input rows.
        x: &'a [f32],
        /// Per-column weight.
        w: &'a [f32],
    },
    /// `x[R,C]`, `w[C]`, `b[C]`.
    LayerNorm {
        /// Input rows.
        x: &'a [f32],
        /// Per-column weight.
        w: &'a [f32],
        /// Per-column bias.
        b: &'a [f32],
    },
    /// `x[R,C]`, `mask[R,C]` (additive).
    MaskedSoftmax {
        /// Logits.
        x: &'a [f32],
        /// Additive mask: 0, finite negatives or −inf.
        mask: &'a [f32],
    },
    /// `g[R,C]`, `u[R,C]`.
    SwiGlu {
        /// Gate.
        g: &'a [f32],
        /// Up projection.
        u: &'a [f32],
    },
    /// `x[R,C]`, `r[R,C]`.
    GeluResidual {
        /// Input.
        x: &'a [f32],
        /// Residual.
        r: &'a [f32],
    },
    /// `x[R,C]`, `cos[R,C/2]`, `sin[R,C/2]`.
    Rope {
        /// Input rows (C even).
        x: &'a [f32],
        /// Cosines per row and frequency.
        cos: &'a [f32],
        /// Sines per row and frequency.
        sin: &'a [f32],
    },
    /// `q[B,Hq,Sq,Dk]`, `k[B,Hkv,Skv,Dk]`, `v[B,Hkv,Skv,Dv]`.
    Attention {
        /// Queries.
        q: &'a [f32],
        /// Keys.
        k: &'a [f32],
        /// Values.
        v: &'a [f32],
    },
}

/// Names of each operator's input tensors, in order.
pub fn input_names(op: Op) -> &'static [&'static str] {
    match op {
        Op::RmsNorm => &["x", "w"],
        Op::LayerNorm => &["x", "w", "b"],
        Op::MaskedSoftmax => &["x", "mask"],
        Op::SwiGlu => &["g", "u"],
        Op::GeluResidual => &["x", "r"],
        Op::Rope => &["x", "cos", "sin"],
        Op::Attention => &["q", "k", "v"],
    }
}

/// Expected element counts of each operator's input tensors, in order.
pub fn input_lens(op: Op, shape: &Shape) -> Vec<usize> {
    let (lens, n) = input_len_array(op, shape);
    lens[..n].to_vec()
}

/// [`input_lens`] in a fixed array (the first `n` are live), for the per-call
/// checks that must not allocate.
fn input_len_array(op: Op, shape: &Shape) -> ([usize; 3], usize) {
    match *shape {
        Shape::Rows { rows, cols } => {
            let n = rows * cols;
            match op {
                Op::RmsNorm => ([n, cols, 0], 2),
                Op::LayerNorm => ([n, cols, cols], 3),
                Op::Rope => ([n, n / 2, n / 2], 3),
                _ => ([n, n, 0], 2),
            }
        }
        Shape::Attention(a) => {
            let [q, k, v, _] = a.lens();
            ([q, k, v], 3)
        }
    }
}

/// Elements of the operator's output.
pub fn output_len(shape: &Shape) -> usize {
    match *shape {
        Shape::Rows { rows, cols } => rows * cols,
        Shape::Attention(a) => a.lens()[3],
    }
}

/// Bytes read and written by one call: every input once and the output once.
pub fn traffic_bytes(op: Op, shape: &Shape) -> usize {
    let (lens, n) = input_len_array(op, shape);
    (lens[..n].iter().sum::<usize>() + output_len(shape)) * 4
}

impl<'a> OpInputs<'a> {
    /// Builds the inputs of `op` from slices in the order of [`input_names`],
    /// checking every length against `shape`.
    pub fn new(op: Op, shape: &Shape, tensors: &[&'a [f32]]) -> Result<Self> {
        shape.validate(op)?;
        let (want, n) = input_len_array(op, shape);
        let want = &want[..n];
        if tensors.len() != want.len() {
            return Err(Error::ShapeMismatch(format!(
                "{op} takes {} inputs ({}), got {}",
                want.len(),
                input_names(op).join(", "),
                tensors.len()
            )));
        }
        for ((name, &len), t) in input_names(op).iter().zip(want).zip(tensors) {
            if t.len() != len {
                return Err(Error::ShapeMismatch(format!(
                    "{op} {shape}: input {name} has {} elements, expected {len}",
                    t.len()
                )));
            }
        }
        Ok(Self::bind(op, tensors))
    }

    /// The inputs of `op` from slices that are known to fit its shape (a graph
    /// launch's tensors, whose lengths the executor checked for the whole call):
    /// the per-call path, without [`OpInputs::new`]'s checks. `tensors` holds
    /// exactly `op`'s inputs, in the order of [`input_names`].
    #[inline]
    pub(crate) fn bind(op: Op, tensors: &[&'a [f32]]) -> Self {
        debug_assert_eq!(tensors.len(), input_names(op).len());
        let t = tensors;
        match op {
            Op::RmsNorm => OpInputs::RmsNorm { x: t[0], w: t[1] },
            Op::LayerNorm => OpInputs::LayerNorm {
                x: t[0],
                w: t[1],
                b: t[2],
            },
            Op::MaskedSoftmax => OpInputs::MaskedSoftmax {
                x: t[0],
                mask: t[1],
            },
            Op::SwiGlu => OpInputs::SwiGlu { g: t[0], u: t[1] },
            Op::GeluResidual => OpInputs::GeluResidual { x: t[0], r: t[1] },
            Op::Rope => OpInputs::Rope {
                x: t[0],
                cos: t[1],
                sin: t[2],
            },
            Op::Attention => OpInputs::Attention {
                q: t[0],
                k: t[1],
                v: t[2],
            },
        }
    }

    /// The operator these inputs are for.
    pub fn op(&self) -> Op {
        match self {
            OpInputs::RmsNorm { .. } => Op::RmsNorm,
            OpInputs::LayerNorm { .. } => Op::LayerNorm,
            OpInputs::MaskedSoftmax { .. } => Op::MaskedSoftmax,
            OpInputs::SwiGlu { .. } => Op::SwiGlu,
            OpInputs::GeluResidual { .. } => Op::GeluResidual,
            OpInputs::Rope { .. } => Op::Rope,
            OpInputs::Attention { .. } => Op::Attention,
        }
    }

    /// The input slices in the order of [`input_names`] (unused entries empty)
    /// and how many there are.
    pub fn tensors(&self) -> ([&'a [f32]; 3], usize) {
        match *self {
            OpInputs::RmsNorm { x, w } => ([x, w, &[]], 2),
            OpInputs::LayerNorm { x, w, b } => ([x, w, b], 3),
            OpInputs::MaskedSoftmax { x, mask } => ([x, mask, &[]], 2),
            OpInputs::SwiGlu { g, u } => ([g, u, &[]], 2),
            OpInputs::GeluResidual { x, r } => ([x, r, &[]], 2),
            OpInputs::Rope { x, cos, sin } => ([x, cos, sin], 3),
            OpInputs::Attention { q, k, v } => ([q, k, v], 3),
        }
    }
}

/// Owned, seeded inputs for one operator and shape (the CLI's and the benchmarks' data).
#[derive(Clone, Debug)]
pub struct OwnedInputs {
    op: Op,
    shape: Shape,
    tensors: Vec<AlignedBuf>,
}

impl OwnedInputs {
    /// The default inputs of DESIGN.md: x ~ N(0,1), weights 1 + 0.1·N(0,1), biases
    /// 0.1·N(0,1), masks with about 10% −inf and 10% finite negatives and never a fully
    /// masked row, cos/sin of positions with base 10000.
    pub fn generate(op: Op, shape: Shape, seed: u64) -> Result<Self> {
        shape.validate(op)?;
        let mut rng = Rng::new(seed ^ (op as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let lens = input_lens(op, &shape);
        let normal =
            |rng: &mut Rng, n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal()).collect() };
        let tensors = match (op, shape) {
            (Op::RmsNorm, _) => vec![
                normal(&mut rng, lens[0]),
                (0..lens[1]).map(|_| 1.0 + 0.1 * rng.normal()).collect(),
            ],
            (Op::LayerNorm, _) => vec![
                normal(&mut rng, lens[0]),
                (0..lens[1]).map(|_| 1.0 + 0.1 * rng.normal()).collect(),
                (0..lens[2]).map(|_| 0.1 * rng.normal()).collect(),
            ],
            (Op::MaskedSoftmax, Shape::Rows { rows, cols }) => {
                let x = normal(&mut rng, lens[0]);
                let mut mask = vec![0.0f32; lens[1]];
                for r in 0..rows {
                    let row = &mut mask[r * cols..(r + 1) * cols];
                    for m in row.iter_mut() {
                        let u = rng.uniform();
                        *m = if u < 0.1 {
                            f32::NEG_INFINITY
                        } else if u < 0.2 {
                            -4.0 * rng.uniform() as f32
                        } else {
                            0.0
                        };
                    }
                    let keep = (rng.next_u64() % cols as u64) as usize;
                    row[keep] = 0.0;
                }
                vec![x, mask]
            }
            (Op::Rope, Shape::Rows { rows, cols }) => {
                let half = cols / 2;
                let mut cos = Vec::with_capacity(rows * half);
                let mut sin = Vec::with_capacity(rows * half);
                for pos in 0..rows {
                    for i in 0..half {
                        let inv_freq = 10000f64.powf(-2.0 * i as f64 / cols as f64);
                        let angle = pos as f64 * inv_freq;
                        cos.push(angle.cos() as f32);
                        sin.push(angle.sin() as f32);
                    }
                }
                vec![normal(&mut rng, lens[0]), cos, sin]
            }
            _ => lens.iter().map(|&n| normal(&mut rng, n)).collect(),
        };
        Ok(OwnedInputs {
            op,
            shape,
            tensors: tensors.iter().map(|t| buffer::from_slice(t)).collect(),
        })
    }

    /// Wraps tensors given in the order of [`input_names`], checking their lengths.
    pub fn from_tensors(op: Op, shape: Shape, tensors: Vec<Vec<f32>>) -> Result<Self> {
        let slices: Vec<&[f32]> = tensors.iter().map(|t| t.as_slice()).collect();
        OpInputs::new(op, &shape, &slices)?;
        Ok(OwnedInputs {
            op,
            shape,
            tensors: tensors.iter().map(|t| buffer::from_slice(t)).collect(),
        })
    }

    /// The operator.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The tensors, in the order of [`input_names`], each cache-line aligned.
    pub fn tensors(&self) -> &[AlignedBuf] {
        &self.tensors
    }

    /// Mutable access to the tensors (for tests that plant special values).
    pub fn tensors_mut(&mut self) -> &mut [AlignedBuf] {
        &mut self.tensors
    }

    /// Borrowed, checked inputs.
    pub fn view(&self) -> OpInputs<'_> {
        let mut slices: [&[f32]; 3] = [&[]; 3];
        for (slot, t) in slices.iter_mut().zip(&self.tensors) {
            *slot = t;
        }
        let n = self.tensors.len().min(3);
        OpInputs::new(self.op, &self.shape, &slices[..n])
            .expect("owned inputs were checked when built")
    }

    /// The attention shape, if this is attention.
    pub fn attn_shape(&self) -> Option<AttnShape> {
        match self.shape {
            Shape::Attention(a) => Some(a),
            _ => None,
        }
    }
}

/// A small, fast, seeded generator (SplitMix64) so inputs are identical on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller), rounded to f32.
    pub fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
}
