//! The graph form: tensors (2-D, row-major) and nodes (one launch each), built
//! through [`GraphBuilder`], which checks that every node's input shapes chain.

use crate::error::{Error, Result};
use crate::ops::{AttnShape, Op, Shape};
use std::fmt;

/// Index of a tensor in its [`Graph`].
pub type TensorId = usize;

/// A row-major 2-D tensor shape. Attention tensors are flattened: q is
/// `[B·Hq·Sq, Dk]`, k `[B·Hkv·Skv, Dk]`, v `[B·Hkv·Skv, Dv]`, scores and
/// probabilities `[B·Hq·Sq, Skv]`, o `[B·Hq·Sq, Dv]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorShape {
    /// Rows.
    pub rows: usize,
    /// Columns (elements per row).
    pub cols: usize,
}

impl TensorShape {
    /// `rows × cols`.
    pub fn new(rows: usize, cols: usize) -> Self {
        TensorShape { rows, cols }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for TensorShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}]", self.rows, self.cols)
    }
}

/// An element-wise function of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unary {
    /// x · sigmoid(x).
    Silu,
    /// Exact GELU: x · Φ(x).
    Gelu,
    /// 1 / (1 + e^−x).
    Sigmoid,
    /// e^x.
    Exp,
    /// −x.
    Neg,
}

/// An element-wise function of two packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binary {
    /// a + b.
    Add,
    /// a − b.
    Sub,
    /// a · b.
    Mul,
    /// max(a, b).
    Max,
}

impl Unary {
    /// A nominal flop count (an exp or erf counts as ~10), for the cost model.
    pub fn flops(self) -> f64 {
        match self {
            Unary::Silu | Unary::Sigmoid => 13.0,
            Unary::Gelu => 16.0,
            Unary::Exp => 10.0,
            Unary::Neg => 1.0,
        }
    }
}

/// One step of an [`Expr`]; operands are indices of earlier steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Input `i` of the expression.
    Input(usize),
    /// `f(step a)`.
    Unary(Unary, usize),
    /// `f(step a, step b)`.
    Binary(Binary, usize, usize),
}

/// Steps an expression may have: the interpreter keeps one register block per
/// step, so this bounds its stack use. A fusion that would exceed it is not made.
pub const MAX_STEPS: usize = 12;

/// Inputs a node may have (an expression's inputs, plus an epilogue's).
pub const MAX_INPUTS: usize = 8;

/// An element-wise expression over `arity` inputs of equal shape, as a list of
/// steps in evaluation order (each operand refers to an earlier step); the value
/// is the last step's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Expr {
    steps: Vec<Step>,
    arity: usize,
}

impl Expr {
    /// `f(input 0)`.
    pub fn unary(f: Unary) -> Expr {
        Expr {
            steps: vec![Step::Input(0), Step::Unary(f, 0)],
            arity: 1,
        }
    }

    /// `f(input 0, input 1)`.
    pub fn binary(f: Binary) -> Expr {
        Expr {
            steps: vec![Step::Input(0), Step::Input(1), Step::Binary(f, 0, 1)],
            arity: 2,
        }
    }

    /// An expression from explicit steps; checks that operands refer to earlier
    /// steps, inputs are below `arity`, and the size limits hold.
    pub fn new(steps: Vec<Step>, arity: usize) -> Result<Expr> {
        let bad = |why: String| Err(Error::BadArgument(format!("expression: {why}")));
        if steps.is_empty() || steps.len() > MAX_STEPS {
            return bad(format!("needs 1..={MAX_STEPS} steps, got {}", steps.len()));
        }
        if arity > MAX_INPUTS {
            return bad(format!("at most {MAX_INPUTS} inputs, got {arity}"));
        }
        for (s, step) in steps.iter().enumerate() {
            let ok = match *step {
                Step::Input(i) => i < arity,
                Step::Unary(_, a) => a < s,
                Step::Binary(_, a, b) => a < s && b < s,
            };
            if !ok {
                return bad(format!(
                    "step {s} ({step:?}) refers forward or past the inputs"
                ));
            }
        }
        Ok(Expr { steps, arity })
    }

    /// The steps in evaluation order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Number of inputs.
    pub fn arity(&self) -> usize {
        self.arity
    }

