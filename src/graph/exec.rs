//! Running a graph: each node bound to its tensors and a geometry becomes a
//! [`NodeLaunch`] (one pool launch); intermediates live in an [`Arena`] that is
//! reused from call to call, so a call allocates nothing once the arena has
//! grown to the graph's size. The loop over nodes is
//! [`Runtime::run_graph`](crate::runtime::Runtime::run_graph).

use super::ir::{Expr, Graph, Kernel, MAX_INPUTS, Node, TensorId, TensorShape};
use super::kernels::{self, Logits, Sources};
use crate::buffer::{self, AlignedBuf};
use crate::error::{Error, Result};
use crate::ops::softmax::softmax_row;
use crate::ops::{self, AttnShape, LaunchConfig, Op, OpInputs, Prepared, Shape};
use crate::packet::{Backend, Packet, WithPacket, dispatch};
use crate::plan::LaunchProfile;
use crate::pool::Grain;
use crate::simt::{PacketMode, RowSchedule, Tiling};
use std::sync::Mutex;

/// Buffers for a graph's intermediates, indexed by tensor id, and the list of
/// a call's launch plans (both reused from call to call).
#[derive(Debug, Default)]
pub struct Arena {
    bufs: Vec<AlignedBuf>,
    plans: Vec<(LaunchConfig, Grain)>,
}

impl Arena {
    /// Sizes the buffers for `graph`'s intermediates (allocates only to grow).
    pub fn fit(&mut self, graph: &Graph) {
        if self.bufs.len() < graph.tensor_count() {
            self.bufs
                .resize_with(graph.tensor_count(), || buffer::zeros(0));
        }
        for t in graph.intermediates() {
            let len = graph.tensor(t).shape.len();
            if self.bufs[t].len() != len {
                self.bufs[t].resize(len, 0.0);
            }
        }
    }

    /// Takes intermediate `t`'s buffer out (to be written), leaving it empty.
    pub fn take(&mut self, t: TensorId) -> AlignedBuf {
        std::mem::replace(&mut self.bufs[t], buffer::zeros(0))
    }

    /// Puts back a buffer taken with [`Arena::take`].
    pub fn put(&mut self, t: TensorId, buf: AlignedBuf) {
        self.bufs[t] = buf;
    }

    /// Takes the (empty) list for a call's launch plans out, with the capacity
    /// earlier calls gave it.
    pub fn take_plans(&mut self) -> Vec<(LaunchConfig, Grain)> {
        let mut plans = std::mem::take(&mut self.plans);
        plans.clear();
        plans
    }

    /// Puts back the list taken with [`Arena::take_plans`].
    pub fn put_plans(&mut self, plans: Vec<(LaunchConfig, Grain)>) {
        self.plans = plans;
    }

