//! KDA (Kimi delta attention), the linear-attention mixer of Kimi-K3 and GLM-5-Next: separate
//! causal depthwise convolutions (with SiLU) over the projected queries, keys and values,
//! L2-normed queries and keys, the delta rule (blocks::delta_rule) with a decay per key
//! channel from a low-rank projection, and a per-head RMSNorm of the output gated by a sigmoid.
//!
//! The decay `g` of each channel, from `f = f_b(f_a(x)) + dt_bias` and `a = -exp(A_log)` (as
//! the converter stores `ssm_a`): with a lower bound `lb` (Kimi-K3), `g = lb · sigmoid(-a · f)`;
//! without one (Kimi-Linear), `g = a · softplus(f)`.
use gmlx_mlx::{ops, Array, Dtype};

use crate::blocks::context::ForwardCtx;
use crate::blocks::delta_net::{
    causal_conv_silu, l2_norm, load_states, slice_last, softplus, store_states,
};
use crate::blocks::delta_rule::{self, ScanInput};
use crate::blocks::linear::Linear;
use crate::blocks::norm::RmsNorm;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};
use crate::error::Result;

/// The output gate's projection.
#[derive(Debug, Clone)]
pub enum KdaGate {
    /// `ssm_g`, `[inner, hidden]` (Kimi-K3).
    Full { ssm_g: Linear },
    /// `ssm_g_b(ssm_g_a(x))` through `head_dim` (Kimi-Linear, GLM-5-Next).
    LowRank { ssm_g_a: Linear, ssm_g_b: Linear },
}

#[derive(Debug, Clone)]
pub struct Kda {
    /// `[inner, hidden]` each, `inner = heads · head_dim`.
    pub attn_q: Linear,
    pub attn_k: Linear,
    pub attn_v: Linear,
    /// `[3 · inner, kernel]`: the query, key and value convolutions' taps, in that order.
    pub ssm_conv1d: Array,
    /// The decay's low-rank projection: `[head_dim, hidden]`, then `[inner, head_dim]`.
    pub ssm_f_a: Linear,
    pub ssm_f_b: Linear,
    /// `[inner]` float32, added before the decay's activation.
    pub ssm_dt: Array,
    /// `[heads]` float32: `-exp(A_log)`.
    pub ssm_a: Array,
    /// `[heads, hidden]`: the write strength, through a sigmoid.
    pub ssm_beta: Linear,
    pub gate: KdaGate,
    /// Over each head's `head_dim` outputs.
    pub ssm_norm: RmsNorm,
    pub attn_output: Linear,
    pub heads: i32,
    pub head_dim: i32,
    pub kernel: i32,
    /// `kda.gate_lower_bound`, when the file sets one.
    pub lower_bound: Option<f32>,
    /// The epsilon of the L2 norms of queries and keys.
    pub eps: f32,
}

impl Kda {
    fn inner(&self) -> i32 {
        self.heads * self.head_dim
    }

    /// The log decay `[batch, tokens, heads, head_dim]` (float32) of `x`.
    fn decay(&self, x: &Array) -> Result<Array> {
        let s = x.shape();
        let f = self
            .ssm_f_b
            .forward(&self.ssm_f_a.forward(x)?)?
            .as_dtype(Dtype::Float32)?
            .add(&self.ssm_dt)?
            .reshape(&[s[0], s[1], self.heads, self.head_dim])?;
        let a = self.ssm_a.reshape(&[self.heads, 1])?;
        Ok(match self.lower_bound {
            Some(bound) => {
                ops::sigmoid(&f.multiply(&a)?.negative()?)?.multiply(Array::from_f32(bound))?
            }
            None => softplus(&f)?.multiply(&a)?,
        })
    }

    fn output_gate(&self, x: &Array) -> Result<Array> {
        match &self.gate {
            KdaGate::Full { ssm_g } => ssm_g.forward(x),
            KdaGate::LowRank { ssm_g_a, ssm_g_b } => ssm_g_b.forward(&ssm_g_a.forward(x)?),
        }
    }