    /// A nominal flop count per element.
    pub fn flops(&self) -> f64 {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Input(_) => 0.0,
                Step::Unary(f, _) => f.flops(),
                Step::Binary(..) => 1.0,
            })
            .sum()
    }

    /// This expression with its input `k` replaced by `inner` (whose inputs
    /// become inputs `arity − 1 ..` of the result; the others keep their order,
    /// shifted down past `k`). `None` if the result would exceed the limits.
    pub fn substitute(&self, k: usize, inner: &Expr) -> Option<Expr> {
        let arity = self.arity - 1 + inner.arity;
        let outer_input = |i: usize| if i < k { i } else { i - 1 };
        let mut steps = Vec::with_capacity(self.steps.len() + inner.steps.len());
        // The inner expression first, its inputs renumbered after the outer's.
        for s in &inner.steps {
            steps.push(match *s {
                Step::Input(i) => Step::Input(self.arity - 1 + i),
                other => other,
            });
        }
        let inner_value = inner.steps.len() - 1;
        // Then the outer, its steps shifted; a read of input k becomes a copy of
        // the inner value, which later steps reference directly.
        let mut map = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let m = |a: usize| map[a];
            let step = match *s {
                Step::Input(i) if i == k => {
                    map.push(inner_value);
                    continue;
                }
                Step::Input(i) => Step::Input(outer_input(i)),
                Step::Unary(f, a) => Step::Unary(f, m(a)),
                Step::Binary(f, a, b) => Step::Binary(f, m(a), m(b)),
            };
            map.push(steps.len());
            steps.push(step);
        }
        // The value must be the last step: if the outer expression was just
        // `input k`, the inner value already is.
        if map.last() != Some(&(steps.len() - 1)) {
            return None;
        }
        Expr::new(steps, arity).ok()
    }

    /// This expression reading input `i` from tensor `inputs[i]`, with repeated
    /// tensors merged into one input. Returns the expression and its tensors.
    pub fn dedup_inputs(&self, inputs: &[TensorId]) -> (Expr, Vec<TensorId>) {
        let mut tensors: Vec<TensorId> = Vec::with_capacity(inputs.len());
        let mut remap = Vec::with_capacity(inputs.len());
        for &t in inputs {
            let slot = match tensors.iter().position(|&x| x == t) {
                Some(s) => s,
                None => {
                    tensors.push(t);
                    tensors.len() - 1
                }
            };
            remap.push(slot);
        }
        let steps = self
            .steps
            .iter()
            .map(|s| match *s {
                Step::Input(i) => Step::Input(remap[i]),
                other => other,
            })
            .collect();
        (
            Expr {
                steps,
                arity: tensors.len(),
            },
            tensors,
        )
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn show(e: &Expr, s: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match e.steps[s] {
                Step::Input(i) => write!(f, "in{i}"),
                Step::Unary(u, a) => {
                    write!(f, "{}(", format!("{u:?}").to_lowercase())?;
                    show(e, a, f)?;
                    write!(f, ")")
                }
                Step::Binary(b, x, y) => {
                    write!(f, "{}(", format!("{b:?}").to_lowercase())?;
                    show(e, x, f)?;
                    write!(f, ", ")?;
                    show(e, y, f)?;
                    write!(f, ")")
                }
            }
        }
        show(self, self.steps.len() - 1, f)
    }
}

/// What a node's launch computes.
#[derive(Clone, Debug, PartialEq)]
pub enum Kernel {
    /// An element-wise expression over its inputs (all of the output's shape).
    Map(Expr),
    /// rmsnorm: inputs `x[R,C]`, `w[1,C]`.
    RmsNorm,
    /// layernorm: inputs `x[R,C]`, `w[1,C]`, `b[1,C]`.
    LayerNorm,
    /// rope: inputs `x[R,C]`, `cos[R,C/2]`, `sin[R,C/2]`.
    Rope,
    /// Row softmax of its input, or of `prologue` applied element-wise to its
    /// inputs (all of the output's shape).
    Softmax {
        /// An element-wise expression computed into the row before the softmax.
        prologue: Option<Expr>,
    },
    /// Attention scores s = q·kᵀ/√Dk: inputs q, k; output `[B·Hq·Sq, Skv]`.
    Scores(AttnShape),
    /// o = p·v: inputs p `[B·Hq·Sq, Skv]`, v; output `[B·Hq·Sq, Dv]`.
    ProbsV(AttnShape),
    /// Flash-style attention with an online softmax: inputs q, k, v.
    Attention(AttnShape),
}