    /// Tensor `t`: a graph input (from `inputs`, in graph-input order) or an
    /// intermediate from this arena.
    pub fn tensor<'a>(&'a self, graph: &Graph, inputs: &[&'a [f32]], t: TensorId) -> &'a [f32] {
        match graph.inputs().iter().position(|&i| i == t) {
            Some(j) => inputs[j],
            None => &self.bufs[t],
        }
    }
}

/// Arenas for concurrent calls: a call takes one (or a new, empty one) and gives
/// it back, so concurrent callers never share intermediates.
#[derive(Debug, Default)]
pub struct Executor {
    arenas: Mutex<Vec<Arena>>,
}

impl Executor {
    /// An arena for one call.
    pub fn take(&self) -> Arena {
        self.arenas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// Returns an arena for later calls.
    pub fn give(&self, arena: Arena) {
        self.arenas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(arena);
    }
}

/// What the planner knows about node `i`'s launch. A graph that is one launch
/// of a whole operator ([`Graph::operator`]) is planned as that operator, so it
/// shares the operator's calibration, refinement and tuning.
pub fn node_profile(graph: &Graph, i: usize) -> Result<LaunchProfile> {
    let node = &graph.nodes()[i];
    if let (1, Some((op, shape)), None) = (graph.launches(), graph.operator(), &node.epilogue) {
        return LaunchProfile::for_op(op, &shape);
    }
    let out = graph.tensor(node.output).shape;
    let rows = |op: Op| LaunchProfile::for_op(op, &Shape::rows(out.rows, out.cols));
    let elementwise = |e: Option<&Expr>, flops: f64, passes: u32| {
        let inputs = node.inputs.len() as f64;
        let f = flops + e.map_or(0.0, Expr::flops);
        LaunchProfile::rows(
            out.rows,
            out.cols,
            out.cols,
            4.0 * (inputs + 1.0),
            f,
            passes,
        )
    };
    let mut p = match &node.kernel {
        Kernel::RmsNorm => rows(Op::RmsNorm)?,
        Kernel::LayerNorm => rows(Op::LayerNorm)?,
        Kernel::Rope => rows(Op::Rope)?,
        Kernel::Attention(a) => LaunchProfile::for_op(Op::Attention, &Shape::Attention(*a))?,
        Kernel::Map(e) => elementwise(Some(e), 0.0, 0),
        Kernel::Softmax { prologue } => elementwise(prologue.as_ref(), 12.0, 2),
        Kernel::Scores(a) | Kernel::ProbsV(a) => {
            let [q, k, v, o] = a.lens().map(|n| n as f64);
            let s = (a.batch * a.q_heads * a.q_len * a.kv_len) as f64;
            let (bytes, flops) = match node.kernel {
                Kernel::Scores(_) => (q + k + s, 2.0 * s * a.dk as f64),
                _ => (s + v + o, 2.0 * s * a.dv as f64),
            };
            LaunchProfile::attention(*a, 4.0 * bytes / o, flops / o)
        }
    };
    if let Some(ep) = &node.epilogue {
        // The epilogue reads its extra tensors once per output element.
        let per_elem = out.len() as f64 / p.elements() as f64;
        p.bytes_per_elem += 4.0 * ep.extra.len() as f64 * per_elem;
        p.flops_per_elem += ep.expr.flops() * per_elem;
        p.op = None;
    }
    Ok(p)
}

enum Body<'a> {
    /// One of the operators' own kernels.
    Op(Prepared<'a>),
    /// An expression through the interpreter.
    Map(&'a Expr, Sources<'a>),
    /// A one-function map, compiled ([`kernels::CompiledMap`]); its inputs.
    Compiled(kernels::CompiledMap, [&'a [f32]; 2]),
    Softmax(Option<&'a Expr>, Sources<'a>),
    Scores(AttnShape, &'a [f32], &'a [f32]),
    ProbsV(AttnShape, &'a [f32], &'a [f32]),
}

/// One node bound to its tensors and a geometry: what one pool launch runs.
pub struct NodeLaunch<'a> {
    index: usize,
    node: &'a Node,
    body: Body<'a>,
    backend: Backend,
    mode: PacketMode,
    tiling: Tiling,
    sched: RowSchedule,
    epilogue: Option<(&'a Expr, Sources<'a>, RowSchedule)>,
}

fn sources<'a>(list: impl IntoIterator<Item = &'a [f32]>, in0_is_out: bool) -> Sources<'a> {
    let mut tensors: [&[f32]; MAX_INPUTS] = [&[]; MAX_INPUTS];
    let skip = usize::from(in0_is_out);
    for (slot, t) in tensors.iter_mut().skip(skip).zip(list) {
        *slot = t;
    }
    Sources {
        tensors,
        in0_is_out,
    }
}

/// Checks that `tensor` resolves each of `ids` to a slice of its shape's length.
#[inline]
fn check_lengths<'a>(
    graph: &Graph,
    tensor: &dyn Fn(TensorId) -> &'a [f32],
    ids: impl Iterator<Item = TensorId>,
) -> Result<()> {
    for t in ids {
        let got = tensor(t).len();
        if got != graph.tensor(t).shape.len() {
            return Err(length_mismatch(graph, t, got));
        }
    }
    Ok(())
}

#[cold]
fn length_mismatch(graph: &Graph, t: TensorId, got: usize) -> Error {
    let want = graph.tensor(t);
    Error::ShapeMismatch(format!(
        "tensor {} {} needs {} elements, got {got}",
        want.name,
        want.shape,
        want.shape.len()
    ))
}

