//! `qwen3`: the llama decoder with per-head RMSNorm of queries and keys before rotation, and
//! rotary positions in the NEOX layout (the two halves of each head rotate together).
use gmlx_gguf::GgufFile;

use crate::config::{self, ModelConfig};
use crate::error::Result;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let mut c = config::synth_decoder(file, false)?;
    c.set_attention(|_, a| a.qk_norm = true);
    Ok(c)
}
