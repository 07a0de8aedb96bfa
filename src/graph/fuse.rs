//! The fusion pass: rewrites a graph into fewer launches without changing what
//! it computes. Rules, applied until none applies:
//!
//! 1. **prologue** — an element-wise node (`map`) whose result only one node
//!    reads is inlined into that consumer when the consumer is a `map` or a
//!    `softmax`: its expression is substituted for the consumer's input.
//! 2. **epilogue** — an element-wise node that is the only reader of another
//!    kernel's result (any kernel: a norm, rope, softmax, probs·v, attention) is
//!    applied to that result in the producer's launch, while the group's rows are
//!    still in cache — provided its other inputs exist before the producer runs.
//! 3. **flash attention** — `scores → softmax → probs·v`, each intermediate read
//!    once and neither carrying a prologue or epilogue, becomes one flash-style
//!    launch with an online softmax that never materializes the score matrix.
//!
//! A rewrite that would exceed the expression limits ([`MAX_STEPS`],
//! [`MAX_INPUTS`]) is not made: that part of the graph runs unfused, correctly.
//! The graph output and any tensor read twice are always materialized.

use super::ir::{Epilogue, Expr, Graph, Kernel, MAX_INPUTS, MAX_STEPS, Node, Step, TensorId};

/// The fused form of `graph`.
pub fn fuse(graph: &Graph) -> Graph {
    let mut g = graph.clone();
    while let Some(next) = fuse_once(&g) {
        g = next;
    }
    g
}

/// Applies the first rule that matches, or `None` when none does.
fn fuse_once(g: &Graph) -> Option<Graph> {
    for c in 0..g.nodes.len() {
        for (k, &t) in g.nodes[c].inputs.iter().enumerate() {
            let Some(p) = single_use_producer(g, t, c) else {
                continue;
            };
            if let Some(merged) = prologue(g, p, c, k).or_else(|| epilogue(g, p, c, k)) {
                return Some(merged);
            }
        }
        if let Some(merged) = flash(g, c) {
            return Some(merged);
        }
    }
    None
}

/// The node producing `t`, if `t` is an intermediate read exactly once, by node
/// `c` (and through a kernel input, not an epilogue).
fn single_use_producer(g: &Graph, t: TensorId, c: usize) -> Option<usize> {
    if t == g.output {
        return None;
    }
    let p = g.nodes.iter().position(|n| n.output == t)?;
    let reads: usize = g
        .nodes
        .iter()
        .map(|n| n.reads().filter(|&r| r == t).count())
        .sum();
    (reads == 1 && g.nodes[c].inputs.contains(&t)).then_some(p)
}

/// Rule 1: map `p` inlined as input `k` of map or softmax `c`.
fn prologue(g: &Graph, p: usize, c: usize, k: usize) -> Option<Graph> {
    let Kernel::Map(inner) = &g.nodes[p].kernel else {
        return None;
    };
    if g.nodes[p].epilogue.is_some() {
        return None;
    }
    let consumer = &g.nodes[c];
    let identity = Expr::new(vec![Step::Input(0)], 1).expect("valid");
    let outer = match &consumer.kernel {
        Kernel::Map(e) => e,
        Kernel::Softmax { prologue } => prologue.as_ref().unwrap_or(&identity),
        _ => return None,
    };
    let expr = outer.substitute(k, inner)?;
    let mut inputs: Vec<TensorId> = consumer.inputs.clone();
    inputs.remove(k);
    inputs.extend(&g.nodes[p].inputs);
    let (expr, inputs) = expr.dedup_inputs(&inputs);
    if inputs.len() + consumer.epilogue.as_ref().map_or(0, |e| e.extra.len()) > MAX_INPUTS {
        return None;
    }
    let kernel = match consumer.kernel {
        Kernel::Map(_) => Kernel::Map(expr),
        _ => Kernel::Softmax {
            prologue: Some(expr),
        },
    };
    let mut out = g.clone();
    out.nodes[c] = Node {
        kernel,
        inputs,
        output: consumer.output,
        epilogue: consumer.epilogue.clone(),
    };
    out.nodes.remove(p);
    Some(out)
}

