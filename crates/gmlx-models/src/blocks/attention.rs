use gmlx_mlx::fast::{self, ScaledDotProductAttentionMask};
use gmlx_mlx::Array;

use crate::blocks::linear::Linear;
use crate::blocks::norm::RmsNorm;

use crate::blocks::rope::Rope;
use crate::cache::KvCache;
use crate::error::Result;

/// Grouped-query self-attention with rotary positions.
#[derive(Debug, Clone)]
pub struct Attention {
    pub attn_q: Linear,
    pub attn_k: Linear,
    pub attn_v: Linear,
    pub attn_output: Linear,
    /// Per-head RMSNorm of queries and keys before rotation (Qwen3).
    pub attn_q_norm: Option<RmsNorm>,
    pub attn_k_norm: Option<RmsNorm>,
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub rope: Rope,
    /// Per-head attention sink logits (gpt-oss): an extra softmax term with no value.
    pub sinks: Option<Array>,
    /// Sliding window: a query sees only the last `window` positions, itself included.
    pub window: Option<i32>,
}

/// `[queries, keys]` visibility for `queries` new tokens after `offset` cached ones, causal
/// and limited to the last `window` positions.
fn window_mask(queries: i32, offset: i32, window: i32) -> Array {
    let keys = offset + queries;
    let visible: Vec<bool> = (0..queries)
        .flat_map(|i| {
            let q = offset + i;
            (0..keys).map(move |k| k <= q && q - k < window)
        })
        .collect();
    Array::from_slice(&visible, &[queries, keys])
}

impl Attention {
    /// `x [batch, tokens, hidden]`; the tokens continue the ones already in `cache`.
    pub fn forward(&self, x: &Array, cache: &mut KvCache) -> Result<Array> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let heads = |w: &Linear, n: i32, norm: Option<&RmsNorm>| -> Result<Array> {
            let mut h = w.forward(x)?.reshape(&[batch, tokens, n, self.head_dim])?;
            if let Some(norm) = norm {
                h = norm.forward(&h)?;
            }
            Ok(h.transpose_axes(&[0, 2, 1, 3])?)
        };
        let offset = cache.len();
        let q = heads(&self.attn_q, self.n_heads, self.attn_q_norm.as_ref())?;
        let k = heads(&self.attn_k, self.n_kv_heads, self.attn_k_norm.as_ref())?;
        let q = self.rope.forward(&q, offset)?;
        let k = self.rope.forward(&k, offset)?;
        let v = heads(&self.attn_v, self.n_kv_heads, None)?;
        let (keys, values) = cache.append(&k, &v)?;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        // The causal mask of MLX's kernel is aligned to the last key, so a chunk that follows
        // cached tokens sees all of them; one query token needs no mask at all.
        let windowed = self
            .window
            .filter(|&w| offset + tokens > w)
            .map(|w| window_mask(tokens, offset, w));
        let mask = match &windowed {
            Some(m) => Some(ScaledDotProductAttentionMask::Array(m)),
            None => (tokens > 1).then_some(ScaledDotProductAttentionMask::Causal),
        };
        let sinks = self.sinks.as_ref();
        let out = fast::scaled_dot_product_attention(&q, &keys, &values, scale, mask, sinks)?;
        let out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[
            batch,
            tokens,
            self.n_heads * self.head_dim,
        ])?;
        self.attn_output.forward(&out)
    }
}

impl Attention {
    /// One new token for each of `B` independent sequences: `x [B, 1, hidden]`, row `b`
    /// continuing what `caches[b]` holds. The projections run batched; rotation, the cache
    /// append and attention run per row, since rows have their own lengths.
    pub fn forward_rows(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        let batch = x.shape()[0];
        let heads = |w: &Linear, n: i32, norm: Option<&RmsNorm>| -> Result<Array> {
            let mut h = w.forward(x)?.reshape(&[batch, 1, n, self.head_dim])?;
            if let Some(norm) = norm {
                h = norm.forward(&h)?;
            }
            Ok(h.transpose_axes(&[0, 2, 1, 3])?)
        };
        let q = heads(&self.attn_q, self.n_heads, self.attn_q_norm.as_ref())?;
        let k = heads(&self.attn_k, self.n_kv_heads, self.attn_k_norm.as_ref())?;
        let v = heads(&self.attn_v, self.n_kv_heads, None)?;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let row = |a: &Array, b: i32| -> Result<Array> {
            let s = a.shape();
            Ok(gmlx_mlx::slicing::slice(
                a,
                &[b, 0, 0, 0],
                &[b + 1, s[1], s[2], s[3]],
            )?)
        };
        let mut outs = Vec::with_capacity(caches.len());
        for (b, cache) in caches.iter_mut().enumerate() {
            let b = b as i32;
            let offset = cache.len();
            let q = self.rope.forward(&row(&q, b)?, offset)?;
            let k = self.rope.forward(&row(&k, b)?, offset)?;
            let (keys, values) = cache.append(&k, &row(&v, b)?)?;
            let windowed = self
                .window
                .filter(|&w| offset + 1 > w)
                .map(|w| window_mask(1, offset, w));
            let mask = windowed.as_ref().map(ScaledDotProductAttentionMask::Array);
            let sinks = self.sinks.as_ref();
            outs.push(fast::scaled_dot_product_attention(
                &q, &keys, &values, scale, mask, sinks,
            )?);
        }
        let out = gmlx_mlx::ops::concatenate(&outs, 0)?;
        let out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[
            batch,
            1,
            self.n_heads * self.head_dim,
        ])?;
        self.attn_output.forward(&out)
    }
}
