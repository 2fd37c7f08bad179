//! `deepseek4` (DeepSeek-V4): attention over a sliding window of raw key rows (keys are
//! values, one KV head, low-rank queries, sinks, grouped low-rank output), plus pooled rows of
//! every 4 (with a lightning indexer) or 128 positions on the layers `compress_ratios` marks;
//! mHC residual streams (`hyper_connection.*`, Sinkhorn-mixed); MoE with `sqrt(softplus)`
//! scores, a selection bias, normalised and scaled weights, the first `hash_layer_count`
//! layers routed by token id, SwiGLU clamped on routed and shared experts alike.
use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::GgufFile;

use super::{bad, per_layer_f32, GATING_SQRT_SOFTPLUS};
use crate::config::{
    self, CompressedSpec, ExpertActivation, FfnSpec, Gating, HyperSpec, IndexerSpec, MixerSpec,
    ModelConfig, RopeConfig, SharedExpertSpec,
};
use crate::error::Result;

/// Clamps at or below this are off (llama.cpp's threshold).
const CLAMP_OFF: f32 = 1e-6;
/// The compressors llama.cpp implements: overlapped with an indexer, and pooled.
const CSA_RATIO: u32 = 4;
const HCA_RATIO: u32 = 128;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let meta = file.metadata();
    let mut c = config::synth_decoder(file, true)?;
    let count = |key: Kv| super::count(file, key);
    let MixerSpec::Attention(first) = &c.layers[0].mixer else {
        unreachable!("synth_decoder plans attention layers");
    };
    let (n_heads, head_dim, rope) = (first.n_heads, first.head_dim, first.rope.clone());
    if rope.dims >= head_dim {
        return Err(bad(
            file,
            Kv::RopeDimensionCount,
            format!(
                "{} leaves no non-rotary part of the {head_dim}-wide heads",
                rope.dims
            ),
        ));
    }
    let q_rank = count(Kv::AttentionQLoraRank)?;
    let window = count(Kv::AttentionSlidingWindow)?;
    let out_groups = count(Kv::AttentionOutputGroupCount)?;
    let out_rank = count(Kv::AttentionOutputLoraRank)?;
    if n_heads % out_groups != 0 {
        return Err(bad(
            file,
            Kv::AttentionOutputGroupCount,
            format!("{out_groups} groups do not divide the {n_heads} heads"),
        ));
    }
    let ratios = meta.get_u32_array(&Kv::AttentionCompressRatios)?;
    if ratios.len() < c.n_layers {
        return Err(bad(
            file,
            Kv::AttentionCompressRatios,
            format!("{} ratios for {} blocks", ratios.len(), c.n_layers),
        ));
    }
    if let Some(r) = ratios
        .iter()
        .find(|&&r| ![0, CSA_RATIO, HCA_RATIO].contains(&r))
    {
        return Err(bad(
            file,
            Kv::AttentionCompressRatios,
            format!("ratio {r}: only 0, {CSA_RATIO} and {HCA_RATIO} exist"),
        ));
    }
    let compressed_rope = compressed_rope(file, &rope)?;
    let plain_rope = RopeConfig {
        position_scale: 1.0,
        yarn: None,
        ..rope
    };
    let indexer = if ratios[..c.n_layers].contains(&CSA_RATIO) {
        Some(indexer(file, plain_rope.dims)?)
    } else {
        None
    };
    for (l, layer) in c.layers.iter_mut().enumerate() {
        let ratio = ratios[l] as i32;
        layer.mixer = MixerSpec::Compressed(CompressedSpec {
            n_heads,
            head_dim,
            rope_dim: plain_rope.dims,
            q_rank,
            window,
            out_groups,
            out_rank,
            ratio,
            rope: if ratio == 0 {
                plain_rope.clone()
            } else {
                compressed_rope.clone()
            },
            indexer: indexer.filter(|_| ratio == CSA_RATIO as i32),
        });
    }
    c.hyper = Some(HyperSpec {
        streams: count(Kv::HyperConnectionCount)?,
        eps: file.get_f32(&Kv::HyperConnectionEpsilon)?,
        magnitude: 2.0,
        post_eps: 0.0,
        sinkhorn: Some(count(Kv::HyperConnectionSinkhornIterations)?),
    });
    c.set_ffn(FfnSpec::Moe(moe_base(file)?));
    let routed =
        per_layer_f32(file, Kv::SwigluClampExp, c.n_layers)?.unwrap_or(vec![0.0; c.n_layers]);
    let shared = per_layer_f32(file, Kv::SwigluClampShexp, c.n_layers)?.unwrap_or(routed.clone());
    let hashed = meta.opt_u32(&Kv::HashLayerCount)?.unwrap_or(0) as usize;
    for (l, layer) in c.layers.iter_mut().enumerate() {
        let FfnSpec::Moe(m) = &mut layer.ffn else {
            unreachable!("every block is MoE");
        };
        m.hash_routing = l < hashed;
        m.selection_bias = !m.hash_routing && file.has_tensor(&Tensor::FfnExpProbsB.bias(l));
        if routed[l] > CLAMP_OFF {
            m.activation = ExpertActivation::SwiGluClamped { limit: routed[l] };
        }
        if let Some(s) = &mut m.shared_expert {
            s.clamp = (shared[l] > CLAMP_OFF).then_some(shared[l]);
        }
    }
    Ok(c)
}

