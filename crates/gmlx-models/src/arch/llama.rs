//! `llama`: pre-norm decoder, RMSNorm, rotary positions in llama.cpp's NORM layout (adjacent
//! pairs; the converter permutes Q and K for it), grouped-query attention, SwiGLU, and an
//! output head that may be tied to the token embedding.
use gmlx_gguf::GgufFile;

use crate::config::{self, ModelConfig};
use crate::error::Result;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    config::synth_decoder(file, true)
}
