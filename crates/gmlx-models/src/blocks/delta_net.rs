//! The gated DeltaNet mixer of Qwen3.5 and Qwen3-Next: a causal depthwise convolution over
//! the projected queries, keys and values (with SiLU), L2-normed queries and keys, the gated
//! delta rule (blocks::delta_rule) with per-head decay `g = a_scale · softplus(alpha + dt)`
//! and strength `beta = sigmoid(b)`, then an RMSNorm of each head gated by `silu(z)`.
use gmlx_mlx::{ops, Array, Dtype};

use crate::blocks::context::ForwardCtx;
use crate::blocks::delta_rule::{self, ScanInput};
use crate::blocks::linear::Linear;
use crate::blocks::norm::RmsNorm;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};
use crate::cache::{LayerCache, Recurrent};
use crate::error::{Error, Result};

use crate::config::HeadMap;

/// Where the queries, keys, values and output gate come from.
#[derive(Debug, Clone)]
pub enum DeltaInput {
    /// `attn_qkv` (`[2·k_heads·k_dim + v_heads·v_dim, hidden]`: queries, keys, values, in that
    /// order) and `attn_gate` (`[v_heads·v_dim, hidden]`: `z`).
    Split { attn_qkv: Linear, attn_gate: Linear },
    /// `ssm_in`: per key head, its queries, keys, and its value heads' values then gates
    /// (Qwen3-Next files converted before the split).
    Fused { ssm_in: Linear },
}

/// Where `beta` and `alpha` come from.
#[derive(Debug, Clone)]
pub enum DeltaGates {
    /// `ssm_beta` and `ssm_alpha`, one row per value head each (Qwen3.5).
    Split { ssm_beta: Linear, ssm_alpha: Linear },
    /// `ssm_ba`: per key head, the betas then the alphas of its value heads (Qwen3-Next).
    Fused { ssm_ba: Linear },
}

#[derive(Debug, Clone)]
pub struct GatedDeltaNet {
    pub input: DeltaInput,
    pub gates: DeltaGates,
    /// `[channels, kernel]` depthwise convolution weights.
    pub ssm_conv1d: Array,
    /// `[v_heads]` bias of `alpha` (float32).
    pub ssm_dt: Array,
    /// `[v_heads]` decay scale, `-exp(A_log)` as the converter writes it (float32).
    pub ssm_a: Array,
    /// RMSNorm over each value head's output.
    pub ssm_norm: RmsNorm,
    pub ssm_out: Linear,
    pub k_heads: i32,
    pub v_heads: i32,
    pub k_dim: i32,
    pub v_dim: i32,
    pub kernel: i32,
    pub head_map: HeadMap,
    /// The epsilon of the L2 norms of queries and keys.
    pub eps: f32,
    /// Gate the normed output by `sigmoid(z)` (Qwen4 experimental), not `silu(z)`.
    pub sigmoid_gate: bool,
}

pub(crate) fn slice_last(x: &Array, from: i32, to: i32) -> Result<Array> {
    let shape = x.shape();
    let mut start = vec![0; shape.len()];
    let mut stop = shape.to_vec();
    *start.last_mut().expect("rank >= 1") = from;
    *stop.last_mut().expect("rank >= 1") = to;
    Ok(gmlx_mlx::slicing::slice(x, &start, &stop)?)
}

/// `x / sqrt(sum(x²) + eps)` over the last axis (llama.cpp's gated-DeltaNet L2 norm).
pub(crate) fn l2_norm(x: &Array, eps: f32) -> Result<Array> {
    let sum = x.square()?.sum_axis(-1, true)?;
    Ok(x.multiply(sum.add(Array::from_f32(eps))?.rsqrt()?)?)
}

/// `log(1 + exp(x))`, exact for large `x`.
pub(crate) fn softplus(x: &Array) -> Result<Array> {
    Ok(ops::logaddexp(x, Array::from_f32(0.0))?)
}

