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
                *l += v * v;
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

/// Elements from which [`silu_times_pass`] computes on the host: a prompt's pass (a decode
/// step's few rows stay in MLX's graph, or on the host already).
const SILU_PASS_MIN: usize = 1 << 16;

/// `silu(gate) * up` for a CPU inference pass of many rows on the host, over the rayon pool
/// (MLX's CPU `sigmoid` runs on one thread with a scalar `exp`): `None`, before any work,
/// elsewhere (another device or dtype, a graph that may be differentiated, few elements).
pub fn silu_times_pass(gate: &Array, up: &Array) -> Result<Option<Array>> {
    use rayon::prelude::*;
    let taken = gate.dtype() == Dtype::Float32
        && up.dtype() == Dtype::Float32
        && gate.shape() == up.shape()
        && gate.size() >= SILU_PASS_MIN
        && gmlx_mlx::quant::host_work_allowed();
    if !taken {
        return Ok(None);
    }
    let (Some(mut g), Some(u)) = (rows_of(gate)?, rows_of(up)?) else {
        return Ok(None);
    };
    g.par_chunks_mut(1 << 12)
        .zip(u.par_chunks(1 << 12))
        .for_each(|(g, u)| silu_times(g, u));
    Ok(Some(gmlx_mlx::owned::f32_array(g, gate.shape())?))
}

/// Softmax attention of one token's queries (`n_heads` vectors of `d`) over every key and
/// value held (token-major, `kv_heads` vectors of `d` per token; query head `h` reads
/// key/value head `h / (n_heads / kv_heads)`): `n_heads` output vectors of `d`. Query heads
/// are split over rayon's pool when the work is large enough to pay for it (one task per
/// query head: reading a key/value head once for its whole group measured 12% slower on two
/// cores, its few tasks splitting unevenly).
pub fn attend_one(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    kv_heads: usize,
    d: usize,
    scale: f32,
) -> Vec<f32> {
    let n_heads = q.len() / d.max(1);
    let group = (n_heads / kv_heads.max(1)).max(1);
    let width = kv_heads * d;
    let tokens = keys.len() / width.max(1);
    let mut out = vec![0f32; q.len()];
    let held = gmlx_mlx::cpu_attend::Held {
        keys,
        values,
        width,
    };
    let head = |h: usize, o: &mut [f32]| {
        let qh = &q[h * d..(h + 1) * d];
        gmlx_mlx::cpu_attend::head(qh, &held, h / group, scale, o);
    };
    if n_heads > 1 && tokens * q.len() >= 1 << 12 {
        use rayon::prelude::*;
        out.par_chunks_mut(d)
            .enumerate()
            .for_each(|(h, o)| head(h, o));
    } else {
        for (h, o) in out.chunks_mut(d).enumerate() {
            head(h, o);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{attend_one, silu_times_pass};
    use gmlx_mlx::mlx_rs::{random, Device};
    use gmlx_mlx::ops;

    /// A prompt-sized pass on the host gives MLX's `gate * sigmoid(gate) * up`, and is declined
    /// where the graph may be differentiated or the pass is a decode step's few rows.
    #[test]
    fn silu_of_a_pass_matches_mlx_and_only_runs_for_inference() {
        Device::set_default(&Device::cpu());
        let normal = |shape: &[i32], seed| {
            random::normal::<f32>(shape, None, None, &random::key(seed).expect("key"))
                .expect("normal")
        };
        let (gate, up) = (normal(&[1, 64, 1536], 1), normal(&[1, 64, 1536], 2));
        assert!(silu_times_pass(&gate, &up).expect("no error").is_none());
        let _host = gmlx_mlx::quant::host_products();
        let ours = silu_times_pass(&gate, &up)
            .expect("no error")
            .expect("taken");
        let mlx = gate
            .multiply(ops::sigmoid(&gate).expect("sigmoid"))
            .and_then(|g| g.multiply(&up))
            .expect("mlx");
        let worst = ours
            .subtract(&mlx)
            .and_then(|d| d.abs())
            .and_then(|d| d.max(None))
            .expect("difference");
        assert!(worst.item_exact::<f32>() < 1e-5);
        assert_eq!(ours.shape(), gate.shape());
        let (few_gate, few_up) = (normal(&[1, 2, 1536], 3), normal(&[1, 2, 1536], 4));
        assert!(silu_times_pass(&few_gate, &few_up)
            .expect("no error")
            .is_none());
    }

    /// Softmax attention in float64, one query head at a time.
    fn reference(q: &[f32], k: &[f32], v: &[f32], kv_heads: usize, d: usize) -> Vec<f64> {
        let heads = q.len() / d;
        let width = kv_heads * d;
        let tokens = k.len() / width;
        let scale = 1.0 / (d as f64).sqrt();
        let mut out = Vec::new();
        for h in 0..heads {
            let kv = h / (heads / kv_heads);
            let s: Vec<f64> = (0..tokens)
                .map(|j| {
                    (0..d)
                        .map(|i| q[h * d + i] as f64 * k[j * width + kv * d + i] as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for i in 0..d {
                out.push(
                    (0..tokens)
                        .map(|j| e[j] * v[j * width + kv * d + i] as f64)
                        .sum::<f64>()
                        / sum,
                );
            }
        }
        out
    }

    #[test]
    fn grouped_query_attention_matches_a_float64_reference() {
        let mut state = 1u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
        };
        // one token; a few; enough to split heads over the pool
        for (heads, kv_heads, d, tokens) in [(4, 2, 8, 1), (9, 3, 64, 7), (8, 2, 64, 300)] {
            let q: Vec<f32> = (0..heads * d).map(|_| next()).collect();
            let k: Vec<f32> = (0..tokens * kv_heads * d).map(|_| next()).collect();
            let v: Vec<f32> = (0..tokens * kv_heads * d).map(|_| next()).collect();
            let ours = attend_one(&q, &k, &v, kv_heads, d, 1.0 / (d as f32).sqrt());
            let want = reference(&q, &k, &v, kv_heads, d);
            let worst = ours
                .iter()
                .zip(&want)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0, f64::max);
            assert!(
                worst < 1e-5,
                "{heads}/{kv_heads} heads of {d}, {tokens} tokens: {worst}"
            );
        }
    }
}
