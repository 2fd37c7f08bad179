//! `qwen35` (Qwen3.5 / Qwen3.6 dense): a hybrid decoder. Most blocks mix with a gated
//! DeltaNet (linear attention with a recurrent state); every `full_attention_interval`-th
//! block (or the blocks `attention.recurrent_layers` marks false) uses softmax attention with
//! a sigmoid output gate interleaved with the queries per head, per-head Q/K norms and
//! partial interleaved multi-section rotary (IMROPE). The feed-forward norm is
//! `post_attention_norm`; multi-token-prediction blocks are skipped.
use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::GgufFile;

use super::{bad, count};
use crate::config::{self, DeltaNetSpec, HeadMap, MixerSpec, ModelConfig};
use crate::error::Result;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let mut c = hybrid(file, HeadMap::Tiled)?;
    let pairs = c
        .layers
        .iter()
        .find_map(|l| match &l.mixer {
            MixerSpec::Attention(a) => Some(a.rope.dims / 2),
            _ => None,
        })
        .unwrap_or(0);
    let sections = rope_sections(file, pairs)?;
    c.set_attention(|_, a| a.rope.sections = Some(sections));
    Ok(c)
}

/// What the three hybrid Qwen architectures share: the layer kinds, the DeltaNet shape, the
/// gated attention and the post-attention norm. `head_map` says which key head each value
/// head reads.
pub(crate) fn hybrid(file: &GgufFile, head_map: HeadMap) -> Result<ModelConfig> {
    let mut c = config::synth_decoder(file, false)?;
    let recurrent = recurrent_layers(file, c.n_layers)?;
    let delta = delta_net(file, head_map)?;
    for (layer, is_recurrent) in c.layers.iter_mut().zip(&recurrent) {
        if *is_recurrent {
            layer.mixer = MixerSpec::GatedDeltaNet(delta.clone());
        }
        layer.ffn_norm = Tensor::AttnPostNorm;
    }
    c.set_attention(|_, a| {
        a.qk_norm = true;
        a.output_gate = true;
    });
    Ok(c)
}

/// Which blocks are recurrent: `attention.recurrent_layers` when present, else all but every
/// `full_attention_interval`-th (4 by default), as llama.cpp decides.
fn recurrent_layers(file: &GgufFile, n_layers: usize) -> Result<Vec<bool>> {
    let meta = file.metadata();
    let key = meta.resolve(&Kv::AttentionRecurrentLayers)?;
    if meta.get(&key).is_some() {
        let flags = meta
            .get_array(&Kv::AttentionRecurrentLayers)
            .map_err(|_| bad(file, Kv::AttentionRecurrentLayers, "not an array".into()))?;
        if flags.len() < n_layers {
            return Err(bad(
                file,
                Kv::AttentionRecurrentLayers,
                format!("{} entries for {n_layers} blocks", flags.len()),
            ));
        }
        return Ok((0..n_layers)
            .map(|i| match flags.get(i) {
                Some(gmlx_gguf::Value::Bool(b)) => b,
                Some(v) => v.as_integer().is_some_and(|n| n != 0),
                None => false,
            })
            .collect());
    }
    let interval = meta.opt_u32(&Kv::FullAttentionInterval)?.unwrap_or(4) as usize;
    if interval == 0 {
        return Err(bad(
            file,
            Kv::FullAttentionInterval,
            "must be at least 1".into(),
        ));
    }
    Ok((0..n_layers).map(|i| (i + 1) % interval != 0).collect())
}

/// The DeltaNet shape from the `ssm.*` keys.
fn delta_net(file: &GgufFile, head_map: HeadMap) -> Result<DeltaNetSpec> {
    let kernel = count(file, Kv::SsmConvKernel)?;
    let k_dim = count(file, Kv::SsmStateSize)?;
    let k_heads = count(file, Kv::SsmGroupCount)?;
    let v_heads = count(file, Kv::SsmTimeStepRank)?;
    let inner = count(file, Kv::SsmInnerSize)?;
    if v_heads % k_heads != 0 {
        return Err(bad(
            file,
            Kv::SsmGroupCount,
            format!("{k_heads} key heads do not divide the {v_heads} value heads"),
        ));
    }
    // the widths the blocks multiply out must fit the shapes MLX takes
    let channels = k_heads
        .checked_mul(k_dim)
        .and_then(|k| k.checked_mul(2))
        .and_then(|k| k.checked_add(inner));
    if channels.is_none() {
        return Err(bad(
            file,
            Kv::SsmStateSize,
            format!("{k_heads} key heads of {k_dim} and {inner} value features are too large"),
        ));
    }
    if inner % v_heads != 0 {
        return Err(bad(
            file,
            Kv::SsmInnerSize,
            format!("{inner} is not a multiple of the {v_heads} value heads"),
        ));
    }
    Ok(DeltaNetSpec {
        k_heads,
        v_heads,
        k_dim,
        v_dim: inner / v_heads,
        kernel,
        head_map,
        fused_gates: false,
        fused_input: false,
        sigmoid_gate: false,
    })
}

/// `rope.dimension_sections`: four counts of rotating pairs (time, height, width, extra), at
/// most `pairs` together (llama.cpp asserts the same).
pub(crate) fn rope_sections(file: &GgufFile, pairs: i32) -> Result<[i32; 4]> {
    let values = file
        .metadata()
        .get_u32_per_layer(&Kv::RopeDimensionSections, 4)
        .map_err(|_| {
            bad(
                file,
                Kv::RopeDimensionSections,
                "missing or not an array of 4 counts".into(),
            )
        })?;
    let mut sections = [0i32; 4];
    for (s, v) in sections.iter_mut().zip(values) {
        *s = i32::try_from(v)
            .map_err(|_| bad(file, Kv::RopeDimensionSections, "too large".into()))?;
    }
    let total: i64 = sections.iter().map(|&s| i64::from(s)).sum();
    if total > i64::from(pairs) {
        return Err(bad(
            file,
            Kv::RopeDimensionSections,
            format!("{total} pairs in all, more than the {pairs} that rotate"),
        ));
    }
    if sections[..3].iter().all(|&s| s == 0) {
        return Err(bad(
            file,
            Kv::RopeDimensionSections,
            "the first three sections are all 0".into(),
        ));
    }
    Ok(sections)
}