impl GatedDeltaNet {
    fn channels(&self) -> i32 {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }

    /// The convolution's input `[batch, tokens, channels]` (queries, keys, values of all
    /// heads, in that order) and the output gate `z [batch, tokens, v_heads·v_dim]`.
    fn qkv_z(&self, x: &Array) -> Result<(Array, Array)> {
        match &self.input {
            DeltaInput::Split {
                attn_qkv,
                attn_gate,
            } => Ok((attn_qkv.forward(x)?, attn_gate.forward(x)?)),
            DeltaInput::Fused { ssm_in } => {
                let (batch, tokens) = (x.shape()[0], x.shape()[1]);
                let values = self.v_heads / self.k_heads * self.v_dim;
                let per_head = 2 * self.k_dim + 2 * values;
                let y = ssm_in
                    .forward(x)?
                    .reshape(&[batch, tokens, self.k_heads, per_head])?;
                let part = |from: i32, width: i32| -> Result<Array> {
                    Ok(slice_last(&y, from, from + width)?.reshape(&[
                        batch,
                        tokens,
                        self.k_heads * width,
                    ])?)
                };
                let k = self.k_dim;
                let qkv = ops::concatenate(&[part(0, k)?, part(k, k)?, part(2 * k, values)?], 2)?;
                Ok((qkv, part(2 * k + values, values)?))
            }
        }
    }

    /// `beta` (after its sigmoid) and the raw `alpha`, each `[batch, tokens, v_heads]`.
    fn beta_alpha(&self, x: &Array) -> Result<(Array, Array)> {
        let (batch, tokens) = (x.shape()[0], x.shape()[1]);
        let (b, a) = match &self.gates {
            DeltaGates::Split {
                ssm_beta,
                ssm_alpha,
            } => (ssm_beta.forward_gate(x)?, ssm_alpha.forward_gate(x)?),
            DeltaGates::Fused { ssm_ba } => {
                let per_k = self.v_heads / self.k_heads;
                let ba =
                    ssm_ba
                        .forward_gate(x)?
                        .reshape(&[batch, tokens, self.k_heads, 2 * per_k])?;
                let flat = |y: Array| y.reshape(&[batch, tokens, self.v_heads]);
                (
                    flat(slice_last(&ba, 0, per_k)?)?,
                    flat(slice_last(&ba, per_k, 2 * per_k)?)?,
                )
            }
        };
        Ok((ops::sigmoid(&b)?, a))
    }

    /// Queries or keys `[batch, tokens, k_heads, k_dim]` spread over the value heads.
    fn to_value_heads(&self, x: &Array) -> Result<Array> {
        let per_k = self.v_heads / self.k_heads;
        if per_k == 1 {
            return Ok(x.clone());
        }
        let s = x.shape();
        Ok(match self.head_map {
            HeadMap::Tiled => ops::concatenate(&vec![x.clone(); per_k as usize], 2)?,
            HeadMap::Grouped => {
                ops::broadcast_to(x.expand_dims(3)?, &[s[0], s[1], s[2], per_k, s[3]])?
                    .reshape(&[s[0], s[1], self.v_heads, s[3]])?
            }
        })
    }

    /// `x [batch, tokens, hidden]` of block `layer`; in a cached pass each row continues its
    /// own recurrent state.
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        let (batch, tokens) = (x.shape()[0], x.shape()[1]);
        let dtype = x.dtype();
        let channels = self.channels();
        let (history, state) = load_states(
            layer,
            batch,
            ctx,
            [self.kernel - 1, channels],
            [self.v_heads, self.k_dim, self.v_dim],
            dtype,
        )?;

