//! `qwen3moe`: Qwen3's attention (per-head Q/K norms, NEOX rotary) with a routed MoE in every
//! block: softmax router, top-k experts, weights renormalised over the selected experts (as
//! llama.cpp does for this architecture), SwiGLU experts.
use gmlx_gguf::GgufFile;

use crate::arch::qwen3;
use crate::config::{self, FfnSpec, ModelConfig};
use crate::error::Result;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let mut c = qwen3::synth(file)?;
    c.set_ffn(FfnSpec::Moe(config::synth_moe(file)?));
    Ok(c)
}
