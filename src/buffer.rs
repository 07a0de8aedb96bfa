//! Tensor storage that starts on a cache line.
//!
//! Kernels accept any `&[f32]`, but where a tensor starts matters to a
//! memory-bound one: `malloc` places large buffers 16 bytes past a page, so
//! half of all 32-byte loads straddle two cache lines and streamed stores go
//! out in 16-byte pieces (rmsnorm and layernorm 1024x4096 on one AVX2 worker:
//! 15–25% slower than on 64-byte aligned buffers, measured in one process).
//! Every tensor taskgrain allocates — generated inputs, graph intermediates,
//! benchmark outputs — is an [`AlignedBuf`], as ONNX Runtime's and PyTorch's
//! CPU allocators align theirs; callers get the same speed from their own
//! buffers by aligning them to [`ALIGN`] bytes.

use aligned_vec::{AVec, ConstAlign};

/// Byte alignment of taskgrain's tensors: one cache line, one AVX-512 packet.
pub const ALIGN: usize = 64;

/// An f32 vector whose first element starts a cache line ([`ALIGN`] bytes).
pub type AlignedBuf = AVec<f32, ConstAlign<ALIGN>>;

/// `len` zeros.
pub fn zeros(len: usize) -> AlignedBuf {
    filled(0.0, len)
}

/// `len` copies of `value`.
pub fn filled(value: f32, len: usize) -> AlignedBuf {
    let mut buf = AlignedBuf::with_capacity(ALIGN, len);
    buf.resize(len, value);
    buf
}

/// A copy of `values`.
pub fn from_slice(values: &[f32]) -> AlignedBuf {
    AlignedBuf::from_slice(ALIGN, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_on_a_cache_line_and_hold_their_values() {
        for len in [0, 1, 3, 17, 4096] {
            let z = zeros(len);
            assert_eq!(z.len(), len);
            assert!(z.iter().all(|&v| v == 0.0));
            let v: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let c = from_slice(&v);
            assert_eq!(&c[..], &v[..]);
            if len > 0 {
                assert_eq!(z.as_ptr() as usize % ALIGN, 0);
                assert_eq!(c.as_ptr() as usize % ALIGN, 0);
            }
        }
        assert!(filled(f32::NAN, 5).iter().all(|v| v.is_nan()));
    }
}
