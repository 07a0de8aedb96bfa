//! The seven operators: their kernels (generic over the packet backend), their
//! launch preparation and their f64 references.
//!
//! A launch is prepared once ([`prepare`]) from borrowed inputs, a backend, a
//! [`LaunchConfig`] and a [`PacketMode`]; the result knows its [`Tiling`] and runs
//! any one work-group ([`Prepared::run_group`]). Who runs which group — the caller
//! or the pool's workers — is decided above this module.

pub mod attention;
pub mod check;
pub mod elementwise;
pub mod inputs;
pub mod layernorm;
mod realign;
pub mod rmsnorm;
pub mod rows;
pub mod shape;
pub mod softmax;

pub use check::{CheckReport, Tolerance, compare, output_hash};
pub use inputs::{OpInputs, OwnedInputs, Rng, input_lens, input_names, output_len, traffic_bytes};
pub use shape::{AttnShape, Op, Shape};

use crate::error::{Error, Result};
use crate::packet::Backend;
use crate::simt::{PacketMode, RowSchedule, Tiling};
use std::ops::Range;

/// The launch geometry chosen for one call: `local` work-items and `block` rows per group.
///
/// For attention `block` is the number of query rows a group owns and `local` is
/// fixed by the head dimensions ([`attention::local_for`]); a different `local` is rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct LaunchConfig {
    /// Work-items per group.
    pub local: usize,
    /// Rows (query rows for attention) per group.
    pub block: usize,
}