/// The compressed layers' rotation: the second base, with the file's scaling; YaRN's
/// magnitude correction is cancelled (llama.cpp's `dsv4_rope_attn_factor`).
fn compressed_rope(file: &GgufFile, rope: &RopeConfig) -> Result<RopeConfig> {
    let base = file.get_f32(&Kv::AttentionCompressRopeFreqBase)?;
    Ok(RopeConfig {
        base,
        yarn: rope.yarn.map(|y| config::Yarn {
            attn_factor: 1.0 / (1.0 + 0.1 * y.factor.ln()),
            ..y
        }),
        ..rope.clone()
    })
}

fn indexer(file: &GgufFile, rope_dim: i32) -> Result<IndexerSpec> {
    let heads = file.get_u32(&Kv::AttentionIndexerHeadCount)? as i32;
    let head_dim = file.get_u32(&Kv::AttentionIndexerKeyLength)? as i32;
    let top_k = file.get_u32(&Kv::AttentionIndexerTopK)?;
    if heads <= 0 || head_dim <= rope_dim || !(head_dim as u32).is_power_of_two() || top_k == 0 {
        return Err(bad(
            file,
            Kv::AttentionIndexerKeyLength,
            format!(
                "{heads} heads of {head_dim}, top {top_k} (the head must be a power of two \
                 above the {rope_dim} rotary dimensions, top-k positive)"
            ),
        ));
    }
    Ok(IndexerSpec {
        heads,
        head_dim,
        top_k: i32::try_from(top_k).unwrap_or(i32::MAX),
        owns: true,
        pool: None,
    })
}

/// The experts every block shares: counts, `sqrt(softplus)` scores, normalisation, scale,
/// the shared experts.
fn moe_base(file: &GgufFile) -> Result<config::MoeConfig> {
    let meta = file.metadata();
    let mut moe = config::synth_moe(file)?;
    let gating = file.get_u32(&Kv::ExpertGatingFunc)?;
    if gating != GATING_SQRT_SOFTPLUS {
        return Err(bad(
            file,
            Kv::ExpertGatingFunc,
            format!(
                "{gating}: DeepSeek-V4 scores experts by sqrt(softplus) ({GATING_SQRT_SOFTPLUS})"
            ),
        ));
    }
    moe.gating = Gating::SqrtSoftplus;
    moe.normalize = meta.opt_bool(&Kv::ExpertWeightsNorm)?.unwrap_or(false);
    let shared = meta.opt_u32(&Kv::ExpertSharedCount)?.unwrap_or(0) as i32;
    moe.shared_expert = (shared > 0).then_some(SharedExpertSpec {
        ffn: moe.expert_ffn * shared,
        gated: false,
        clamp: None,
    });
    Ok(moe)
}
