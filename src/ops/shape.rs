//! Operators, their shapes and the parsing of `--shape` strings.

use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// The seven operators of taskgrain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// y = x / sqrt(mean(x²) + 1e-6) · w
    RmsNorm,
    /// y = (x − mean) / sqrt(var + 1e-5) · w + b
    LayerNorm,
    /// y = softmax(x + mask) along the row; a fully −inf row gives zeros.
    MaskedSoftmax,
    /// y = g · sigmoid(g) · u
    SwiGlu,
    /// y = 0.5 · x · (1 + erf(x/√2)) + r
    GeluResidual,
    /// Rotate-half (NeoX) rotary embedding.
    Rope,
    /// o = softmax(q·kᵀ/√Dk)·v with grouped query heads.
    Attention,
}

impl Op {
    /// Every operator, in the order of DESIGN.md.
    pub const ALL: [Op; 7] = [
        Op::RmsNorm,
        Op::LayerNorm,
        Op::MaskedSoftmax,
        Op::SwiGlu,
        Op::GeluResidual,
        Op::Rope,
        Op::Attention,
    ];

    /// The operator's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::RmsNorm => "rmsnorm",
            Op::LayerNorm => "layernorm",
            Op::MaskedSoftmax => "masked_softmax",
            Op::SwiGlu => "swiglu",
            Op::GeluResidual => "gelu_residual",
            Op::Rope => "rope",
            Op::Attention => "attention",
        }
    }

    /// `true` for the six row operators, `false` for attention.
    pub fn is_row_op(self) -> bool {
        self != Op::Attention
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = Error;
    fn from_str(s: &str) -> Result<Op> {
        Op::ALL
            .into_iter()
            .find(|op| op.name() == s)
            .ok_or_else(|| Error::UnknownOp(s.to_string()))
    }
}

/// The shape of an attention problem: `BxHqxHkvxSqxSkvxDkxDv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttnShape {
    /// Batch.
    pub batch: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads (divides `q_heads`).
    pub kv_heads: usize,
    /// Query length.
    pub q_len: usize,
    /// Key/value length.
    pub kv_len: usize,
    /// Query/key head dimension.
    pub dk: usize,
    /// Value head dimension.
    pub dv: usize,
}

impl AttnShape {
    /// Elements of q, k, v and o.
    pub fn lens(&self) -> [usize; 4] {
        let AttnShape {
            batch: b,
            q_heads: hq,
            kv_heads: hkv,
            q_len: sq,
            kv_len: skv,
            dk,
            dv,
        } = *self;
        [
            b * hq * sq * dk,
            b * hkv * skv * dk,
            b * hkv * skv * dv,
            b * hq * sq * dv,
        ]
    }

    /// Floating-point operations of one call (2 per multiply-add in q·kᵀ and p·v).
    pub fn flops(&self) -> f64 {
        let pairs = (self.batch * self.q_heads * self.q_len * self.kv_len) as f64;
        pairs * 2.0 * (self.dk + self.dv) as f64
    }
}

/// The shape of a problem: `RxC` for row operators, [`AttnShape`] for attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// `rows × cols`.
    Rows {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// An attention shape.
    Attention(AttnShape),
}

impl Shape {
    /// A row shape.
    pub fn rows(rows: usize, cols: usize) -> Shape {
        Shape::Rows { rows, cols }
    }

    /// The dimensions as a list, as written on the command line.
    pub fn dims(&self) -> Vec<usize> {
        let (dims, n) = self.dim_array();
        dims[..n].to_vec()
    }

    /// The dimensions in a fixed array (the first `n` are live): checking a
    /// shape on every call must not allocate.
    fn dim_array(&self) -> ([usize; 7], usize) {
        match *self {
            Shape::Rows { rows, cols } => ([rows, cols, 0, 0, 0, 0, 0], 2),
            Shape::Attention(a) => (
                [
                    a.batch, a.q_heads, a.kv_heads, a.q_len, a.kv_len, a.dk, a.dv,
                ],
                7,
            ),
        }
    }