    /// `x [batch, tokens, hidden]` of block `layer`; in a cached pass each row continues its
    /// own convolution histories and state.
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        let (batch, tokens) = (x.shape()[0], x.shape()[1]);
        let dtype = x.dtype();
        let inner = self.inner();
        let (history, state) = load_states(
            layer,
            batch,
            ctx,
            [self.kernel - 1, 3 * inner],
            [self.heads, self.head_dim, self.head_dim],
            dtype,
        )?;
        let qkv = ops::concatenate(
            &[
                self.attn_q.forward(x)?,
                self.attn_k.forward(x)?,
                self.attn_v.forward(x)?,
            ],
            2,
        )?;
        let (mixed, history) = causal_conv_silu(&qkv, &history, &self.ssm_conv1d, self.kernel)?;
        let heads = |part: i32| -> Result<Array> {
            Ok(
                slice_last(&mixed, part * inner, (part + 1) * inner)?.reshape(&[
                    batch,
                    tokens,
                    self.heads,
                    self.head_dim,
                ])?,
            )
        };
        let to_scan = |x: Array| -> Result<Array> {
            Ok(x.as_dtype(Dtype::Float32)?.transpose_axes(&[0, 2, 1, 3])?)
        };
        let beta = ops::sigmoid(&self.ssm_beta.forward_gate(x)?.as_dtype(Dtype::Float32)?)?;
        let input = ScanInput {
            q: to_scan(l2_norm(&heads(0)?, self.eps)?)?,
            k: to_scan(l2_norm(&heads(1)?, self.eps)?)?,
            v: to_scan(heads(2)?)?,
            g: to_scan(self.decay(x)?)?,
            beta: beta.transpose_axes(&[0, 2, 1])?,
        };
        let (out, state) = delta_rule::scan(&input, &state)?;
        store_states(layer, ctx, &history, &state)?;

        // [batch, heads, tokens, head_dim] -> per head: norm, gate (float32), projection
        let out = out.transpose_axes(&[0, 2, 1, 3])?;
        let gate = self.output_gate(x)?.as_dtype(Dtype::Float32)?.reshape(&[
            batch,
            tokens,
            self.heads,
            self.head_dim,
        ])?;
        let gated = self
            .ssm_norm
            .forward(&out)?
            .multiply(ops::sigmoid(&gate)?)?
            .as_dtype(dtype)?;
        self.attn_output
            .forward(&gated.reshape(&[batch, tokens, inner])?)
    }

    /// Its weights in GGUF tensor order; the projections are adapter targets.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        for l in [&self.attn_q, &self.attn_k, &self.attn_v] {
            v.linear(l);
        }
        v.array(&self.ssm_conv1d);
        v.linear(&self.ssm_f_a);
        v.linear(&self.ssm_f_b);
        v.linear(&self.ssm_beta);
        v.array(&self.ssm_a);
        v.array(&self.ssm_dt);
        match &self.gate {
            KdaGate::Full { ssm_g } => v.linear(ssm_g),
            KdaGate::LowRank { ssm_g_a, ssm_g_b } => {
                v.linear(ssm_g_a);
                v.linear(ssm_g_b);
            }
        }
        v.array(&self.ssm_norm.weight);
        v.linear(&self.attn_output);
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        v.linear(&mut self.attn_q);
        v.linear(&mut self.attn_k);
        v.linear(&mut self.attn_v);
        v.linear(&mut self.ssm_f_a);
        v.linear(&mut self.ssm_f_b);
        v.linear(&mut self.ssm_beta);
        match &mut self.gate {
            KdaGate::Full { ssm_g } => v.linear(ssm_g),
            KdaGate::LowRank { ssm_g_a, ssm_g_b } => {
                v.linear(ssm_g_a);
                v.linear(ssm_g_b);
            }
        }
        v.linear(&mut self.attn_output);
    }
}
