//! Hyper-connections without stream mixing (HY4's iHC): the residual is `streams` copies of
//! the hidden state, `[batch, tokens, streams, hidden]`. Before a sublayer they are reduced
//! to one input with per-token weights computed from all of them; after it, the sublayer's
//! output is added back into each stream with another per-token weight. The weights, the
//! reduction and the write-back run in float32 whatever the activation dtype, as llama.cpp
//! and the reference do.
use gmlx_mlx::{fast, ops, Array, Dtype};

use crate::error::Result;

/// The pre and post weights around one sublayer: `hc_{attn,ffn}_{fn,base,scale}`.
#[derive(Debug, Clone)]
pub struct HyperConnection {
    /// `[2 · streams, streams · hidden]`, float32: pre then post logits from the normed streams.
    pub mix: Array,
    /// `[2 · streams]`.
    pub base: Array,
    /// `[2]`: the scale of the pre logits, then of the post logits.
    pub scale: Array,
    pub streams: i32,
    pub eps: f32,
    pub magnitude: f32,
    pub norm_eps: f32,
}

/// The sublayer's input and the weights that write its output back.
pub struct Reduced {
    pub input: Array,
    /// `[batch, tokens, streams]`, float32.
    pub post: Array,
}

impl HyperConnection {
    /// `x [batch, tokens, streams, hidden]` to the sublayer input `[batch, tokens, hidden]`
    /// (`sum_i pre_i x_i`, `pre = sigmoid(logits · scale + base) + eps`) and the write-back
    /// weights (`magnitude · sigmoid(…) + eps`).
    pub fn reduce(&self, x: &Array) -> Result<Reduced> {
        let n = self.streams;
        let logits = stream_logits(x, &self.mix, self.norm_eps)?; // [b, t, 2n]
        let s = logits.shape().to_vec();
        let half =
            |from: i32| gmlx_mlx::slicing::slice(&logits, &[0, 0, from], &[s[0], s[1], from + n]);
        let part = |from: i32, index: i32| -> Result<Array> {
            let base = gmlx_mlx::slicing::slice(&self.base, &[from], &[from + n])?;
            let scale = gmlx_mlx::slicing::slice(&self.scale, &[index], &[index + 1])?;
            Ok(ops::sigmoid(half(from)?.multiply(&scale)?.add(&base)?)?)
        };
        let pre = part(0, 0)?.add(Array::from_f32(self.eps))?;
        let post = part(n, 1)?
            .multiply(Array::from_f32(self.magnitude))?
            .add(Array::from_f32(self.eps))?;
        Ok(Reduced {
            input: weighted_sum(x, &pre)?,
            post,
        })
    }

    /// Stream `i` becomes `residual_i + post_i · out` (`out [batch, tokens, hidden]`).
    pub fn write_back(&self, out: &Array, residual: &Array, post: &Array) -> Result<Array> {
        let out = out.as_dtype(Dtype::Float32)?.expand_dims_axes(&[-2])?;
        let sum = residual
            .as_dtype(Dtype::Float32)?
            .add(out.multiply(post.expand_dims_axes(&[-1])?)?)?;
        Ok(sum.as_dtype(residual.dtype())?)
    }
}

/// The final reduction of the streams before the output norm: `output_hc_{fn,base,scale}`.
#[derive(Debug, Clone)]
pub struct HyperHead {
    /// `[streams, streams · hidden]`, float32.
    pub mix: Array,
    /// `[streams]`.
    pub base: Array,
    /// `[1]`.
    pub scale: Array,
    pub eps: f32,
    pub norm_eps: f32,
}

impl HyperHead {
    /// `x [batch, tokens, streams, hidden]` to `[batch, tokens, hidden]`.
    pub fn reduce(&self, x: &Array) -> Result<Array> {
        let logits = stream_logits(x, &self.mix, self.norm_eps)?;
        let pre = ops::sigmoid(logits.multiply(&self.scale)?.add(&self.base)?)?
            .add(Array::from_f32(self.eps))?;
        weighted_sum(x, &pre)
    }
}

/// `mix · rms_norm(streams flattened)`, float32: `[batch, tokens, rows of mix]`.
fn stream_logits(x: &Array, mix: &Array, eps: f32) -> Result<Array> {
    let s = x.shape();
    let flat = x
        .as_dtype(Dtype::Float32)?
        .reshape(&[s[0], s[1], s[2] * s[3]])?;
    let normed = fast::rms_norm(&flat, None, eps)?;
    Ok(normed.matmul(mix.transpose()?)?)
}

/// `sum_i w_i x_i` over the streams, in float32, cast back to `x`'s dtype.
fn weighted_sum(x: &Array, w: &Array) -> Result<Array> {
    let sum = x
        .as_dtype(Dtype::Float32)?
        .multiply(w.expand_dims_axes(&[-1])?)?
        .sum_axis(-2, false)?;
    Ok(sum.as_dtype(x.dtype())?)
}
