//! Operator shapes (taskgrain's contract, DESIGN.md) and the raw f32 files the
//! driver hands over.

use std::path::{Path, PathBuf};

/// RMSNorm's epsilon.
pub const RMS_EPS: f32 = 1e-6;
/// LayerNorm's epsilon.
pub const LN_EPS: f32 = 1e-5;

/// The dims of attention: `[B, Hq, Hkv, Sq, Skv, Dk, Dv]`.
#[derive(Clone, Copy, Debug)]
pub struct Attn {
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    pub skv: usize,
    pub dk: usize,
    pub dv: usize,
}

/// Splits attention dims.
pub fn attn(dims: &[usize]) -> Result<Attn, String> {
    match *dims {
        [b, hq, hkv, sq, skv, dk, dv] if hkv > 0 && hq % hkv == 0 => Ok(Attn {
            b,
            hq,
            hkv,
            sq,
            skv,
            dk,
            dv,
        }),
        _ => Err(format!(
            "attention takes dims [B, Hq, Hkv, Sq, Skv, Dk, Dv] with Hq % Hkv = 0, got {dims:?}"
        )),
    }
}

/// Splits row dims `[R, C]`.
pub fn rows(dims: &[usize]) -> Result<(usize, usize), String> {
    match *dims {
        [r, c] => Ok((r, c)),
        _ => Err(format!("row operators take dims [R, C], got {dims:?}")),
    }
}

/// The input shapes of `op`, in taskgrain's input order.
pub fn input_shapes(op: &str, dims: &[usize]) -> Result<Vec<Vec<usize>>, String> {
    if op == "attention" {
        let a = attn(dims)?;
        return Ok(vec![
            vec![a.b, a.hq, a.sq, a.dk],
            vec![a.b, a.hkv, a.skv, a.dk],
            vec![a.b, a.hkv, a.skv, a.dv],
        ]);
    }
    if op == "floor" {
        return Ok(vec![vec![1], vec![1]]);
    }
    let (r, c) = rows(dims)?;
    Ok(match op {
        "rmsnorm" => vec![vec![r, c], vec![c]],
        "layernorm" => vec![vec![r, c], vec![c], vec![c]],
        "masked_softmax" | "swiglu" | "gelu_residual" => vec![vec![r, c], vec![r, c]],
        "rope" => vec![vec![r, c], vec![r, c / 2], vec![r, c / 2]],
        other => return Err(format!("unknown operator {other:?}")),
    })
}

/// The output shape of `op`.
pub fn output_shape(op: &str, dims: &[usize]) -> Result<Vec<usize>, String> {
    match op {
        "attention" => {
            let a = attn(dims)?;
            Ok(vec![a.b, a.hq, a.sq, a.dv])
        }
        "floor" => Ok(vec![1]),
        _ => {
            let (r, c) = rows(dims)?;
            Ok(vec![r, c])
        }
    }
}

/// Reads the inputs of `op` from raw little-endian f32 files, checking sizes.
pub fn read_inputs(op: &str, dims: &[usize], paths: &[PathBuf]) -> Result<Vec<Vec<f32>>, String> {
    let shapes = input_shapes(op, dims)?;
    if shapes.len() != paths.len() {
        return Err(format!(
            "{op} takes {} inputs, got {}",
            shapes.len(),
            paths.len()
        ));
    }
    shapes
        .iter()
        .zip(paths)
        .map(|(s, p)| {
            let want: usize = s.iter().product();
            let v = read_f32(p)?;
            if v.len() != want {
                return Err(format!(
                    "{}: {} elements, expected {want}",
                    p.display(),
                    v.len()
                ));
            }
            Ok(v)
        })
        .collect()
}

fn read_f32(path: &Path) -> Result<Vec<f32>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() % 4 != 0 {
        return Err(format!("{}: not a whole number of f32s", path.display()));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// Writes raw little-endian f32s.
pub fn write_f32(path: &Path, v: &[f32]) -> Result<(), String> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
