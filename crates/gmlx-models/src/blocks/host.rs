//! The host side of a few-row step on the CPU. There the quantized products already run on
//! the host (`gmlx_mlx::cpu_qmm`), and every MLX evaluation between them hands the work to
//! MLX's stream thread and back: so a block's residual adds, norms and dense feed-forward run
//! here, on the rows the products read and write, and MLX evaluates once per block (its
//! attention).
use gmlx_mlx::{Array, Dtype};

use crate::error::Result;

/// `x`'s values, row-major (evaluating it if it is pending); `None` unless it is float32.
pub fn rows_of(x: &Array) -> Result<Option<Vec<f32>>> {
    if x.dtype() != Dtype::Float32 {
        return Ok(None);
    }
    if let Ok(v) = x.try_as_slice::<f32>() {
        return Ok(Some(v.to_vec()));
    }
    // a strided view
    let contiguous = x.contiguous()?;
    Ok(contiguous.try_as_slice::<f32>().ok().map(<[f32]>::to_vec))
}

/// `x * weight / sqrt(mean(x^2) + eps)` per row of `weight.len()` values.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(weight.len().max(1)) {
        let mut lanes = [0f32; 8];
        let mut chunks = row.chunks_exact(8);
        for c in &mut chunks {
            for (l, v) in lanes.iter_mut().zip(c) {
                *l = v.mul_add(*v, *l);
            }
        }
        let mut squares: f32 = lanes.iter().sum();
        squares += chunks.remainder().iter().map(|v| v * v).sum::<f32>();
        let scale = 1.0 / (squares / row.len() as f32 + eps).sqrt();
        out.extend(row.iter().zip(weight).map(|(v, w)| v * scale * w));
    }
    out
}

/// `a += b`, element by element.
pub fn add_into(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// `silu(gate) * up`, element by element, into `gate`.
pub fn silu_times(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}
