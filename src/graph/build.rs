//! The unfused graph of each operator, as DESIGN.md fixes them: masked_softmax =
//! mask-add → softmax; swiglu = silu → mul; gelu_residual = gelu → add;
//! attention = scores → softmax → ·v; rmsnorm, layernorm and rope are one launch.

use super::ir::{Binary, Expr, Graph, GraphBuilder, Kernel, TensorShape, Unary, kv_shape, q_shape};
use crate::error::Result;
use crate::ops::{Op, Shape, input_names};

/// The unfused graph of `op` at `shape` (validated); its inputs are the
/// operator's, in the order of [`input_names`].
pub fn op_graph(op: Op, shape: &Shape) -> Result<Graph> {
    shape.validate(op)?;
    let mut g = GraphBuilder::new();
    let names = input_names(op);
    let out = match *shape {
        Shape::Rows { rows, cols } => {
            let full = TensorShape::new(rows, cols);
            let vector = TensorShape::new(1, cols);
            let half = TensorShape::new(rows, cols / 2);
            match op {
                Op::RmsNorm => {
                    let (x, w) = (g.input(names[0], full), g.input(names[1], vector));
                    g.node(Kernel::RmsNorm, &[x, w])?
                }
                Op::LayerNorm => {
                    let x = g.input(names[0], full);
                    let w = g.input(names[1], vector);
                    let b = g.input(names[2], vector);
                    g.node(Kernel::LayerNorm, &[x, w, b])?
                }
                Op::Rope => {
                    let x = g.input(names[0], full);
                    let cos = g.input(names[1], half);
                    let sin = g.input(names[2], half);
                    g.node(Kernel::Rope, &[x, cos, sin])?
                }
                Op::MaskedSoftmax => {
                    let (x, mask) = (g.input(names[0], full), g.input(names[1], full));
                    let t = g.node(Kernel::Map(Expr::binary(Binary::Add)), &[x, mask])?;
                    g.node(Kernel::Softmax { prologue: None }, &[t])?
                }
                Op::SwiGlu => {
                    let (gate, up) = (g.input(names[0], full), g.input(names[1], full));
                    let t = g.node(Kernel::Map(Expr::unary(Unary::Silu)), &[gate])?;
                    g.node(Kernel::Map(Expr::binary(Binary::Mul)), &[t, up])?
                }
                Op::GeluResidual => {
                    let (x, r) = (g.input(names[0], full), g.input(names[1], full));
                    let t = g.node(Kernel::Map(Expr::unary(Unary::Gelu)), &[x])?;
                    g.node(Kernel::Map(Expr::binary(Binary::Add)), &[t, r])?
                }
                Op::Attention => unreachable!("validated: attention has an attention shape"),
            }
        }
        Shape::Attention(a) => {
            let q = g.input(names[0], q_shape(&a));
            let k = g.input(names[1], kv_shape(&a, a.dk));
            let v = g.input(names[2], kv_shape(&a, a.dv));
            let s = g.node(Kernel::Scores(a), &[q, k])?;
            let p = g.node(Kernel::Softmax { prologue: None }, &[s])?;
            g.node(Kernel::ProbsV(a), &[p, v])?
        }
    };
    let mut graph = g.finish(out)?;
    graph.operator = Some((op, *shape));
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfused_launch_counts_follow_the_design() {
        let rows = Shape::rows(4, 8);
        let attn = Shape::parse(Op::Attention, "1x4x2x3x5x8x8").unwrap();
        for (op, n) in [
            (Op::RmsNorm, 1),
            (Op::LayerNorm, 1),
            (Op::Rope, 1),
            (Op::MaskedSoftmax, 2),
            (Op::SwiGlu, 2),
            (Op::GeluResidual, 2),
            (Op::Attention, 3),
        ] {
            let shape = if op == Op::Attention { attn } else { rows };
            assert_eq!(op_graph(op, &shape).unwrap().launches(), n, "{op}");
        }
    }
}