impl Kernel {
    /// A short name, e.g. `map(mul(silu(in0), in1))` or `softmax`.
    pub fn name(&self) -> String {
        match self {
            Kernel::Map(e) => format!("map({e})"),
            Kernel::RmsNorm => "rmsnorm".into(),
            Kernel::LayerNorm => "layernorm".into(),
            Kernel::Rope => "rope".into(),
            Kernel::Softmax { prologue: None } => "softmax".into(),
            Kernel::Softmax { prologue: Some(e) } => format!("softmax({e})"),
            Kernel::Scores(_) => "scores".into(),
            Kernel::ProbsV(_) => "probs_v".into(),
            Kernel::Attention(_) => "flash_attention".into(),
        }
    }

    /// The output shape for `inputs`, or an error naming what does not chain.
    fn output_shape(&self, inputs: &[TensorShape]) -> std::result::Result<TensorShape, String> {
        let n = |k: usize| {
            if inputs.len() == k {
                Ok(())
            } else {
                Err(format!("takes {k} inputs, got {}", inputs.len()))
            }
        };
        let same = |list: &[TensorShape]| match list.split_first() {
            Some((first, rest)) => match rest.iter().find(|s| *s != first) {
                Some(other) => Err(format!("element-wise inputs differ: {first} vs {other}")),
                None => Ok(*first),
            },
            None => Err("takes at least one input".into()),
        };
        let want = |what: &str, got: TensorShape, exp: TensorShape| {
            if got == exp {
                Ok(())
            } else {
                Err(format!("{what} is {got}, expected {exp}"))
            }
        };
        match self {
            Kernel::Map(e) => {
                n(e.arity())?;
                same(inputs)
            }
            Kernel::Softmax { prologue } => {
                n(prologue.as_ref().map_or(1, Expr::arity))?;
                same(inputs)
            }
            Kernel::RmsNorm | Kernel::LayerNorm => {
                n(if *self == Kernel::RmsNorm { 2 } else { 3 })?;
                let x = inputs[0];
                for (i, s) in inputs.iter().enumerate().skip(1) {
                    want(&format!("input {i}"), *s, TensorShape::new(1, x.cols))?;
                }
                Ok(x)
            }
            Kernel::Rope => {
                n(3)?;
                let x = inputs[0];
                if !x.cols.is_multiple_of(2) {
                    return Err(format!("x is {x}: rope needs an even number of columns"));
                }
                let half = TensorShape::new(x.rows, x.cols / 2);
                want("cos", inputs[1], half)?;
                want("sin", inputs[2], half)?;
                Ok(x)
            }
            Kernel::Scores(a) => {
                n(2)?;
                want("q", inputs[0], q_shape(a))?;
                want("k", inputs[1], kv_shape(a, a.dk))?;
                Ok(TensorShape::new(q_shape(a).rows, a.kv_len))
            }
            Kernel::ProbsV(a) => {
                n(2)?;
                want("p", inputs[0], TensorShape::new(q_shape(a).rows, a.kv_len))?;
                want("v", inputs[1], kv_shape(a, a.dv))?;
                Ok(TensorShape::new(q_shape(a).rows, a.dv))
            }
            Kernel::Attention(a) => {
                n(3)?;
                want("q", inputs[0], q_shape(a))?;
                want("k", inputs[1], kv_shape(a, a.dk))?;
                want("v", inputs[2], kv_shape(a, a.dv))?;
                Ok(TensorShape::new(q_shape(a).rows, a.dv))
            }
        }
    }
}

/// q's flattened shape `[B·Hq·Sq, Dk]`.
pub fn q_shape(a: &AttnShape) -> TensorShape {
    TensorShape::new(a.batch * a.q_heads * a.q_len, a.dk)
}

/// k's or v's flattened shape `[B·Hkv·Skv, d]`.
pub fn kv_shape(a: &AttnShape, d: usize) -> TensorShape {
    TensorShape::new(a.batch * a.kv_heads * a.kv_len, d)
}

