use gmlx_mlx::fast::{self, ScaledDotProductAttentionMask};
use gmlx_mlx::{Array, QuantWeight};

use crate::blocks::rope::Rope;
use crate::cache::KvCache;
use crate::error::Result;

/// Grouped-query self-attention with rotary positions.
#[derive(Debug, Clone)]
pub struct Attention {
    pub attn_q: QuantWeight,
    pub attn_k: QuantWeight,
    pub attn_v: QuantWeight,
    pub attn_output: QuantWeight,
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub rope: Rope,
}

impl Attention {
    /// `x [batch, tokens, hidden]`; the tokens continue the ones already in `cache`.
    pub fn forward(&self, x: &Array, cache: &mut KvCache) -> Result<Array> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let heads = |w: &QuantWeight, n: i32| -> Result<Array> {
            Ok(w.matmul(x)?
                .reshape(&[batch, tokens, n, self.head_dim])?
                .transpose_axes(&[0, 2, 1, 3])?)
        };
        let offset = cache.len();
        let q = self
            .rope
            .forward(&heads(&self.attn_q, self.n_heads)?, offset)?;
        let k = self
            .rope
            .forward(&heads(&self.attn_k, self.n_kv_heads)?, offset)?;
        let v = heads(&self.attn_v, self.n_kv_heads)?;
        let (keys, values) = cache.append(&k, &v)?;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        // The causal mask of MLX's kernel is aligned to the last key, so a chunk that follows
        // cached tokens sees all of them; one query token needs no mask at all.
        let mask = (tokens > 1).then_some(ScaledDotProductAttentionMask::Causal);
        let out = fast::scaled_dot_product_attention(&q, &keys, &values, scale, mask, None)?;
        let out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[
            batch,
            tokens,
            self.n_heads * self.head_dim,
        ])?;
        Ok(self.attn_output.matmul(&out)?)
    }
}
