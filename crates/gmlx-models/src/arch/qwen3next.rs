//! `qwen3next` (Qwen3-Next): the hybrid decoder of `qwen35moe` with partial NEOX rotary
//! (no sections), `beta` and `alpha` fused in one projection (`ssm_ba`), and value heads
//! grouped by key head (value head `h` reads key head `h / (v_heads / k_heads)`). Files
//! converted before llama.cpp split the DeltaNet's input projection hold it fused as `ssm_in`.
use gmlx_gguf::names::Tensor;
use gmlx_gguf::GgufFile;

use crate::arch::qwen35;
use crate::config::{self, FfnSpec, HeadMap, MixerSpec, ModelConfig};
use crate::error::Result;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let mut c = qwen35::hybrid(file, HeadMap::Grouped)?;
    for (l, layer) in c.layers.iter_mut().enumerate() {
        if let MixerSpec::GatedDeltaNet(d) = &mut layer.mixer {
            d.fused_gates = true;
            // files converted before llama.cpp split the input projection
            d.fused_input = file.has_tensor(&Tensor::SsmIn.weight(l));
        }
    }
    c.set_ffn(FfnSpec::Moe(config::synth_moe_with_gated_shared_expert(
        file,
    )?));
    Ok(c)
}