/// An element-wise function applied to a node's result before it is stored:
/// input 0 of `expr` is the kernel's value, inputs 1.. are `extra`.
#[derive(Clone, Debug, PartialEq)]
pub struct Epilogue {
    /// The function.
    pub expr: Expr,
    /// Tensors read by inputs 1.. (each of the node's output shape).
    pub extra: Vec<TensorId>,
}

/// One launch: a kernel, its input tensors and its output tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// What it computes.
    pub kernel: Kernel,
    /// Input tensors, in the kernel's order.
    pub inputs: Vec<TensorId>,
    /// The tensor it writes.
    pub output: TensorId,
    /// An element-wise consumer fused in as an epilogue.
    pub epilogue: Option<Epilogue>,
}

impl Node {
    /// Every tensor the node reads (kernel inputs, then epilogue inputs).
    pub fn reads(&self) -> impl Iterator<Item = TensorId> + '_ {
        let extra = self.epilogue.iter().flat_map(|e| e.extra.iter().copied());
        self.inputs.iter().copied().chain(extra)
    }
}

/// A tensor of a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Its name (graph inputs: the operator's input names).
    pub name: String,
    /// Its shape.
    pub shape: TensorShape,
}

/// A graph of launches: nodes in execution order (each reads only graph inputs
/// and earlier nodes' outputs), one graph output.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub(crate) tensors: Vec<Tensor>,
    pub(crate) inputs: Vec<TensorId>,
    pub(crate) nodes: Vec<Node>,
    pub(crate) output: TensorId,
    pub(crate) operator: Option<(Op, Shape)>,
}

impl Graph {
    /// The operator call this graph computes, if it is one of the seven's
    /// ([`op_graph`](super::op_graph), fused or not).
    pub fn operator(&self) -> Option<(Op, Shape)> {
        self.operator
    }

    /// The operator whose own compiled kernel runs this whole graph: set when
    /// the graph is one launch of an operator (what fusion makes of every
    /// operator) with no epilogue.
    pub fn compiled_operator(&self) -> Option<(Op, Shape)> {
        match (self.nodes.as_slice(), self.operator) {
            ([node], Some(op)) if node.epilogue.is_none() => Some(op),
            _ => None,
        }
    }

    /// The nodes, in execution order; each is one launch.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Launches per call.
    pub fn launches(&self) -> usize {
        self.nodes.len()
    }

    /// The graph inputs, in the order callers bind them.
    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    /// The output tensor.
    pub fn output(&self) -> TensorId {
        self.output
    }

    /// A tensor's description.
    pub fn tensor(&self, t: TensorId) -> &Tensor {
        &self.tensors[t]
    }

    /// Number of tensors (inputs, intermediates and the output).
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// The intermediates: tensors written by one node and read by a later one.
    pub fn intermediates(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.nodes
            .iter()
            .map(|n| n.output)
            .filter(|&t| t != self.output)
    }

    /// Nodes that read tensor `t`.
    pub fn consumers(&self, t: TensorId) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].reads().any(|r| r == t))
            .collect()
    }

    /// Whether launch `j` writes a tensor that launch `i` reads.
    pub fn feeds(&self, j: usize, i: usize) -> bool {
        let written = self.nodes[j].output;
        self.nodes[i].reads().any(|t| t == written)
    }

    /// The kernels, one per launch, e.g. `["map(silu(in0))", "map(mul(in0, in1))"]`.
    pub fn kernel_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.kernel.name()).collect()
    }
}

/// Builds a [`Graph`], checking each node's input shapes as it is added.
///
/// ```
/// use taskgrain::graph::{Binary, Expr, GraphBuilder, Kernel, TensorShape, Unary};
///
/// let mut g = GraphBuilder::new();
/// let x = g.input("x", TensorShape::new(4, 8));
/// let t = g.node(Kernel::Map(Expr::unary(Unary::Gelu)), &[x])?;
/// let bad = g.input("r", TensorShape::new(4, 9));
/// let err = g.node(Kernel::Map(Expr::binary(Binary::Add)), &[t, bad]).unwrap_err();
/// assert!(err.to_string().contains("[4, 8] vs [4, 9]"));
/// # Ok::<(), taskgrain::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct GraphBuilder {
    tensors: Vec<Tensor>,
    inputs: Vec<TensorId>,
    nodes: Vec<Node>,
}

