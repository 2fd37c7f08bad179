//! `gpt-oss`: pre-norm decoder whose attention has biases, per-head sinks, and sliding-window
//! layers alternating with full ones (YaRN rotary, NEOX layout); every block's feed-forward is
//! an MoE with a biased router (softmax over the selected experts), biased experts (MXFP4 in
//! published files) and a clamped SwiGLU. The feed-forward norm is `post_attention_norm`.
use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::GgufFile;

use crate::config::{self, ExpertActivation, FfnSpec, Gating, ModelConfig};
use crate::error::Result;

/// The clamped SwiGLU of gpt-oss (fixed in llama.cpp, not in the metadata).
const SWIGLU_ALPHA: f32 = 1.702;
const SWIGLU_LIMIT: f32 = 7.0;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let mut c = config::synth_decoder(file, false)?;
    let window = file.get_u32(&Kv::AttentionSlidingWindow)? as i32;
    let sliding = sliding_layers(file, c.n_layers)?;
    c.set_attention(|l, a| {
        a.window = sliding[l].then_some(window);
        a.sinks = true;
        a.bias = true;
    });
    let mut moe = config::synth_moe(file)?;
    moe.gating = Gating::SoftmaxSelected;
    moe.normalize = false;
    moe.activation = ExpertActivation::SwiGluOai {
        alpha: SWIGLU_ALPHA,
        limit: SWIGLU_LIMIT,
    };
    moe.biases = true;
    c.set_ffn(FfnSpec::Moe(moe));
    for layer in &mut c.layers {
        layer.ffn_norm = Tensor::AttnPostNorm;
    }
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