/// Stands for "the producer's own result" among an epilogue's inputs while it is built.
const VALUE: TensorId = TensorId::MAX;

/// Rule 2: map `c` (reading `p`'s result as input `k`) applied as `p`'s epilogue,
/// composed with the epilogue `p` already has.
fn epilogue(g: &Graph, p: usize, c: usize, k: usize) -> Option<Graph> {
    let consumer = &g.nodes[c];
    let Kernel::Map(e) = &consumer.kernel else {
        return None;
    };
    let producer = &g.nodes[p];
    if matches!(producer.kernel, Kernel::Map(_)) {
        return None;
    }
    // Every other input of `c` must exist before `p` runs.
    let ready = |t: TensorId| match g.nodes.iter().position(|n| n.output == t) {
        Some(q) => q < p,
        None => true,
    };
    if !consumer
        .inputs
        .iter()
        .all(|&t| t == consumer.inputs[k] || ready(t))
    {
        return None;
    }
    let (base, mut inputs) = match &producer.epilogue {
        None => (
            Expr::new(vec![Step::Input(0)], 1).expect("valid"),
            vec![VALUE],
        ),
        Some(ep) => (ep.expr.clone(), [&[VALUE][..], &ep.extra].concat()),
    };
    let expr = e.substitute(k, &base)?;
    let mut all: Vec<TensorId> = consumer.inputs.clone();
    all.remove(k);
    all.append(&mut inputs);
    let (expr, all) = expr.dedup_inputs(&all);
    // Renumber so that the producer's value is input 0 and the others follow.
    let v = all.iter().position(|&t| t == VALUE)?;
    let order = |i: usize| match i {
        i if i == v => 0,
        i if i < v => i + 1,
        i => i,
    };
    let steps = expr
        .steps()
        .iter()
        .map(|s| match *s {
            Step::Input(i) => Step::Input(order(i)),
            other => other,
        })
        .collect();
    let expr = Expr::new(steps, expr.arity()).ok()?;
    let extra: Vec<TensorId> = all.into_iter().filter(|&t| t != VALUE).collect();
    if producer.inputs.len() + extra.len() > MAX_INPUTS || expr.steps().len() > MAX_STEPS {
        return None;
    }
    let mut out = g.clone();
    out.nodes[p].epilogue = Some(Epilogue { expr, extra });
    out.nodes[p].output = consumer.output;
    out.nodes.remove(c);
    Some(out)
}

