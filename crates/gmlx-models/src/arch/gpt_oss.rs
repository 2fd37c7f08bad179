//! `gpt-oss`: pre-norm decoder whose attention has biases, per-head sinks, and sliding-window
//! layers alternating with full ones (YaRN rotary, NEOX layout); every block's feed-forward is
//! an MoE with a biased router (softmax over the selected experts), biased experts (MXFP4 in
//! published files) and a clamped SwiGLU. The feed-forward norm is `post_attention_norm`.
use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::GgufFile;
use gmlx_mlx::Dtype;

use crate::blocks::attention::Attention;
use crate::blocks::decoder::{Decoder, DecoderLayer, Ffn};
use crate::blocks::linear::Linear;
use crate::blocks::moe::{ExpertActivation, Experts, Gating, MoeFfn, Router};
use crate::blocks::rope::Rope;
use crate::config::{self, ModelConfig};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::weights::Weights;

/// Per-layer tensors (weights; the attention projections, router and experts also have
/// `.bias` tensors).
pub const TENSORS: &[Tensor] = &[
    Tensor::AttnNorm,
    Tensor::AttnQ,
    Tensor::AttnK,
    Tensor::AttnV,
    Tensor::AttnOutput,
    Tensor::AttnSinks,
    Tensor::AttnPostNorm,
    Tensor::FfnGateInp,
    Tensor::FfnGateExps,
    Tensor::FfnUpExps,
    Tensor::FfnDownExps,
];

/// The clamped SwiGLU of gpt-oss (fixed in llama.cpp, not in the metadata).
const SWIGLU_ALPHA: f32 = 1.702;
const SWIGLU_LIMIT: f32 = 7.0;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let mut c = config::synth_decoder(file, false)?;
    c.moe = Some(config::synth_moe(file)?);
    Ok(c)
}

/// Which layers use the sliding window: the `sliding_window_pattern` array when the file has
/// one, else every layer but the last of each period (period 2 by default: even layers).
fn sliding_layers(file: &GgufFile, n_layers: usize) -> Result<Vec<bool>> {
    let meta = file.metadata();
    if let Ok(flags) = meta.get_array(&Kv::AttentionSlidingWindowPattern) {
        let values: Vec<bool> = (0..flags.len())
            .map(|i| match flags.get(i) {
                Some(gmlx_gguf::Value::Bool(b)) => b,
                Some(v) => v.as_integer().is_some_and(|n| n != 0),
                None => false,
            })
            .collect();
        if values.len() >= n_layers {
            return Ok(values[..n_layers].to_vec());
        }
    }
    let period = meta
        .opt_u32(&Kv::AttentionSlidingWindowPattern)?
        .unwrap_or(2) as usize;
    Ok((0..n_layers)
        .map(|l| period == 0 || l % period < period - 1)
        .collect())
}

fn linear(w: &Weights<'_>, t: Tensor, l: usize, rows: i32, cols: i32) -> Result<Linear> {
    Ok(Linear {
        weight: w.matrix(&t.weight(l), rows, cols)?,
        bias: Some(w.array(&t.bias(l), &[rows as u64])?),
        lora: None,
    })
}

pub fn build(file: &GgufFile, dtype: Dtype) -> Result<Model> {
    let c = synth(file)?;
    let m = c.moe.clone().ok_or_else(|| Error::BadConfig {
        key: "gpt-oss.expert_count".into(),
        reason: "missing".into(),
    })?;
    let window = file.get_u32(&Kv::AttentionSlidingWindow)? as i32;
    let sliding = sliding_layers(file, c.n_layers)?;
    let w = Weights { file, dtype };
    let (q_out, kv_out) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    let rope = Rope::new(&c.rope);
    let (e, ff, h) = (m.experts, m.expert_ffn, c.hidden);
    let layers = (0..c.n_layers)
        .map(|l| -> Result<DecoderLayer> {
            Ok(DecoderLayer {
                attn_norm: w.rms_norm(&Tensor::AttnNorm.weight(l), h, c.rms_eps)?,
                attention: Attention {
                    attn_q: linear(&w, Tensor::AttnQ, l, q_out, h)?,
                    attn_k: linear(&w, Tensor::AttnK, l, kv_out, h)?,
                    attn_v: linear(&w, Tensor::AttnV, l, kv_out, h)?,
                    attn_output: linear(&w, Tensor::AttnOutput, l, h, q_out)?,
                    attn_q_norm: None,
                    attn_k_norm: None,
                    n_heads: c.n_heads,
                    n_kv_heads: c.n_kv_heads,
                    head_dim: c.head_dim,
                    rope: rope.clone(),
                    sinks: Some(
                        w.array(&Tensor::AttnSinks.weight(l), &[c.n_heads as u64])?
                            .as_dtype(Dtype::Float32)?,
                    ),
                    window: sliding[l].then_some(window),
                },
                ffn_norm: w.rms_norm(&Tensor::AttnPostNorm.weight(l), h, c.rms_eps)?,
                ffn: Ffn::Moe(Box::new(MoeFfn {
                    router: Router {
                        ffn_gate_inp: linear(&w, Tensor::FfnGateInp, l, e, h)?,
                        gating: Gating::SoftmaxSelected,
                        selection_bias: None,
                        top_k: m.experts_used,
                        normalize: false,
                        scale: m.weights_scale,
                    },
                    experts: Experts {
                        ffn_gate_exps: w.experts(&Tensor::FfnGateExps.weight(l), e, ff, h)?,
                        ffn_up_exps: w.experts(&Tensor::FfnUpExps.weight(l), e, ff, h)?,
                        ffn_down_exps: w.experts(&Tensor::FfnDownExps.weight(l), e, h, ff)?,
                        ffn_gate_exps_b: Some(
                            w.array(&Tensor::FfnGateExps.bias(l), &[ff as u64, e as u64])?,
                        ),
                        ffn_up_exps_b: Some(
                            w.array(&Tensor::FfnUpExps.bias(l), &[ff as u64, e as u64])?,
                        ),
                        ffn_down_exps_b: Some(
                            w.array(&Tensor::FfnDownExps.bias(l), &[h as u64, e as u64])?,
                        ),
                        activation: ExpertActivation::SwiGluOai {
                            alpha: SWIGLU_ALPHA,
                            limit: SWIGLU_LIMIT,
                        },
                    },
                    shared: None,
                })),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let decoder = Decoder {
        token_embd: w.matrix(&Tensor::TokenEmbd.weight(0), c.vocab, h)?,
        layers,
        output_norm: w.rms_norm(&Tensor::OutputNorm.weight(0), h, c.rms_eps)?,
        output: Some(w.matrix(&Tensor::Output.weight(0), c.vocab, h)?),
        dtype,
    };
    Ok(Model::new(c, decoder))
}
