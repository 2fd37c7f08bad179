//! `qwen3`: the llama decoder with per-head RMSNorm of queries and keys before rotation, and
//! rotary positions in the NEOX layout (the two halves of each head rotate together).
use gmlx_gguf::names::Tensor;
use gmlx_gguf::GgufFile;
use gmlx_mlx::Dtype;

use crate::arch::llama;
use crate::config::{self, ModelConfig};
use crate::error::Result;
use crate::model::Model;

/// Per-layer tensors: llama's plus the two head norms.
pub const TENSORS: &[Tensor] = &[
    Tensor::AttnNorm,
    Tensor::AttnQ,
    Tensor::AttnK,
    Tensor::AttnV,
    Tensor::AttnQNorm,
    Tensor::AttnKNorm,
    Tensor::AttnOutput,
    Tensor::FfnNorm,
    Tensor::FfnGate,
    Tensor::FfnUp,
    Tensor::FfnDown,
];

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    config::synth_decoder(file, false)
}

pub fn build(file: &GgufFile, dtype: Dtype) -> Result<Model> {
    llama::build_decoder(file, dtype, synth(file)?, true, llama::dense_ffn)
}
