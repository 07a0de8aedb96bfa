//! What the output-store examples (`stream_ab`, `placement`) share: one
//! launch prepared with cached and with streamed stores, and an output window
//! placed at a chosen distance after the input.

use taskgrain::ops::{self, OwnedInputs, Prepared, Shape};
use taskgrain::packet::Backend;
use taskgrain::plan::default_config;
use taskgrain::simt::PacketMode;

/// `inputs`' launch at the default geometry, full-packet: (cached, streamed).
pub fn cached_and_streamed<'a>(
    inputs: &'a OwnedInputs,
    shape: &Shape,
    backend: Backend,
) -> Result<(Prepared<'a>, Prepared<'a>), taskgrain::Error> {
    let config = default_config(inputs.view().op(), shape, backend.width());
    let prepare = |stream| {
        ops::prepare(
            inputs.view(),
            shape,
            backend,
            config,
            PacketMode::FullPacket,
        )
        .map(|l| l.with_stream(stream))
    };
    Ok((prepare(false)?, prepare(true)?))
}

/// Output buffers with room to place a window anywhere within 4 KiB.
pub fn output_buffer(len: usize) -> Vec<f32> {
    vec![0.0f32; len + 1024]
}

/// The `len`-element window of `buf` (from [`output_buffer`]) that starts
/// `distance` bytes, modulo 4 KiB, after input 0 of `inputs`.
pub fn window_at<'b>(
    buf: &'b mut [f32],
    inputs: &OwnedInputs,
    distance: usize,
    len: usize,
) -> &'b mut [f32] {
    let x = inputs.view().tensors().0[0].as_ptr() as usize;
    let at = (buf.as_ptr() as usize).wrapping_sub(x) % 4096;
    let off = (distance + 4096 - at) % 4096 / 4;
    &mut buf[off..off + len]
}