enum Kernel<'a> {
    RmsNorm(rmsnorm::RmsNorm<'a>),
    LayerNorm(layernorm::LayerNorm<'a>),
    MaskedSoftmax(softmax::MaskedSoftmax<'a>),
    SwiGlu(elementwise::SwiGlu<'a>),
    GeluResidual(elementwise::GeluResidual<'a>),
    Rope(elementwise::Rope<'a>),
    Attention(attention::Attention<'a>),
}

/// A launch ready to run: the kernel, its inputs, its geometry and its tiling.
pub struct Prepared<'a> {
    kernel: Kernel<'a>,
    backend: Backend,
    tiling: Tiling,
    sched: RowSchedule,
    config: LaunchConfig,
    mode: PacketMode,
}

/// The columns a row operator's SIMT schedule covers: C, except rope, whose
/// work-items stride over the C/2 rotation pairs.
pub fn schedule_cols(op: Op, cols: usize) -> usize {
    if op == Op::Rope { cols / 2 } else { cols }
}

/// Outputs of at least this many bytes are written with non-temporal stores:
/// with the inputs they no longer fit in the last-level cache, so nobody will read
/// them from there, and streaming saves the read-for-ownership of every line.
pub const STREAM_MIN_BYTES: usize = 8 << 20;

/// Whether `op`'s output of `rows` × `cols` f32s is written with non-temporal
/// stores.
///
/// rmsnorm and layernorm stream: their writing pass reads its row from L1, and
/// streaming measured 0.55–0.64× the cached time at 1024x4096, W8, one worker
/// (`examples/stream_ab`). rope streams both output halves from its row loops
/// (`elementwise::Rotate`): 0.76–0.96× the cached time at
/// 4096x1024 and 1024x4096, W4 to W16 (AMD Zen 4; streamed through the
/// schedule's generic walk it had lost 1.2–12× on an earlier build). swiglu
/// lost 1.08–1.46×; masked_softmax lost 1.23–1.49× streaming the rescale of
/// the row it had just written, and 1.02–1.23× staging the row's exponentials
/// in L1 and streaming the rescaled row from there: its exp pass, not its
/// stores, sets its pace.
///
/// gelu_residual stays cached. Asked to stream ([`Prepared::with_stream`]), it
/// streams through an L1 stage (`elementwise::staged_row`). On AMD Zen 4 an
/// earlier build measured 0.78–0.96× the cached time on rows of 3072 columns
/// and more; on an Intel Xeon (family 6, model 207) streaming lost, and by
/// more than it had gained on Zen. Streamed / cached p50, one worker, outputs
/// 0, 256, 1024 and 4000 bytes after x (`examples/stream_ab`, Intel Xeon,
/// 2026-12-05):
///
/// | shape | W8 | W16 |
/// |---|---|---|
/// | 1024x3072 | 1.22–1.24 | 1.04–1.10 |
/// | 1024x4096 | 1.21–1.24 | 1.04–1.06 |
/// | 512x8192 | 1.18–1.24 | 1.02–1.05 |
/// | 4096x4096 | 0.93–0.97 | 0.90–0.97 |
///
/// 1024x4096 at W8 took 2.57–2.68 ms streamed where the placement rule let it
/// stream, and 2.16–2.31 ms cached at every placement (`examples/placement`).
///
/// The output's placement matters too, see [`walks_down`], [`stream_is_safe`]
/// and [`rope_stream_is_safe`].
/// Whoever runs a streaming row kernel fences at the end of each group
/// ([`rows::run_group`] does).
pub fn streams_output(op: Op, rows: usize, cols: usize) -> bool {
    matches!(op, Op::RmsNorm | Op::LayerNorm | Op::Rope)
        && rows.saturating_mul(cols).saturating_mul(4) >= STREAM_MIN_BYTES
}

/// Output distances (bytes after the input, mod 4 KiB) at which streamed stores
/// stall the kernel's later loads of the input: a load whose low 12 address bits
/// match a pending store's waits for it ("4K aliasing"), and a streamed store
/// stays pending far longer than a cached one. Measured at 1024x4096: rmsnorm
/// streamed was 1.17× / 1.34× slower than cached at +32 / +64 bytes and 0.74–0.78×
/// at 0, +256, +1024 and +4000 (`examples/stream_ab`). rmsnorm and layernorm
/// now walk such rows downwards instead ([`walks_down`]), and rope has its own
/// rule ([`rope_stream_is_safe`]); gelu_residual asked to stream, whose staged
/// blocks' first loads follow the previous block's stores, keeps these outputs
/// cached.
const STREAM_ALIAS_BYTES: Range<usize> = 16..192;

/// `out`'s distance in bytes after `x`, modulo 4 KiB.
fn distance_after(x: &[f32], out: &[f32]) -> usize {
    (out.as_ptr() as usize).wrapping_sub(x.as_ptr() as usize) % 4096
}

/// Whether streaming `out` is safe next to the input row `x` it is computed from:
/// false when `out` lies a few cache lines after `x` modulo 4 KiB.
pub fn stream_is_safe(x: &[f32], out: &[f32]) -> bool {
    !STREAM_ALIAS_BYTES.contains(&distance_after(x, out))
}

/// Whether rope, walking rows of `cols` floats upwards in packets of `width`
/// lanes, may stream `out` next to its input row `x`. Each half of a row loads
/// the bytes its own streamed stores wrote `d` bytes earlier (`d` = `out`'s
/// distance after `x`); when a half is a multiple of 4 KiB, each half's loads
/// also alias the other half's stores, and at small `d` streaming stalls.
/// Fastest call, cached → streamed, one worker (`examples/placement`, AMD Zen 4):
///
/// | shape, width | +16 | +64 | +96 | +128 | +192 |
/// |---|---|---|---|---|---|
/// | 1024x4096 W4 (halves alias) | 2.06 → 20.3 ms | 1.86 → 3.83 | 1.94 → 2.90 | 1.91 → 2.61 | 1.86 → 2.34 |
/// | 1024x4096 W8 (halves alias) | 1.56 → 2.97 | 1.55 → 1.99 | 1.55 → 1.65 | 1.53 → 1.28 | 1.47 → 1.15 |
/// | 2048x2048 W16 (halves alias) | 1.46 → 1.28 | 1.62 → 1.62 | 1.70 → 2.14 | 1.43 → 1.15 | 1.40 → 1.07 |
/// | 4096x1024 W8 | 2.23 → 1.83 | 2.07 → 1.39 | 2.12 → 1.47 | 2.06 → 1.42 | 2.05 → 1.52 |
/// | 1024x3072 W8 | 1.00 → 1.04 | 0.98 → 0.74 | 0.94 → 0.64 | 0.99 → 0.69 | 0.98 → 0.67 |
///
/// So rope stays cached only where its halves alias and `out` lies less than
/// 128 bytes (W4: 256 bytes) after `x`; everywhere else streaming was faster.
pub fn rope_stream_is_safe(x: &[f32], out: &[f32], cols: usize, width: usize) -> bool {
    let halves_alias = (cols / 2 * 4).is_multiple_of(4096);
    let stalls = 16..if width <= 4 { 256 } else { 128 };
    !(halves_alias && stalls.contains(&distance_after(x, out)))
}

/// Whether a streamed element-wise pass writing `out` from the input row `x`
/// walks each row last packet first: when `out` starts `distances` bytes after
/// `x` modulo 4 KiB. Below 2 KiB, the stores a descending walk's loads alias
/// were issued at least 2 KiB before them (see `RowSchedule::with_descending`).
/// At 0 bytes rmsnorm descends, but layernorm ascends: its first loads of a
/// row (its shift) would wait for the previous row's last stores. Fastest
/// streamed call at 4096x1024 and 1024x4096, W8 and W16, one worker,
/// ascending → descending (`examples/placement`):
///
/// | output after x | rmsnorm | layernorm |
/// |---|---|---|
/// | 0 | 0.86–0.94 → 0.67–0.83 ms | 0.77–0.99 → 0.98–1.22 ms (ascends) |
/// | +64, +128 bytes | 1.03–1.33 → 0.65–0.76 ms | 1.26–1.79 → 0.79–1.14 ms |
/// | +256 … +2048 | 0.65–0.79 → 0.65–0.78 ms | 0.85–1.17 → 0.78–1.35 ms |
///
/// Above 2 KiB (output just before x) both ascend. `malloc` places
/// consecutive large buffers a few cache lines apart, so +64 to +256 is the
/// common case.
pub fn walks_down(x: &[f32], out: &[f32], distances: Range<usize>) -> bool {
    distances.contains(&distance_after(x, out))
}

/// Prepares one launch of `inputs`' operator.
///
/// Errors: `local` or `block` of 0, or (attention) a `local` other than the one its
/// head dimensions fix.
pub fn prepare<'a>(
    inputs: OpInputs<'a>,
    shape: &Shape,
    backend: Backend,
    config: LaunchConfig,
    mode: PacketMode,
) -> Result<Prepared<'a>> {
    shape.validate(inputs.op())?;
    prepare_checked(inputs, shape, backend, config, mode)
}

/// [`prepare`] for inputs known to fit a valid `shape` (checked by
/// [`OpInputs::new`], or by the graph executor for a whole call): the per-call
/// path of a graph launch.
#[inline]
pub(crate) fn prepare_checked<'a>(
    inputs: OpInputs<'a>,
    shape: &Shape,
    backend: Backend,
    config: LaunchConfig,
    mode: PacketMode,
) -> Result<Prepared<'a>> {
    let op = inputs.op();
    if config.local == 0 {
        return Err(Error::BadGeometry("local must be at least 1".into()));
    }
    if config.block == 0 {
        return Err(Error::BadGeometry("block must be at least 1".into()));
    }
    let w = backend.width();
    let (tiling, sched) = match *shape {
        Shape::Rows { rows, cols } => (
            Tiling::rows(rows, cols, config.block)?,
            RowSchedule::new(schedule_cols(op, cols), config.local, w, mode)
                .with_stream(streams_output(op, rows, cols)),
        ),
        Shape::Attention(a) => {
            let local = attention::local_for(&a, w);
            if config.local != local {
                return Err(Error::BadGeometry(format!(
                    "attention's local is fixed by its head dimensions: {local} at W{w}, got {}",
                    config.local
                )));
            }
            (
                Tiling::segmented(a.batch * a.q_heads, a.q_len, a.dv, config.block)?,
                RowSchedule::new(a.dv, local, w, mode),
            )
        }
    };
    let kernel = match inputs {
        OpInputs::RmsNorm { x, w } => Kernel::RmsNorm(rmsnorm::RmsNorm { x, w }),
        OpInputs::LayerNorm { x, w, b } => Kernel::LayerNorm(layernorm::LayerNorm { x, w, b }),
        OpInputs::MaskedSoftmax { x, mask } => {
            Kernel::MaskedSoftmax(softmax::MaskedSoftmax { x, mask })
        }
        OpInputs::SwiGlu { g, u } => Kernel::SwiGlu(elementwise::SwiGlu { g, u }),
        OpInputs::GeluResidual { x, r } => Kernel::GeluResidual(elementwise::GeluResidual { x, r }),
        OpInputs::Rope { x, cos, sin } => Kernel::Rope(elementwise::Rope { x, cos, sin }),
        OpInputs::Attention { q, k, v } => {
            let Shape::Attention(a) = *shape else {
                unreachable!("validated above: attention has an attention shape")
            };
            Kernel::Attention(attention::Attention {
                q,
                k,
                v,
                shape: a,
                mode,
            })
        }
    };
    Ok(Prepared {
        kernel,
        backend,
        tiling,
        sched,
        config,
        mode,
    })
}

impl Prepared<'_> {
    /// How the output is cut into work-groups.
    pub fn tiling(&self) -> &Tiling {
        &self.tiling
    }

    /// The backend that runs the kernel.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The geometry.
    pub fn config(&self) -> LaunchConfig {
        self.config
    }

    /// Full-packet specialization on or off.
    pub fn mode(&self) -> PacketMode {
        self.mode
    }

    /// Whether the final results are written with non-temporal stores.
    pub fn streams(&self) -> bool {
        self.sched.streams()
    }

    /// Overrides the streaming choice [`prepare`] made from the output size
    /// (row operators; attention never streams), e.g. to measure what it gains.
    pub fn with_stream(mut self, stream: bool) -> Self {
        if !matches!(self.kernel, Kernel::Attention(_)) {
            self.sched = self.sched.with_stream(stream);
        }
        self
    }

    /// An identifier of the compiled kernel variant this launch runs, e.g.
    /// `rmsnorm/avx2-w8/full-packet` (with `/stream` when the output is written
    /// with non-temporal stores). Launches with equal identifiers run the same code.
    pub fn variant(&self) -> String {
        let op = match self.kernel {
            Kernel::RmsNorm(_) => Op::RmsNorm,
            Kernel::LayerNorm(_) => Op::LayerNorm,
            Kernel::MaskedSoftmax(_) => Op::MaskedSoftmax,
            Kernel::SwiGlu(_) => Op::SwiGlu,
            Kernel::GeluResidual(_) => Op::GeluResidual,
            Kernel::Rope(_) => Op::Rope,
            Kernel::Attention(_) => Op::Attention,
        };
        let mode = if self.mode.full_packet() {
            "full-packet"
        } else {
            "all-masked"
        };
        let stores = if self.sched.streams() { "/stream" } else { "" };
        format!("{op}/{}/{mode}{stores}", self.backend.name())
    }

    /// Runs work-group `group`, writing `out`, which must be exactly that group's
    /// span of the output (`tiling().span(group)`).
    #[inline]
    pub fn run_group(&self, group: usize, out: &mut [f32]) {
        let t = &self.tiling;
        let rows = t.global_rows(group);
        let (b, s, len) = (self.backend, self.sched, t.row_len());
        let first = rows.start * len;
        // Their streamed output passes walk each row in the direction no
        // pending store stalls: they stream at every placement.
        let directed =
            |x: &[f32], distances| s.with_descending(walks_down(&x[first..], out, distances));
        match &self.kernel {
            Kernel::RmsNorm(k) => rows::run_group(k, b, directed(k.x, 0..2048), rows, out, len),
            Kernel::LayerNorm(k) => rows::run_group(k, b, directed(k.x, 1..2048), rows, out, len),
            Kernel::MaskedSoftmax(k) => rows::run_group(k, b, s, rows, out, len),
            Kernel::SwiGlu(k) => rows::run_group(k, b, s, rows, out, len),
            Kernel::GeluResidual(k) => {
                let stream = s.streams() && stream_is_safe(&k.x[first..], out);
                rows::run_group(k, b, s.with_stream(stream), rows, out, len)
            }
            Kernel::Rope(k) => {
                let stream = s.streams() && rope_stream_is_safe(&k.x[first..], out, len, b.width());
                rows::run_group(k, b, s.with_stream(stream), rows, out, len)
            }
            Kernel::Attention(k) => {
                let (segment, q_rows) = t.group_rows(group);
                k.run_group(b, segment, q_rows, out)
            }
        }
    }

    /// Runs the whole launch on the calling thread, group after group.
    pub fn run_on_caller(&self, out: &mut [f32]) -> Result<()> {
        if out.len() != self.tiling.len() {
            return Err(Error::ShapeMismatch(format!(
                "output has {} elements, expected {}",
                out.len(),
                self.tiling.len()
            )));
        }
        crate::simt::run_groups(&self.tiling, 0..self.tiling.groups(), out, &|g, o| {
            self.run_group(g, o)
        });
        Ok(())
    }
}

