//! candle: candle-nn's CPU ops where they exist (rms_norm, layer_norm,
//! softmax_last_dim, rotary_emb::rope), candle-core tensor ops otherwise. Its
//! kernels run on rayon's global pool, sized to the thread count at start.

use crate::shapes::{self, LN_EPS, RMS_EPS};
use crate::{LoadError, Loaded, Peer, Runner};
use candle_core::{D, Device, Tensor};

/// The candle peer.
pub struct CandlePeer {
    threads: usize,
}

impl CandlePeer {
    /// candle on `threads` rayon threads.
    pub fn new(threads: usize) -> Self {
        CandlePeer { threads }
    }
}

type OpFn = fn(&[Tensor]) -> candle_core::Result<Tensor>;

struct CandleRunner {
    inputs: Vec<Tensor>,
    f: OpFn,
    out: Option<Tensor>,
}

impl Runner for CandleRunner {
    fn call(&mut self) -> Result<(), String> {
        self.out = Some((self.f)(&self.inputs).map_err(|e| e.to_string())?);
        Ok(())
    }

    fn output(&mut self) -> Result<Vec<f32>, String> {
        let y = self.out.as_ref().ok_or("no call yet")?;
        y.flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| e.to_string())
    }
}

fn rmsnorm(t: &[Tensor]) -> candle_core::Result<Tensor> {
    candle_nn::ops::rms_norm(&t[0], &t[1], RMS_EPS)
}

fn layernorm(t: &[Tensor]) -> candle_core::Result<Tensor> {
    candle_nn::ops::layer_norm(&t[0], &t[1], &t[2], LN_EPS)
}

fn masked_softmax(t: &[Tensor]) -> candle_core::Result<Tensor> {
    candle_nn::ops::softmax_last_dim(&(&t[0] + &t[1])?)
}

fn swiglu(t: &[Tensor]) -> candle_core::Result<Tensor> {
    candle_nn::ops::silu(&t[0])? * &t[1]
}

fn gelu_residual(t: &[Tensor]) -> candle_core::Result<Tensor> {
    t[0].gelu_erf()? + &t[1]
}

/// x is passed as [1, 1, R, C] (batch, heads, sequence, dim): rows are positions.
fn rope(t: &[Tensor]) -> candle_core::Result<Tensor> {
    candle_nn::rotary_emb::rope(&t[0], &t[1], &t[2])
}

/// q is passed as [B, Hkv, G·Sq, Dk]: each kv head's group of query heads is one
/// matrix, so GQA needs no copy of k and v.
fn attention(t: &[Tensor]) -> candle_core::Result<Tensor> {
    let (q, k, v) = (&t[0], &t[1], &t[2]);
    let dk = q.dim(D::Minus1)?;
    let s = (q.matmul(&k.t()?)? * (1.0 / (dk as f64).sqrt()))?;
    let p = candle_nn::ops::softmax_last_dim(&s)?;
    p.matmul(v)
}

fn add(t: &[Tensor]) -> candle_core::Result<Tensor> {
    &t[0] + &t[1]
}

impl Peer for CandlePeer {
    fn name(&self) -> &'static str {
        "candle"
    }

    fn version(&self) -> String {
        "0.11.1".into()
    }

    fn detail(&self) -> String {
        format!(
            "candle-nn CPU ops (rms_norm, layer_norm, softmax_last_dim, rope); rayon threads = {}",
            self.threads
        )
    }

    fn load(
        &mut self,
        op: &str,
        dims: &[usize],
        inputs: Vec<Vec<f32>>,
        _variant: Option<&str>,
    ) -> Result<Loaded, LoadError> {
        let fail = |e: candle_core::Error| LoadError::Failed(e.to_string());
        let mut shapes = shapes::input_shapes(op, dims).map_err(LoadError::Failed)?;
        let (f, nodes): (OpFn, &str) = match op {
            "rmsnorm" => (rmsnorm, "candle_nn::ops::rms_norm"),
            "layernorm" => (layernorm, "candle_nn::ops::layer_norm"),
            "masked_softmax" => (masked_softmax, "add + candle_nn::ops::softmax_last_dim"),
            "swiglu" => (swiglu, "candle_nn::ops::silu + mul"),
            "gelu_residual" => (gelu_residual, "gelu_erf + add"),
            "rope" => {
                let (r, c) = shapes::rows(dims).map_err(LoadError::Failed)?;
                shapes[0] = vec![1, 1, r, c];
                (rope, "candle_nn::rotary_emb::rope")
            }
            "attention" => {
                let a = shapes::attn(dims).map_err(LoadError::Failed)?;
                shapes[0] = vec![a.b, a.hkv, (a.hq / a.hkv) * a.sq, a.dk];
                (
                    attention,
                    "matmul, softmax_last_dim, matmul (GQA by reshape)",
                )
            }
            "floor" => (add, "add"),
            other => return Err(LoadError::Unsupported(format!("candle: no {other}"))),
        };
        let tensors = inputs
            .into_iter()
            .zip(&shapes)
            .map(|(v, s)| Tensor::from_vec(v, s.as_slice(), &Device::Cpu))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(fail)?;
        Ok(Loaded {
            runner: Box::new(CandleRunner {
                inputs: tensors,
                f,
                out: None,
            }),
            variant: "ops".into(),
            detail: nodes.into(),
            fallbacks: Vec::new(),
        })
    }
}