impl GraphBuilder {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a graph input.
    pub fn input(&mut self, name: &str, shape: TensorShape) -> TensorId {
        self.tensors.push(Tensor {
            name: name.into(),
            shape,
        });
        self.inputs.push(self.tensors.len() - 1);
        self.tensors.len() - 1
    }

    /// Adds a launch of `kernel` on `inputs`; returns its output tensor.
    /// Errors name the node and the shapes that do not chain.
    pub fn node(&mut self, kernel: Kernel, inputs: &[TensorId]) -> Result<TensorId> {
        let index = self.nodes.len();
        let label = format!("node {index} ({})", kernel.name());
        if let Some(&t) = inputs.iter().find(|&&t| t >= self.tensors.len()) {
            return Err(Error::ShapeMismatch(format!(
                "{label}: input tensor {t} does not exist"
            )));
        }
        if inputs.len() > MAX_INPUTS {
            return Err(Error::ShapeMismatch(format!(
                "{label}: at most {MAX_INPUTS} inputs, got {}",
                inputs.len()
            )));
        }
        let shapes: Vec<TensorShape> = inputs.iter().map(|&t| self.tensors[t].shape).collect();
        let shape = kernel.output_shape(&shapes).map_err(|why| {
            let list = inputs
                .iter()
                .map(|&t| format!("{} {}", self.tensors[t].name, self.tensors[t].shape))
                .collect::<Vec<_>>()
                .join(", ");
            Error::ShapeMismatch(format!("{label}: {why} (inputs: {list})"))
        })?;
        if shape.is_empty() {
            return Err(Error::BadDimension(format!(
                "{label}: empty output {shape}"
            )));
        }
        self.tensors.push(Tensor {
            name: format!("t{index}"),
            shape,
        });
        let output = self.tensors.len() - 1;
        self.nodes.push(Node {
            kernel,
            inputs: inputs.to_vec(),
            output,
            epilogue: None,
        });
        Ok(output)
    }

    /// Finishes the graph with `output` as its result (the last node's output).
    pub fn finish(self, output: TensorId) -> Result<Graph> {
        match self.nodes.last() {
            Some(n) if n.output == output => Ok(Graph {
                tensors: self.tensors,
                inputs: self.inputs,
                nodes: self.nodes,
                output,
                operator: None,
            }),
            _ => Err(Error::BadArgument(
                "a graph's output must be its last node's output".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitute_inlines_the_producer() {
        // mul(in0, in1) with in0 := silu(in0') gives mul(silu(in1), in0).
        let e = Expr::binary(Binary::Mul)
            .substitute(0, &Expr::unary(Unary::Silu))
            .unwrap();
        assert_eq!(e.arity(), 2);
        assert_eq!(e.to_string(), "mul(silu(in1), in0)");
        // add(in0, in1) with in1 := gelu(.) gives add(in0, gelu(in1)).
        let e = Expr::binary(Binary::Add)
            .substitute(1, &Expr::unary(Unary::Gelu))
            .unwrap();
        assert_eq!(e.to_string(), "add(in0, gelu(in1))");
    }

    #[test]
    fn dedup_merges_repeated_tensors() {
        let (e, t) = Expr::binary(Binary::Mul).dedup_inputs(&[5, 5]);
        assert_eq!((e.arity(), t), (1, vec![5]));
        assert_eq!(e.to_string(), "mul(in0, in0)");
    }

    #[test]
    fn expressions_are_validated() {
        assert!(Expr::new(vec![Step::Unary(Unary::Exp, 0)], 1).is_err());
        assert!(Expr::new(vec![Step::Input(2)], 2).is_err());
        assert!(Expr::new(vec![Step::Input(0); MAX_STEPS + 1], 1).is_err());
    }

    #[test]
    fn shapes_must_chain() {
        let a = AttnShape {
            batch: 1,
            q_heads: 4,
            kv_heads: 2,
            q_len: 3,
            kv_len: 5,
            dk: 8,
            dv: 8,
        };
        let mut g = GraphBuilder::new();
        let q = g.input("q", q_shape(&a));
        let k = g.input("k", TensorShape::new(10, 7));
        let err = g.node(Kernel::Scores(a), &[q, k]).unwrap_err().to_string();
        assert!(err.contains("node 0 (scores)"), "{err}");
        assert!(err.contains("k is [10, 7], expected [10, 8]"), "{err}");
        assert!(GraphBuilder::new().finish(0).is_err());
    }
}