/// The f64 reference result of `inputs`.
pub fn reference(inputs: OpInputs<'_>, shape: &Shape) -> Vec<f64> {
    let (rows, cols) = match *shape {
        Shape::Rows { rows, cols } => (rows, cols),
        Shape::Attention(_) => (0, 0),
    };
    match inputs {
        OpInputs::RmsNorm { x, w } => rmsnorm::reference(x, w, rows, cols),
        OpInputs::LayerNorm { x, w, b } => layernorm::reference(x, w, b, rows, cols),
        OpInputs::MaskedSoftmax { x, mask } => softmax::reference(x, mask, rows, cols),
        OpInputs::SwiGlu { g, u } => elementwise::swiglu_reference(g, u),
        OpInputs::GeluResidual { x, r } => elementwise::gelu_residual_reference(x, r),
        OpInputs::Rope { x, cos, sin } => elementwise::rope_reference(x, cos, sin, rows, cols),
        OpInputs::Attention { q, k, v } => match *shape {
            Shape::Attention(a) => attention::reference(q, k, v, &a),
            Shape::Rows { .. } => unreachable!("attention inputs come with an attention shape"),
        },
    }
}

/// The tolerance each operator is checked with (DESIGN.md's default for all seven).
pub fn tolerance(_op: Op) -> Tolerance {
    Tolerance::DEFAULT
}