impl<'a> NodeLaunch<'a> {
    /// Binds node `index` of `graph` to `tensor` (which resolves every tensor id
    /// the node reads) with geometry `config`.
    ///
    /// When the graph is one launch computing a whole operator (what
    /// fusion makes of every operator), that launch runs the operator's own
    /// compiled kernel: the same arithmetic as the fused expression, specialized
    /// at compile time instead of interpreted.
    ///
    /// Errors: `local` or `block` of 0; for attention-shaped kernels a `local`
    /// other than the one the head dimensions fix.
    pub fn prepare(
        graph: &'a Graph,
        index: usize,
        tensor: &dyn Fn(TensorId) -> &'a [f32],
        backend: Backend,
        config: LaunchConfig,
        mode: PacketMode,
    ) -> Result<NodeLaunch<'a>> {
        if config.local == 0 || config.block == 0 {
            return Err(Error::BadGeometry(
                "local and block must be at least 1".into(),
            ));
        }
        let node: &'a Node = &graph.nodes()[index];
        let compiled = graph.compiled_operator();
        // A compiled operator reads the graph's inputs, a graph kernel its node's.
        if compiled.is_some() {
            check_lengths(graph, tensor, graph.inputs().iter().copied())?;
        } else {
            check_lengths(graph, tensor, node.reads())?;
        }
        let w = backend.width();
        let out: TensorShape = graph.tensor(node.output).shape;
        // Streaming is the operator kernels' choice (`ops::streams_output`), and
        // never with an epilogue, which rewrites the row just written. The graph's
        // own kernels never stream: maps and softmax measured no gain from it
        // (`examples/stream_ab`).
        let stream = node.epilogue.is_none();
        let input = |k: usize| tensor(node.inputs[k]);
        let row_sched = |cols: usize| RowSchedule::new(cols, config.local, w, mode);
        // Every tensor a kernel reads is checked against its shape's length
        // (`check_lengths`), and an operator's graph (`graph::op_graph`, the only
        // graphs with an operator) validated its shape when it was built: their
        // operator kernels need no second validation per call. A builder's graph
        // checks only that its tensors chain, so its operator kernels still
        // validate their shapes (Hq % Hkv, size limits) here.
        let validated = graph.operator().is_some();
        let op = |op: Op, shape: Shape, list: &[&'a [f32]]| -> Result<Prepared<'a>> {
            if !validated {
                shape.validate(op)?;
            }
            let inputs = OpInputs::bind(op, list);
            let launch = ops::prepare_checked(inputs, &shape, backend, config, mode)?;
            let streams = launch.streams() && stream;
            Ok(launch.with_stream(streams))
        };
        let rows_shape = Shape::rows(out.rows, out.cols);
        let attn_local = |a: &AttnShape| {
            let local = ops::attention::local_for(a, w);
            if config.local == local {
                Ok(())
            } else {
                Err(Error::BadGeometry(format!(
                    "attention's local is fixed by its head dimensions: {local} at W{w}, got {}",
                    config.local
                )))
            }
        };
        let (body, tiling, sched) = match &node.kernel {
            _ if compiled.is_some() => {
                let (whole_op, shape) = compiled.expect("checked");
                let mut list: [&'a [f32]; 3] = [&[]; 3];
                for (slot, &t) in list.iter_mut().zip(graph.inputs()) {
                    *slot = tensor(t);
                }
                let n = graph.inputs().len().min(3);
                (Body::Op(op(whole_op, shape, &list[..n])?), None, None)
            }
            Kernel::RmsNorm => (
                Body::Op(op(Op::RmsNorm, rows_shape, &[input(0), input(1)])?),
                None,
                None,
            ),
            Kernel::LayerNorm => (
                Body::Op(op(
                    Op::LayerNorm,
                    rows_shape,
                    &[input(0), input(1), input(2)],
                )?),
                None,
                None,
            ),
            Kernel::Rope => (
                Body::Op(op(Op::Rope, rows_shape, &[input(0), input(1), input(2)])?),
                None,
                None,
            ),
            Kernel::Attention(a) => (
                Body::Op(op(
                    Op::Attention,
                    Shape::Attention(*a),
                    &[input(0), input(1), input(2)],
                )?),
                None,
                None,
            ),
            Kernel::Map(e) => (
                match kernels::CompiledMap::of(e) {
                    Some(map) => Body::Compiled(
                        map,
                        [input(0), node.inputs.get(1).map_or(&[][..], |_| input(1))],
                    ),
                    None => Body::Map(e, sources((0..node.inputs.len()).map(input), false)),
                },
                Some(Tiling::rows(out.rows, out.cols, config.block)?),
                Some(row_sched(out.cols)),
            ),
            Kernel::Softmax { prologue } => (
                Body::Softmax(
                    prologue.as_ref(),
                    sources((0..node.inputs.len()).map(input), false),
                ),
                Some(Tiling::rows(out.rows, out.cols, config.block)?),
                // Like masked_softmax, the softmax never streams: its last pass
                // rescales the row it has just written.
                Some(row_sched(out.cols)),
            ),
            Kernel::Scores(a) | Kernel::ProbsV(a) => {
                attn_local(a)?;
                let segs = a.batch * a.q_heads;
                let body = match node.kernel {
                    Kernel::Scores(_) => Body::Scores(*a, input(0), input(1)),
                    _ => Body::ProbsV(*a, input(0), input(1)),
                };
                (
                    body,
                    Some(Tiling::segmented(segs, a.q_len, out.cols, config.block)?),
                    Some(row_sched(out.cols)),
                )
            }
        };
        let (tiling, sched) = match &body {
            Body::Op(p) => (*p.tiling(), row_sched(out.cols)),
            _ => (
                tiling.expect("set for graph kernels"),
                sched.expect("set for graph kernels"),
            ),
        };
        let epilogue = node.epilogue.as_ref().map(|ep| {
            let src = sources(ep.extra.iter().map(|&t| tensor(t)), true);
            let whole_row = out.cols.div_ceil(w) * w;
            let s = RowSchedule::new(out.cols, whole_row, w, mode);
            (&ep.expr, src, s)
        });
        Ok(NodeLaunch {
            index,
            node,
            body,
            backend,
            mode,
            tiling,
            sched,
            epilogue,
        })
    }

    /// How the output is cut into work-groups.
    pub fn tiling(&self) -> &Tiling {
        &self.tiling
    }

    /// The node's position in its graph.
    pub fn index(&self) -> usize {
        self.index
    }

    /// An identifier of the compiled code this launch runs, e.g.
    /// `map(mul(silu(in1), in0))/avx2-w8/full-packet`.
    pub fn variant(&self) -> String {
        if let (Body::Op(p), None) = (&self.body, &self.epilogue) {
            return p.variant();
        }
        let mode = if self.mode.full_packet() {
            "full-packet"
        } else {
            "all-masked"
        };
        let streams = matches!(&self.body, Body::Op(p) if p.streams());
        let stores = if streams { "/stream" } else { "" };
        let mut name = self.node.kernel.name();
        if let Some(ep) = &self.node.epilogue {
            name.push_str(&format!("+epilogue({})", ep.expr));
        }
        format!("{name}/{}/{mode}{stores}", self.backend.name())
    }

    /// Runs work-group `group`, writing `out` (exactly `tiling().span(group)`).
    #[inline]
    pub fn run_group(&self, group: usize, out: &mut [f32]) {
        // Each body is dispatched as a type of its own, so that each is
        // compiled as a function of its own per backend: in one function, all
        // of them took most of the release build (see `Packet::outline`).
        let b = self.backend;
        match &self.body {
            Body::Op(p) => p.run_group(group, out),
            Body::Map(expr, src) => dispatch(b, self.group(group, out, MapRows(expr, *src))),
            Body::Compiled(map, inputs) => {
                dispatch(b, self.group(group, out, CompiledRows(*map, *inputs)))
            }
            Body::Softmax(expr, src) => {
                dispatch(b, self.group(group, out, SoftmaxRows(*expr, *src)))
            }
            Body::Scores(a, q, k) => dispatch(b, self.group(group, out, Scores(a, q, k))),
            Body::ProbsV(a, probs, v) => dispatch(b, self.group(group, out, ProbsV(a, probs, v))),
        }
        if let Some((expr, src, sched)) = &self.epilogue {
            dispatch(
                self.backend,
                Epilogue {
                    expr,
                    src: *src,
                    sched,
                    rows: self.tiling.global_rows(group),
                    out,
                },
            );
        }
    }

    /// Work-group `group` of this launch, running `body` into `out`.
    fn group<'l, 'o, B>(
        &'l self,
        group: usize,
        out: &'o mut [f32],
        body: B,
    ) -> Group<'l, 'a, 'o, B> {
        Group {
            launch: self,
            group,
            out,
            body,
        }
    }
}

