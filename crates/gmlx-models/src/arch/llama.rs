//! `llama`: pre-norm decoder, RMSNorm, rotary positions in llama.cpp's NORM layout (adjacent
//! pairs; the converter permutes Q and K for it), grouped-query attention, SwiGLU, and an
//! output head that may be tied to the token embedding.
use gmlx_gguf::names::Tensor;
use gmlx_gguf::GgufFile;
use gmlx_mlx::Dtype;

use crate::blocks::attention::Attention;
use crate::blocks::decoder::{Decoder, DecoderLayer};
use crate::blocks::mlp::SwiGlu;
use crate::blocks::rope::Rope;
use crate::config::{self, ModelConfig};
use crate::error::Result;
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
    let c = synth(file)?;
    let w = Weights { file, dtype };
    let (q_out, kv_out) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    let rope = Rope::new(&c.rope);
    let layers = (0..c.n_layers)
        .map(|l| -> Result<DecoderLayer> {
            Ok(DecoderLayer {
                attn_norm: w.rms_norm(&Tensor::AttnNorm.weight(l), c.hidden, c.rms_eps)?,
                attention: Attention {
                    attn_q: w.matrix(&Tensor::AttnQ.weight(l), q_out, c.hidden)?,
                    attn_k: w.matrix(&Tensor::AttnK.weight(l), kv_out, c.hidden)?,
                    attn_v: w.matrix(&Tensor::AttnV.weight(l), kv_out, c.hidden)?,
                    attn_output: w.matrix(&Tensor::AttnOutput.weight(l), c.hidden, q_out)?,
                    n_heads: c.n_heads,
                    n_kv_heads: c.n_kv_heads,
                    head_dim: c.head_dim,
                    rope: rope.clone(),
                },
                ffn_norm: w.rms_norm(&Tensor::FfnNorm.weight(l), c.hidden, c.rms_eps)?,
                mlp: SwiGlu {
                    ffn_gate: w.matrix(&Tensor::FfnGate.weight(l), c.ffn_hidden, c.hidden)?,
                    ffn_up: w.matrix(&Tensor::FfnUp.weight(l), c.ffn_hidden, c.hidden)?,
                    ffn_down: w.matrix(&Tensor::FfnDown.weight(l), c.hidden, c.ffn_hidden)?,
                },
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
