//! Attention of many queries on the CPU (a prompt's pass): MLX's two products (BLAS on every
//! core) with the masked softmax between them on the host. MLX's CPU attention computes that
//! softmax on one thread with a scalar `exp` that calls libm's `fmaf` at each step, and applies
//! the causal mask after exponentiating every score: in a 512-token prefill of the default
//! model about half the time went there while the second core waited. Here masked scores are
//! never exponentiated and the rows are split over the rayon pool.
use gmlx_mlx::{Array, Dtype};
use rayon::prelude::*;

use crate::cache::KeyMask;
use crate::error::Result;

/// Queries from which a pass attends this way (fewer go through MLX's fused vector kernel).
const MIN_QUERIES: i32 = 8;
/// Score bytes one piece of the queries may hold at once.
const MAX_SCORE_BYTES: usize = 256 << 20;

/// `GMLX_HOST_ATTENTION=0` keeps a CPU pass's attention in MLX (for comparison).
pub fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var("GMLX_HOST_ATTENTION").map_or(true, |v| v.trim() != "0"))
}

/// `softmax(q k^T · scale + mask) v` for `q [batch, heads, queries, d]` and `k`, `v`
/// `[batch, kv_heads, keys, d]` (grouped heads) when a pass attends this way: on the CPU, in
/// float32, in inference (under a `host_products` guard: the softmax leaves the graph),
/// without sinks, with a causal mask (aligned to the last key) or
/// none, from [`MIN_QUERIES`] queries. `None` otherwise, before any work.
pub fn attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: &KeyMask,
    sinks: Option<&Array>,
) -> Result<Option<Array>> {
    in_pieces(q, k, v, scale, mask, sinks, MAX_SCORE_BYTES)
}

/// [`attention`] with pieces of queries whose scores hold at most `max_score_bytes`.
fn in_pieces(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: &KeyMask,
    sinks: Option<&Array>,
    max_score_bytes: usize,
) -> Result<Option<Array>> {
    let causal = match mask {
        KeyMask::Causal => true,
        KeyMask::All => false,
        KeyMask::Array(_) => return Ok(None),
    };
    let (&[batch, heads, queries, d], &[_, kv_heads, keys, _]) = (q.shape(), k.shape()) else {
        return Ok(None);
    };
    let taken = enabled()
        && sinks.is_none()
        && queries >= MIN_QUERIES
        && kv_heads > 0
        && heads % kv_heads == 0
        && keys >= queries
        && v.shape().get(3) == Some(&d)
        && [q, k, v].iter().all(|a| a.dtype() == Dtype::Float32)
        && gmlx_mlx::quant::host_work_allowed();
    if !taken {
        return Ok(None);
    }
    let group = heads / kv_heads;
    let row_bytes = (batch * heads * keys) as usize * 4;
    let piece = (max_score_bytes / row_bytes.max(1)).clamp(1, queries as usize) as i32;
    let keys_t = k.swap_axes(-1, -2)?;
    let mut outs = Vec::new();
    for start in (0..queries).step_by(piece as usize) {
        let n = piece.min(queries - start);
        let qp = if n == queries {
            q.clone()
        } else {
            gmlx_mlx::slicing::slice(q, &[0, 0, start, 0], &[batch, heads, start + n, d])?
        };
        // each key/value head's queries as one matrix: [batch, kv_heads, group * n, d]
        let grouped =
            qp.multiply(Array::from_f32(scale))?
                .reshape(&[batch, kv_heads, group * n, d])?;
        let scores = grouped.matmul(&keys_t)?;
        // float32 scores of float32 operands: `None` cannot happen, and would change nothing
        let Some(mut s) = super::host::rows_of(&scores)? else {
            return Ok(None);
        };
        drop(scores);
        // the piece's first query sees keys up to this one (causal, aligned to the last key)
        let first_visible = keys - queries + start;
        softmax_rows(
            &mut s,
            keys as usize,
            n as usize,
            causal.then_some(first_visible as usize),
        );
        let p = gmlx_mlx::owned::f32_array(s, &[batch, kv_heads, group * n, keys])?;
        let out = p.matmul(v)?.reshape(&[batch, heads, n, d])?;
        if n < queries {
            // one piece's probabilities at a time: evaluated, they are freed
            out.eval()?;
        }
        outs.push(out);
    }
    Ok(Some(if outs.len() == 1 {
        outs.remove(0)
    } else {
        gmlx_mlx::ops::concatenate(&outs, 2)?
    }))
}

/// Softmax of each row of `keys` scores in place. Rows cycle through `queries` queries; with
/// `causal = Some(first)`, query `i`'s row sees keys `0..=first + i` and the rest become 0.
pub fn softmax_rows(scores: &mut [f32], keys: usize, queries: usize, causal: Option<usize>) {
    scores
        .par_chunks_mut(keys.max(1))
        .with_min_len(8)
        .enumerate()
        .for_each(|(r, row)| {
            let visible = match causal {
                Some(first) => (first + r % queries.max(1) + 1).min(keys),
                None => keys,
            };
            let (seen, hidden) = row.split_at_mut(visible);
            hidden.fill(0.0);
            let max = seen.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for s in seen.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            let inv = 1.0 / sum;
            for s in seen.iter_mut() {
                *s *= inv;
            }
        });
}