/// One work-group of a launch whose body is `B`, one of the types below.
struct Group<'l, 'a, 'o, B> {
    launch: &'l NodeLaunch<'a>,
    group: usize,
    out: &'o mut [f32],
    body: B,
}

impl<'l, B> Group<'l, '_, '_, B> {
    /// Row length, schedule and global rows of the group.
    #[inline(always)]
    fn rows(&self) -> (usize, &'l RowSchedule, std::ops::Range<usize>) {
        let l = self.launch;
        (
            l.tiling.row_len(),
            &l.sched,
            l.tiling.global_rows(self.group),
        )
    }
}

/// [`Body::Map`]: an expression through the interpreter.
struct MapRows<'e>(&'e Expr, Sources<'e>);

impl WithPacket for Group<'_, '_, '_, MapRows<'_>> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let (len, sched, rows) = self.rows();
        let MapRows(expr, src) = self.body;
        let mut regs = kernels::regs(p);
        for (y, r) in self.out.chunks_exact_mut(len).zip(rows) {
            kernels::map_row(p, sched, expr, src, r, y, &mut regs);
        }
    }
}

/// [`Body::Compiled`]: a compiled one-function map and its inputs.
struct CompiledRows<'e>(kernels::CompiledMap, [&'e [f32]; 2]);