        let (qkv, z) = self.qkv_z(x)?;
        let (beta, alpha) = self.beta_alpha(x)?;
        let (mixed, history) = causal_conv_silu(&qkv, &history, &self.ssm_conv1d, self.kernel)?;
        let key_width = self.k_heads * self.k_dim;
        let heads = |from: i32, n: i32, dim: i32| -> Result<Array> {
            Ok(slice_last(&mixed, from, from + n * dim)?.reshape(&[batch, tokens, n, dim])?)
        };
        let q = l2_norm(&heads(0, self.k_heads, self.k_dim)?, self.eps)?;
        let k = l2_norm(&heads(key_width, self.k_heads, self.k_dim)?, self.eps)?;
        let v = heads(2 * key_width, self.v_heads, self.v_dim)?;
        debug_assert_eq!(mixed.shape()[2], channels);

        let f32_heads = |x: Array| -> Result<Array> {
            Ok(x.as_dtype(Dtype::Float32)?.transpose_axes(&[0, 2, 1, 3])?)
        };
        let per_token = |x: Array| -> Result<Array> {
            Ok(x.as_dtype(Dtype::Float32)?.transpose_axes(&[0, 2, 1])?)
        };
        let alpha = alpha.as_dtype(Dtype::Float32)?.add(&self.ssm_dt)?;
        let g = softplus(&alpha)?.multiply(&self.ssm_a)?;
        let input = ScanInput {
            q: f32_heads(self.to_value_heads(&q)?)?,
            k: f32_heads(self.to_value_heads(&k)?)?,
            v: f32_heads(v)?,
            g: per_token(g)?,
            beta: per_token(beta)?,
        };
        let (out, state) = delta_rule::scan(&input, &state)?;
        store_states(layer, ctx, &history, &state)?;

        // [batch, heads, tokens, v_dim] -> per head: norm, gate, then the output projection
        // float32 through the norm and gate, as llama.cpp
        let out = out.transpose_axes(&[0, 2, 1, 3])?;
        let z = z
            .as_dtype(Dtype::Float32)?
            .reshape(&[batch, tokens, self.v_heads, self.v_dim])?;
        let gate = if self.sigmoid_gate {
            ops::sigmoid(&z)?
        } else {
            z.multiply(ops::sigmoid(&z)?)?
        };
        let gated = self
            .ssm_norm
            .forward(&out)?
            .multiply(&gate)?
            .as_dtype(dtype)?;
        self.ssm_out
            .forward(&gated.reshape(&[batch, tokens, self.v_heads * self.v_dim])?)
    }

    /// Its weights: the projections (adaptable), then the convolution, decay and norm.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        match &self.input {
            DeltaInput::Split {
                attn_qkv,
                attn_gate,
            } => {
                v.linear(attn_qkv);
                v.linear(attn_gate);
            }
            DeltaInput::Fused { ssm_in } => v.linear(ssm_in),
        }
        match &self.gates {
            DeltaGates::Split {
                ssm_beta,
                ssm_alpha,
            } => {
                v.linear(ssm_beta);
                v.linear(ssm_alpha);
            }
            DeltaGates::Fused { ssm_ba } => v.linear(ssm_ba),
        }
        for a in [
            &self.ssm_conv1d,
            &self.ssm_dt,
            &self.ssm_a,
            &self.ssm_norm.weight,
        ] {
            v.array(a);
        }
        v.linear(&self.ssm_out);
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        match &mut self.input {
            DeltaInput::Split {
                attn_qkv,
                attn_gate,
            } => {
                v.linear(attn_qkv);
                v.linear(attn_gate);
            }
            DeltaInput::Fused { ssm_in } => v.linear(ssm_in),
        }
        match &mut self.gates {
            DeltaGates::Split {
                ssm_beta,
                ssm_alpha,
            } => {
                v.linear(ssm_beta);
                v.linear(ssm_alpha);
            }
            DeltaGates::Fused { ssm_ba } => v.linear(ssm_ba),
        }
        v.linear(&mut self.ssm_out);
    }
}

