//! Hyper-connections: the residual is `streams` copies of the hidden state, `[batch, tokens,
//! streams, hidden]`. Before a sublayer they are reduced to one input with per-token weights
//! computed from all of them; after it, the sublayer's output is added back into each stream
//! with another per-token weight. HY4's iHC stops there; DeepSeek-V4's mHC also mixes the
//! streams through a per-token matrix made doubly stochastic by Sinkhorn iterations. The
//! weights, the reduction and the write-back run in float32 whatever the activation dtype, as
//! llama.cpp and the reference do.
use gmlx_mlx::{fast, ops, Array, Dtype};

use crate::error::Result;

/// The pre and post weights around one sublayer: `hc_{attn,ffn}_{fn,base,scale}`.
#[derive(Debug, Clone)]
pub struct HyperConnection {
    /// `[2 · streams, streams · hidden]` (with mixing `[(2 + streams) · streams, …]`),
    /// float32: pre, post (and mixing) logits from the normed streams.
    pub mix: Array,
    /// `[2 · streams]` (with mixing `[(2 + streams) · streams]`).
    pub base: Array,
    /// `[2]` (`[3]`): the scale of the pre logits, of the post logits (of the mixing ones).
    pub scale: Array,
    pub streams: i32,
    pub eps: f32,
    pub magnitude: f32,
    /// Added to the post weights.
    pub post_eps: f32,
    /// mHC: Sinkhorn iterations of the mixing matrix; `None`: no mixing.
    pub sinkhorn: Option<i32>,
    pub norm_eps: f32,
}

/// The sublayer's input and the weights that write its output back.
pub struct Reduced {
    pub input: Array,
    /// `[batch, tokens, streams]`, float32.
    pub post: Array,
    /// mHC: `[batch, tokens, source stream, destination stream]`, float32.
    pub mixing: Option<Array>,
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
        let mut post = part(n, 1)?.multiply(Array::from_f32(self.magnitude))?;
        if self.post_eps != 0.0 {
            post = post.add(Array::from_f32(self.post_eps))?;
        }
        let mixing = match self.sinkhorn {
            Some(iterations) => {
                let logits = gmlx_mlx::slicing::slice(
                    &logits,
                    &[0, 0, 2 * n],
                    &[s[0], s[1], 2 * n + n * n],
                )?;
                let base = gmlx_mlx::slicing::slice(&self.base, &[2 * n], &[2 * n + n * n])?;
                let scale = gmlx_mlx::slicing::slice(&self.scale, &[2], &[3])?;
                let logits = logits
                    .multiply(&scale)?
                    .add(&base)?
                    .reshape(&[s[0], s[1], n, n])?;
                Some(sinkhorn(&logits, iterations, self.eps)?)
            }
            None => None,
        };
        Ok(Reduced {
            input: weighted_sum(x, &pre)?,
            post,
            mixing,
        })
    }

    /// Stream `i` becomes `residual_i + post_i · out` (`out [batch, tokens, hidden]`); with
    /// mixing, `sum_j mixing_ji · residual_j + post_i · out`.
    pub fn write_back(&self, out: &Array, residual: &Array, reduced: &Reduced) -> Result<Array> {
        let out = out.as_dtype(Dtype::Float32)?.expand_dims_axes(&[-2])?;
        let residual32 = residual.as_dtype(Dtype::Float32)?;
        let carried = match &reduced.mixing {
            // [b, t, dst, src] @ [b, t, src, hidden]
            Some(m) => m.swap_axes(-1, -2)?.matmul(&residual32)?,
            None => residual32,
        };
        let sum = carried.add(out.multiply(reduced.post.expand_dims_axes(&[-1])?)?)?;
        Ok(sum.as_dtype(residual.dtype())?)
    }
}

/// Sinkhorn normalisation of `[…, source, destination]` logits, as llama.cpp's DeepSeek-V4
/// graph does it: softmax over the destinations, plus `eps`; the columns (each destination's
/// sum over sources) normalised once, then rows and columns alternately `iterations - 1`
/// more times, every sum plus `eps`.
fn sinkhorn(logits: &Array, iterations: i32, eps: f32) -> Result<Array> {
    let eps = Array::from_f32(eps);
    let normalize = |m: &Array, axis: i32| -> Result<Array> {
        Ok(m.divide(m.sum_axis(axis, true)?.add(&eps)?)?)
    };
    let mut m = ops::softmax_axis(logits, -1, true)?.add(&eps)?;
    m = normalize(&m, -2)?;
    for _ in 1..iterations {
        m = normalize(&m, -1)?;
        m = normalize(&m, -2)?;
    }
    Ok(m)
}

/// The final reduction of the streams before the output norm.
#[derive(Debug, Clone)]
pub enum StreamsHead {
    /// Weighted by `output_hc_{fn,base,scale}` (DeepSeek-V4, HY4).
    Weighted(HyperHead),
    /// Their mean (GLM-5-Next).
    Mean,
    /// A low-rank hyper-connection mix, which also stands in for the output norm (Qwen4
    /// experimental).
    LowRank(Box<crate::blocks::low_rank_hyper::LowRankMix>),
}

impl StreamsHead {
    /// `x [batch, tokens, streams, hidden]` to `[batch, tokens, hidden]`.
    pub fn reduce(&self, x: &Array) -> Result<Array> {
        match self {
            StreamsHead::Weighted(head) => head.reduce(x),
            StreamsHead::Mean => {
                let mean = x.as_dtype(Dtype::Float32)?.mean_axis(-2, false)?;
                Ok(mean.as_dtype(x.dtype())?)
            }
            StreamsHead::LowRank(mix) => Ok(mix.mix(x)?.input),
        }
    }
}

/// `output_hc_{fn,base,scale}`.
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