impl WithPacket for Group<'_, '_, '_, CompiledRows<'_>> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let (len, sched, rows) = self.rows();
        let CompiledRows(map, inputs) = self.body;
        for (y, r) in self.out.chunks_exact_mut(len).zip(rows) {
            kernels::compiled_row(p, sched, map, inputs, r, y);
        }
    }
}

/// [`Body::Softmax`]: a row softmax of an expression's rows, or of a tensor's.
struct SoftmaxRows<'e>(Option<&'e Expr>, Sources<'e>);

impl WithPacket for Group<'_, '_, '_, SoftmaxRows<'_>> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let (len, sched, rows) = self.rows();
        match self.body {
            SoftmaxRows(Some(expr), src) => {
                let mut regs = kernels::regs(p);
                for (y, r) in self.out.chunks_exact_mut(len).zip(rows) {
                    kernels::map_row(p, sched, expr, src, r, y, &mut regs);
                    softmax_row(p, sched, Logits(None), y);
                }
            }
            SoftmaxRows(None, src) => {
                let x = src.tensors[0];
                for (y, r) in self.out.chunks_exact_mut(len).zip(rows) {
                    let logits = Logits(Some(&x[r * len..(r + 1) * len]));
                    softmax_row(p, sched, logits, y);
                }
            }
        }
    }
}

/// [`Body::Scores`]: attention's scaled, masked scores.
struct Scores<'e>(&'e AttnShape, &'e [f32], &'e [f32]);

impl WithPacket for Group<'_, '_, '_, Scores<'_>> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let Scores(a, q, k) = self.body;
        let (segment, q_rows) = self.launch.tiling.group_rows(self.group);
        kernels::scores_group(p, a, self.launch.mode, (q, k), segment, q_rows, self.out);
    }
}

/// [`Body::ProbsV`]: attention's probabilities times V.
struct ProbsV<'e>(&'e AttnShape, &'e [f32], &'e [f32]);

impl WithPacket for Group<'_, '_, '_, ProbsV<'_>> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let ProbsV(a, probs, v) = self.body;
        let (segment, q_rows) = self.launch.tiling.group_rows(self.group);
        kernels::probs_v_group(
            p,
            a,
            self.launch.mode,
            (probs, v),
            segment,
            q_rows,
            self.out,
        );
    }
}

struct Epilogue<'e, 'o> {
    expr: &'e Expr,
    src: Sources<'e>,
    sched: &'e RowSchedule,
    rows: std::ops::Range<usize>,
    out: &'o mut [f32],
}

impl WithPacket for Epilogue<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<P: Packet>(self, p: P) {
        let len = self.sched.cols();
        let mut regs = kernels::regs(p);
        for (y, r) in self.out.chunks_exact_mut(len).zip(self.rows) {
            kernels::map_row(p, self.sched, self.expr, self.src, r, y, &mut regs);
        }
    }
}