/// Rule 3: `scores → softmax → probs·v` ending at node `c` as one flash launch.
fn flash(g: &Graph, c: usize) -> Option<Graph> {
    let pv = &g.nodes[c];
    let Kernel::ProbsV(a) = pv.kernel else {
        return None;
    };
    let sm = single_use_producer(g, pv.inputs[0], c)?;
    let softmax = &g.nodes[sm];
    if softmax.kernel != (Kernel::Softmax { prologue: None }) || softmax.epilogue.is_some() {
        return None;
    }
    let sc = single_use_producer(g, softmax.inputs[0], sm)?;
    let scores = &g.nodes[sc];
    if scores.kernel != Kernel::Scores(a) || scores.epilogue.is_some() {
        return None;
    }
    let mut out = g.clone();
    out.nodes[c] = Node {
        kernel: Kernel::Attention(a),
        inputs: vec![scores.inputs[0], scores.inputs[1], pv.inputs[1]],
        output: pv.output,
        epilogue: pv.epilogue.clone(),
    };
    let (first, second) = (sc.max(sm), sc.min(sm));
    out.nodes.remove(first);
    out.nodes.remove(second);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::build::op_graph;
    use super::super::ir::{Binary, GraphBuilder, TensorShape, Unary};
    use super::*;
    use crate::ops::{Op, Shape};

    #[test]
    fn every_operator_fuses_to_one_launch() {
        let rows = Shape::rows(4, 8);
        let attn = Shape::parse(Op::Attention, "1x4x2x3x5x8x8").unwrap();
        for op in Op::ALL {
            let shape = if op == Op::Attention { attn } else { rows };
            let fused = fuse(&op_graph(op, &shape).unwrap());
            assert_eq!(fused.launches(), 1, "{op}: {:?}", fused.kernel_names());
        }
        let swiglu = fuse(&op_graph(Op::SwiGlu, &rows).unwrap());
        assert_eq!(swiglu.kernel_names(), ["map(mul(silu(in1), in0))"]);
        assert_eq!(swiglu.nodes()[0].inputs, [1, 0]);
        let softmax = fuse(&op_graph(Op::MaskedSoftmax, &rows).unwrap());
        assert_eq!(softmax.kernel_names(), ["softmax(add(in0, in1))"]);
    }

    #[test]
    fn chains_fuse_generally() {
        // rmsnorm → mul(·, s) → gelu → add(·, r): one launch with an epilogue.
        let mut g = GraphBuilder::new();
        let full = TensorShape::new(3, 16);
        let x = g.input("x", full);
        let w = g.input("w", TensorShape::new(1, 16));
        let s = g.input("s", full);
        let r = g.input("r", full);
        let n = g.node(Kernel::RmsNorm, &[x, w]).unwrap();
        let m = g
            .node(Kernel::Map(Expr::binary(Binary::Mul)), &[n, s])
            .unwrap();
        let e = g.node(Kernel::Map(Expr::unary(Unary::Gelu)), &[m]).unwrap();
        let y = g
            .node(Kernel::Map(Expr::binary(Binary::Add)), &[e, r])
            .unwrap();
        let fused = fuse(&g.finish(y).unwrap());
        assert_eq!(fused.launches(), 1, "{:?}", fused.kernel_names());
        let ep = fused.nodes()[0].epilogue.as_ref().unwrap();
        assert_eq!(ep.expr.to_string(), "add(gelu(mul(in0, in2)), in1)");
        assert_eq!(ep.extra, [r, s]);
    }

    #[test]
    fn a_tensor_read_twice_stays_materialized() {
        // t = silu(x); y = softmax(t) + t: t has two readers, so it is written
        // once; the add still becomes the softmax's epilogue.
        let mut g = GraphBuilder::new();
        let full = TensorShape::new(2, 8);
        let x = g.input("x", full);
        let t = g.node(Kernel::Map(Expr::unary(Unary::Silu)), &[x]).unwrap();
        let s = g.node(Kernel::Softmax { prologue: None }, &[t]).unwrap();
        let y = g
            .node(Kernel::Map(Expr::binary(Binary::Add)), &[s, t])
            .unwrap();
        let fused = fuse(&g.finish(y).unwrap());
        assert_eq!(fused.kernel_names(), ["map(silu(in0))", "softmax"]);
        assert_eq!(fused.nodes()[1].epilogue.as_ref().unwrap().extra, [t]);
    }

    #[test]
    fn one_consumer_reading_twice_still_fuses() {
        // y = exp(t) + t with t = silu(x): one reader, so one launch.
        let mut g = GraphBuilder::new();
        let x = g.input("x", TensorShape::new(2, 8));
        let t = g.node(Kernel::Map(Expr::unary(Unary::Silu)), &[x]).unwrap();
        let a = g.node(Kernel::Map(Expr::unary(Unary::Exp)), &[t]).unwrap();
        let y = g
            .node(Kernel::Map(Expr::binary(Binary::Add)), &[a, t])
            .unwrap();
        let fused = fuse(&g.finish(y).unwrap());
        assert_eq!(
            fused.kernel_names(),
            ["map(add(exp(silu(in0)), silu(in0)))"]
        );
    }
}
