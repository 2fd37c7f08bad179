//! Grouped-query softmax attention with rotary positions, optional per-head Q/K norms,
//! sinks and a sliding window.
use gmlx_mlx::fast::{self, ScaledDotProductAttentionMask};
use gmlx_mlx::Array;

use crate::blocks::context::ForwardCtx;
use crate::blocks::linear::Linear;
use crate::blocks::mask;
use crate::blocks::norm::RmsNorm;
use crate::blocks::rope::Rope;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};
use crate::cache::{Attended, KeyMask, LayerCache};
use crate::error::{Error, Result};

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
    /// `attn_q` also yields per-head gate logits after each head's queries; the output is
    /// multiplied by their sigmoid (Qwen3.5, Qwen3-Next).
    pub output_gate: bool,
}

impl Attention {
    /// `x [batch, tokens, hidden]` of block `layer`. In a cached pass each row continues its
    /// own sequence (projections run batched; rotation, the cache and attention per row).
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let d = self.head_dim;
        let heads = |h: Array, norm: Option<&RmsNorm>| -> Result<Array> {
            let h = match norm {
                Some(norm) => norm.forward(&h)?,
                None => h,
            };
            Ok(h.transpose_axes(&[0, 2, 1, 3])?)
        };
        let projected = |w: &Linear, n: i32, width: i32| -> Result<Array> {
            Ok(w.forward(x)?.reshape(&[batch, tokens, n, width])?)
        };
        let (q, gate) = if self.output_gate {
            let both = projected(&self.attn_q, self.n_heads, 2 * d)?;
            let part = |from: i32| {
                gmlx_mlx::slicing::slice(
                    &both,
                    &[0, 0, 0, from],
                    &[batch, tokens, self.n_heads, from + d],
                )
            };
            (
                part(0)?,
                Some(part(d)?.reshape(&[batch, tokens, self.n_heads * d])?),
            )
        } else {
            (projected(&self.attn_q, self.n_heads, d)?, None)
        };
        let q = heads(q, self.attn_q_norm.as_ref())?;
        let k = heads(
            projected(&self.attn_k, self.n_kv_heads, d)?,
            self.attn_k_norm.as_ref(),
        )?;
        let v = heads(projected(&self.attn_v, self.n_kv_heads, d)?, None)?;
        let out = if ctx.is_cached() {
            let mut outs = Vec::with_capacity(batch as usize);
            for b in 0..batch {
                let of_row = |a: &Array| row(a, b, batch);
                let position = ctx.positions[b as usize];
                let cache = ctx
                    .layer_cache(b as usize, layer)
                    .ok_or(Error::CacheMismatch { layer })?;
                outs.push(self.attend_cached(
                    &of_row(&q)?,
                    &of_row(&k)?,
                    &of_row(&v)?,
                    position,
                    layer,
                    cache,
                )?);
            }
            if outs.len() == 1 {
                outs.remove(0)
            } else {
                gmlx_mlx::ops::concatenate(&outs, 0)?
            }
        } else {
            let q = self.rope.forward(&q, 0)?;
            let k = self.rope.forward(&k, 0)?;
            let mask = match self.window.filter(|&w| tokens > w) {
                Some(w) => KeyMask::Array(mask::causal(0, tokens, 0, tokens, Some(w))?),
                None if tokens > 1 => KeyMask::Causal,
                None => KeyMask::All,
            };
            self.sdpa(&q, &k, &v, &mask)?
        };
        let mut out = out.transpose_axes(&[0, 2, 1, 3])?.reshape(&[
            batch,
            tokens,
            self.n_heads * self.head_dim,
        ])?;
        if let Some(gate) = gate {
            out = out.multiply(gmlx_mlx::ops::sigmoid(&gate)?)?;
        }
        self.attn_output.forward(&out)
    }

    /// One row: rotate at the row's position, append to its cache, attend.
    fn attend_cached(
        &self,
        q: &Array,
        k: &Array,
        v: &Array,
        position: i32,
        layer: usize,
        cache: &mut LayerCache,
    ) -> Result<Array> {
        let q = self.rope.forward(q, position)?;
        let k = self.rope.forward(k, position)?;
        let Attended { keys, values, mask } = cache
            .attend(&k, v, position)
            .ok_or(Error::CacheMismatch { layer })??;
        self.sdpa(&q, &keys, &values, &mask)
    }

    fn sdpa(&self, q: &Array, k: &Array, v: &Array, mask: &KeyMask) -> Result<Array> {
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let mask = match mask {
            KeyMask::All => None,
            KeyMask::Causal => Some(ScaledDotProductAttentionMask::Causal),
            KeyMask::Array(m) => Some(ScaledDotProductAttentionMask::Array(m)),
        };
        Ok(fast::scaled_dot_product_attention(
            q,
            k,
            v,
            scale,
            mask,
            self.sinks.as_ref(),
        )?)
    }

    /// Its weights: the projections (adaptable), then the norms and sinks.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        for l in [&self.attn_q, &self.attn_k, &self.attn_v, &self.attn_output] {
            v.linear(l);
        }
        for norm in [&self.attn_q_norm, &self.attn_k_norm].into_iter().flatten() {
            v.array(&norm.weight);
        }
        if let Some(sinks) = &self.sinks {
            v.array(sinks);
        }
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        v.linear(&mut self.attn_q);
        v.linear(&mut self.attn_k);
        v.linear(&mut self.attn_v);
        v.linear(&mut self.attn_output);
    }
}

/// Row `b` of a `[batch, ...]` array (the array itself when there is one row).
fn row(a: &Array, b: i32, batch: i32) -> Result<Array> {
    if batch == 1 {
        return Ok(a.clone());
    }
    let s = a.shape();
    Ok(gmlx_mlx::slicing::slice(
        a,
        &[b, 0, 0, 0],
        &[b + 1, s[1], s[2], s[3]],
    )?)
}