/// The causal depthwise convolution with SiLU over `x [batch, tokens, channels]` after
/// `history [batch, kernel - 1, channels]`, with `weights [channels, kernel]`; returns the
/// output and the new history.
pub(crate) fn causal_conv_silu(
    x: &Array,
    history: &Array,
    weights: &Array,
    kernel: i32,
) -> Result<(Array, Array)> {
    let tokens = x.shape()[1];
    let joined = ops::concatenate(&[history.clone(), x.clone()], 1)?;
    let (batch, len, channels) = (joined.shape()[0], joined.shape()[1], joined.shape()[2]);
    let mut sum: Option<Array> = None;
    for j in 0..kernel {
        let window = gmlx_mlx::slicing::slice(&joined, &[0, j, 0], &[batch, j + tokens, channels])?;
        let tap = slice_last(weights, j, j + 1)?.reshape(&[channels])?;
        let term = window.multiply(&tap)?;
        sum = Some(match sum {
            Some(s) => s.add(&term)?,
            None => term,
        });
    }
    let conv = sum.expect("kernel >= 1");
    let history = gmlx_mlx::slicing::slice(
        &joined,
        &[0, len - (kernel - 1), 0],
        &[batch, len, channels],
    )?;
    Ok((conv.multiply(ops::sigmoid(&conv)?)?, history))
}

/// The rows' convolution histories `[batch, history...]` and float32 delta states `[batch,
/// state...]`, stacked (zeros where a row has none yet, and for a pass without caches).
pub(crate) fn load_states(
    layer: usize,
    batch: i32,
    ctx: &mut ForwardCtx<'_, '_>,
    history: [i32; 2],
    state: [i32; 3],
    dtype: Dtype,
) -> Result<(Array, Array)> {
    let empty_history = || ops::zeros_dtype(&[1, history[0], history[1]], dtype);
    let empty_state = || ops::zeros_dtype(&[1, state[0], state[1], state[2]], Dtype::Float32);
    let mut histories = Vec::with_capacity(batch as usize);
    let mut states = Vec::with_capacity(batch as usize);
    for row in 0..batch as usize {
        let saved = if ctx.is_cached() {
            let cache = recurrent_cache(ctx.layer_cache(row, layer), layer)?;
            (cache.conv.clone(), cache.state.clone())
        } else {
            (None, None)
        };
        histories.push(match saved.0 {
            Some(h) => h.as_dtype(dtype)?,
            None => empty_history()?,
        });
        states.push(match saved.1 {
            Some(s) => s,
            None => empty_state()?,
        });
    }
    let stack = |mut xs: Vec<Array>| -> Result<Array> {
        Ok(if xs.len() == 1 {
            xs.remove(0)
        } else {
            ops::concatenate(&xs, 0)?
        })
    };
    Ok((stack(histories)?, stack(states)?))
}

/// Keeps each row's new history and state in its cache (nothing without caches).
pub(crate) fn store_states(
    layer: usize,
    ctx: &mut ForwardCtx<'_, '_>,
    history: &Array,
    state: &Array,
) -> Result<()> {
    if !ctx.is_cached() {
        return Ok(());
    }
    let batch = history.shape()[0];
    let row_of = |a: &Array, b: i32| -> Result<Array> {
        if batch == 1 {
            return Ok(a.clone());
        }
        let mut start = vec![0; a.ndim()];
        let mut stop = a.shape().to_vec();
        start[0] = b;
        stop[0] = b + 1;
        Ok(gmlx_mlx::slicing::slice(a, &start, &stop)?)
    };
    for b in 0..batch {
        let cache = recurrent_cache(ctx.layer_cache(b as usize, layer), layer)?;
        cache.conv = Some(row_of(history, b)?);
        cache.state = Some(row_of(state, b)?);
    }
    Ok(())
}

/// The recurrent state in a layer's cache.
fn recurrent_cache(cache: Option<&mut LayerCache>, layer: usize) -> Result<&mut Recurrent> {
    match cache {
        Some(LayerCache::Recurrent(r)) => Ok(r),
        _ => Err(Error::CacheMismatch { layer }),
    }
}
