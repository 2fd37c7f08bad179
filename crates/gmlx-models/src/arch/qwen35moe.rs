//! `qwen35moe` (Qwen3.5 / Qwen3.6 MoE): the `qwen35` hybrid decoder with a routed MoE in every
//! block (softmax router, top-k, renormalised) plus a shared expert scaled by a sigmoid gate.
use gmlx_gguf::GgufFile;

use crate::arch::qwen35;
use crate::config::{self, FfnSpec, ModelConfig};
use crate::error::Result;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let mut c = qwen35::synth(file)?;
    c.set_ffn(FfnSpec::Moe(config::synth_moe_with_gated_shared_expert(
        file,
    )?));
    Ok(c)
}
