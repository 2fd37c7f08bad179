//! `llama`: pre-norm decoder, RMSNorm, rotary positions in llama.cpp's NORM layout (adjacent
//! pairs; the converter permutes Q and K for it), grouped-query attention, SwiGLU, and an
//! output head that may be tied to the token embedding.
use gmlx_gguf::names::Tensor;
use gmlx_gguf::GgufFile;
use gmlx_mlx::Dtype;

use crate::blocks::attention::Attention;
use crate::blocks::decoder::{Decoder, DecoderLayer, Ffn};
use crate::blocks::mlp::SwiGlu;
use crate::blocks::rope::Rope;
use crate::config::{self, ModelConfig};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::weights::Weights;

/// Per-layer tensors, besides `token_embd`, `output_norm` and the optional `output`.
pub const TENSORS: &[Tensor] = &[
    Tensor::AttnNorm,
    Tensor::AttnQ,
    Tensor::AttnK,
    Tensor::AttnV,
    Tensor::AttnOutput,
    Tensor::FfnNorm,
    Tensor::FfnGate,
    Tensor::FfnUp,
    Tensor::FfnDown,
];

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    config::synth_decoder(file, true)
}

pub fn build(file: &GgufFile, dtype: Dtype) -> Result<Model> {
    build_decoder(file, dtype, synth(file)?, false, dense_ffn)
}

/// The SwiGLU MLP of layer `l`.
pub fn dense_ffn(w: &Weights<'_>, c: &ModelConfig, l: usize) -> Result<Ffn> {
    if c.ffn_hidden <= 0 {
        return Err(Error::BadConfig {
            key: format!("{}.feed_forward_length", c.arch),
            reason: "missing for a dense feed-forward".into(),
        });
    }
    Ok(Ffn::Dense(SwiGlu {
        ffn_gate: w
            .matrix(&Tensor::FfnGate.weight(l), c.ffn_hidden, c.hidden)?
            .into(),
        ffn_up: w
            .matrix(&Tensor::FfnUp.weight(l), c.ffn_hidden, c.hidden)?
            .into(),
        ffn_down: w
            .matrix(&Tensor::FfnDown.weight(l), c.hidden, c.ffn_hidden)?
            .into(),
    }))
}

/// The pre-norm decoder of the llama family. `qk_norm` adds Qwen3's per-head RMSNorm of
/// queries and keys; `ffn` builds each layer's feed-forward (dense or MoE).
pub fn build_decoder(
    file: &GgufFile,
    dtype: Dtype,
    c: ModelConfig,
    qk_norm: bool,
    ffn: fn(&Weights<'_>, &ModelConfig, usize) -> Result<Ffn>,
) -> Result<Model> {
    let w = Weights { file, dtype };
    let (q_out, kv_out) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    let rope = Rope::new(&c.rope);
    let head_norm = |t: Tensor, l: usize| {
        qk_norm
            .then(|| w.rms_norm(&t.weight(l), c.head_dim, c.rms_eps))
            .transpose()
    };
    let layers = (0..c.n_layers)
        .map(|l| -> Result<DecoderLayer> {
            Ok(DecoderLayer {
                attn_norm: w.rms_norm(&Tensor::AttnNorm.weight(l), c.hidden, c.rms_eps)?,
                attention: Attention {
                    attn_q: w.matrix(&Tensor::AttnQ.weight(l), q_out, c.hidden)?.into(),
                    attn_k: w.matrix(&Tensor::AttnK.weight(l), kv_out, c.hidden)?.into(),
                    attn_v: w.matrix(&Tensor::AttnV.weight(l), kv_out, c.hidden)?.into(),
                    attn_output: w
                        .matrix(&Tensor::AttnOutput.weight(l), c.hidden, q_out)?
                        .into(),
                    attn_q_norm: head_norm(Tensor::AttnQNorm, l)?,
                    attn_k_norm: head_norm(Tensor::AttnKNorm, l)?,
                    n_heads: c.n_heads,
                    n_kv_heads: c.n_kv_heads,
                    head_dim: c.head_dim,
                    rope: rope.clone(),
                    sinks: None,
                    window: None,
                },
                ffn_norm: w.rms_norm(&Tensor::FfnNorm.weight(l), c.hidden, c.rms_eps)?,
                ffn: ffn(&w, &c, l)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let decoder = Decoder {
        token_embd: w.matrix(&Tensor::TokenEmbd.weight(0), c.vocab, c.hidden)?,
        layers,
        output_norm: w.rms_norm(&Tensor::OutputNorm.weight(0), c.hidden, c.rms_eps)?,
        output: w.optional_matrix(&Tensor::Output.weight(0), c.vocab, c.hidden)?,
        dtype,
    };
    Ok(Model::new(c, decoder))
}