#[cfg(test)]
mod tests {
    use gmlx_mlx::fast::{self, ScaledDotProductAttentionMask};
    use gmlx_mlx::mlx_rs::{random, Device};

    use super::*;

    fn normal(shape: &[i32], seed: u64) -> Array {
        random::normal::<f32>(shape, None, None, &random::key(seed).expect("key")).expect("normal")
    }

    fn host(a: &Array) -> Vec<f32> {
        a.eval().expect("eval");
        a.contiguous()
            .expect("contiguous")
            .as_slice::<f32>()
            .to_vec()
    }

    /// Against MLX's attention on the same operands: causal over a whole prompt, causal after
    /// cached keys, no mask; grouped heads; in one piece and in pieces of a few queries.
    #[test]
    fn matches_mlx_attention() {
        Device::set_default(&Device::cpu());
        let _host = gmlx_mlx::quant::host_products();
        for (heads, kv_heads, queries, keys, causal) in [
            (6, 2, 40, 40, true),
            (4, 4, 24, 61, true),
            (6, 3, 16, 16, false),
        ] {
            let d = 16;
            let q = normal(&[1, heads, queries, d], 1);
            let k = normal(&[1, kv_heads, keys, d], 2);
            let v = normal(&[1, kv_heads, keys, d], 3);
            let scale = 0.3;
            let (mask, mlx_mask) = if causal {
                (KeyMask::Causal, Some(ScaledDotProductAttentionMask::Causal))
            } else {
                (KeyMask::All, None)
            };
            let want = host(
                &fast::scaled_dot_product_attention(&q, &k, &v, scale, mlx_mask, None)
                    .expect("mlx"),
            );
            // one piece, then pieces of 7 queries (the last one shorter)
            let piece_bytes = (heads * keys) as usize * 4 * 7;
            for max_bytes in [MAX_SCORE_BYTES, piece_bytes] {
                let got = in_pieces(&q, &k, &v, scale, &mask, None, max_bytes)
                    .expect("attention")
                    .expect("taken");
                assert_eq!(got.shape(), &[1, heads, queries, d]);
                let worst = host(&got)
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst < 1e-5,
                    "{heads}/{kv_heads} heads, {queries} x {keys}, causal {causal}, \
                     pieces of {max_bytes} bytes: {worst}"
                );
            }
        }
    }

    /// What it leaves to MLX: graphs that may be differentiated, masks given as arrays, sinks,
    /// few queries, values of another head size, other dtypes.
    #[test]
    fn declines_what_it_does_not_compute() {
        Device::set_default(&Device::cpu());
        let q = normal(&[1, 2, 16, 8], 1);
        let k = normal(&[1, 2, 16, 8], 2);
        let none = |r: Result<Option<Array>>| r.expect("no error").is_none();
        // a graph that may be differentiated: no host_products guard, or a training one
        assert!(none(attention(&q, &k, &k, 1.0, &KeyMask::Causal, None)));
        let _host = gmlx_mlx::quant::host_products();
        {
            let _training = gmlx_mlx::quant::training_products();
            assert!(none(attention(&q, &k, &k, 1.0, &KeyMask::Causal, None)));
        }
        assert!(!none(attention(&q, &k, &k, 1.0, &KeyMask::Causal, None)));
        let mask = KeyMask::Array(Array::from_bool(true));
        assert!(none(attention(&q, &k, &k, 1.0, &mask, None)));
        let sinks = normal(&[2], 3);
        assert!(none(attention(
            &q,
            &k,
            &k,
            1.0,
            &KeyMask::Causal,
            Some(&sinks)
        )));
        let few = normal(&[1, 2, 4, 8], 4);
        assert!(none(attention(&few, &k, &k, 1.0, &KeyMask::Causal, None)));
        let wider_values = normal(&[1, 2, 16, 12], 5);
        assert!(none(attention(
            &q,
            &k,
            &wider_values,
            1.0,
            &KeyMask::Causal,
            None
        )));
        let half = q.as_dtype(Dtype::Float16).expect("cast");
        assert!(none(attention(&half, &k, &k, 1.0, &KeyMask::Causal, None)));
    }

    #[test]
    fn masked_keys_get_no_weight_and_rows_sum_to_one() {
        // 2 queries after 3 cached keys: they see 4 and 5 keys
        let mut s: Vec<f32> = (0..10).map(|i| i as f32 * 0.1).collect();
        softmax_rows(&mut s, 5, 2, Some(3));
        assert_eq!(s[4], 0.0);
        assert!((s[..4].iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((s[5..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}