    /// Builds a shape from its dimension list, validating it for `op`.
    pub fn from_dims(op: Op, dims: &[usize]) -> Result<Shape> {
        let text = dims
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x");
        let shape = match (op, dims) {
            (Op::Attention, &[batch, q_heads, kv_heads, q_len, kv_len, dk, dv]) => {
                Shape::Attention(AttnShape {
                    batch,
                    q_heads,
                    kv_heads,
                    q_len,
                    kv_len,
                    dk,
                    dv,
                })
            }
            (Op::Attention, _) => {
                return Err(Error::MalformedShape {
                    text,
                    why: "attention takes 7 dimensions BxHqxHkvxSqxSkvxDkxDv".into(),
                });
            }
            (_, &[rows, cols]) => Shape::Rows { rows, cols },
            (_, _) => {
                return Err(Error::MalformedShape {
                    text,
                    why: format!("{op} takes 2 dimensions RxC"),
                });
            }
        };
        shape.validate(op)?;
        Ok(shape)
    }

    /// Parses `RxC` or `BxHqxHkvxSqxSkvxDkxDv` (`x`, `X` or `×` as separator) for `op`.
    pub fn parse(op: Op, text: &str) -> Result<Shape> {
        let malformed = |why: String| Error::MalformedShape {
            text: text.to_string(),
            why,
        };
        let dims = text
            .split(['x', 'X', '×'])
            .map(|part| {
                part.trim()
                    .parse::<usize>()
                    .map_err(|_| malformed(format!("{part:?} is not a dimension")))
            })
            .collect::<Result<Vec<_>>>()?;
        Shape::from_dims(op, &dims).map_err(|e| match e {
            Error::MalformedShape { why, .. } => malformed(why),
            other => other,
        })
    }

    /// Checks the shape against `op`'s rules: no zero dimension, no overflow,
    /// even C for rope, Hq divisible by Hkv for attention.
    pub fn validate(&self, op: Op) -> Result<()> {
        const LIMIT: usize = 1 << 40;
        let (dims, n) = self.dim_array();
        let dims = &dims[..n];
        if let Some(i) = dims.iter().position(|&d| d == 0) {
            return Err(Error::BadDimension(format!(
                "dimension {} of {} is zero",
                i + 1,
                self
            )));
        }
        let mut total: usize = 1;
        for &d in dims {
            total = total
                .checked_mul(d)
                .filter(|&t| t <= LIMIT)
                .ok_or_else(|| {
                    Error::BadDimension(format!("{self} has more than 2^40 elements"))
                })?;
        }
        match (*self, op) {
            (Shape::Attention(a), Op::Attention) => {
                for len in a.lens() {
                    if len > LIMIT {
                        return Err(Error::BadDimension(format!(
                            "{self} has a tensor of more than 2^40 elements"
                        )));
                    }
                }
                if a.q_heads % a.kv_heads != 0 {
                    return Err(Error::BadDimension(format!(
                        "Hq = {} is not a multiple of Hkv = {}",
                        a.q_heads, a.kv_heads
                    )));
                }
            }
            (Shape::Attention(_), _) => {
                return Err(Error::MalformedShape {
                    text: self.to_string(),
                    why: format!("{op} takes 2 dimensions RxC"),
                });
            }
            (Shape::Rows { .. }, Op::Attention) => {
                return Err(Error::MalformedShape {
                    text: self.to_string(),
                    why: "attention takes 7 dimensions BxHqxHkvxSqxSkvxDkxDv".into(),
                });
            }
            (Shape::Rows { cols, .. }, Op::Rope) if cols % 2 != 0 => {
                return Err(Error::BadDimension(format!(
                    "rope needs an even number of columns, got C = {cols}"
                )));
            }
            _ => {}
        }
        Ok(())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims = self.dims();
        let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        f.write_str(&parts.join("x"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_shapes() {
        assert_eq!(
            Shape::parse(Op::RmsNorm, "17x65").unwrap(),
            Shape::rows(17, 65)
        );
        assert_eq!(
            Shape::parse(Op::RmsNorm, "17×65").unwrap(),
            Shape::rows(17, 65)
        );
        let a = Shape::parse(Op::Attention, "1x4x2x16x32x16x16").unwrap();
        assert_eq!(a.to_string(), "1x4x2x16x32x16x16");
        for (op, bad) in [
            (Op::RmsNorm, "17"),
            (Op::RmsNorm, "17x"),
            (Op::RmsNorm, "0x5"),
            (Op::RmsNorm, "ax5"),
            (Op::Rope, "4x7"),
            (Op::Attention, "1x3x2x4x4x4x4"),
            (Op::Attention, "4x4"),
            (Op::RmsNorm, "99999999999x99999999999"),
        ] {
            assert!(Shape::parse(op, bad).is_err(), "{op} {bad}");
        }
    }
}
