//! `glm5-next` (GLM-5-Next): a hybrid of KDA layers (a decay per key channel, a low-rank
//! output gate `ssm_g_a`/`ssm_g_b`) and nope-only latent attention (low-rank queries, one
//! latent row per position, nothing rotates) made sparse by a k-pool indexer (pools of
//! `indexer.kpool` keys; `attention.indexer.types` says which attention layers score and which
//! reuse the last selection); the blocks marked 0 in the per-block `attention.head_count_kv`
//! array are the KDA ones. mHC residual streams (Sinkhorn-mixed, averaged at the head);
//! leading dense blocks, then a sigmoid router with a selection bias over routed experts beside
//! shared ones, every SwiGLU clamped by `swiglu_clamp_exp` / `swiglu_clamp_shexp`.
use gmlx_gguf::names::Kv;
use gmlx_gguf::{GgufFile, Value};

use super::{bad, per_layer_f32, GATING_NONE, GATING_SIGMOID, GATING_SOFTMAX};
use crate::config::{
    self, ExpertActivation, FfnSpec, Gating, HyperSpec, IndexerSpec, KdaSpec, LatentSpec,
    MixerSpec, ModelConfig, SharedExpertSpec,
};
use crate::error::Result;

/// Clamps at or below this are off (llama.cpp's threshold).
const CLAMP_OFF: f32 = 1e-6;
/// The only stream count llama.cpp's mHC takes.
const STREAMS: i32 = 4;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let meta = file.metadata();
    let (mut c, recurrent) = config::synth_hybrid_decoder(file, true)?;
    let count = |key: Kv| super::count(file, key);
    let MixerSpec::Attention(first) = &c.layers[0].mixer else {
        unreachable!("synth_decoder plans attention layers");
    };
    let n_heads = first.n_heads;
    if meta.opt_u32(&Kv::RopeDimensionCount)?.unwrap_or(0) != 0 {
        return Err(bad(
            file,
            Kv::RopeDimensionCount,
            "GLM-5-Next's latent attention rotates nothing: must be 0".into(),
        ));
    }
    let indexer = pool_indexer(file)?;
    let owns = indexer_owners(file, c.n_layers, &recurrent)?;
    let latent = LatentSpec {
        n_heads,
        q_rank: count(Kv::AttentionQLoraRank)?,
        kv_rank: count(Kv::AttentionKvLoraRank)?,
        nope_dim: count(Kv::AttentionKeyLengthMla)?,
        rope_dim: 0,
        v_dim: count(Kv::AttentionValueLengthMla)?,
        rope: None,
        sinks: false,
        output_gate: false,
        indexer: None,
    };
    let kda = KdaSpec {
        heads: n_heads,
        head_dim: count(Kv::KdaHeadDim)?,
        kernel: count(Kv::SsmConvKernel)?,
        lower_bound: meta
            .opt_f32(&Kv::KdaGateLowerBound)?
            .filter(|b| b.is_finite()),
        full_gate: false,
    };
    for (l, layer) in c.layers.iter_mut().enumerate() {
        layer.mixer = if recurrent[l] {
            MixerSpec::Kda(kda.clone())
        } else {
            MixerSpec::Latent(LatentSpec {
                indexer: Some(IndexerSpec {
                    owns: owns[l],
                    ..indexer
                }),
                ..latent.clone()
            })
        };
    }

    let streams = count(Kv::HyperConnectionCount)?;
    if streams != STREAMS {
        return Err(bad(
            file,
            Kv::HyperConnectionCount,
            format!("{streams} streams: GLM-5-Next's mHC has {STREAMS}"),
        ));
    }
    c.hyper = Some(HyperSpec {
        streams,
        eps: file.get_f32(&Kv::HyperConnectionEpsilon)?,
        magnitude: 2.0,
        post_eps: 0.0,
        sinkhorn: Some(count(Kv::HyperConnectionSinkhornIterations)?),
    });
    c.hyper_mean_head = true;

    let dense_lead = meta.opt_u32(&Kv::LeadingDenseBlockCount)?.unwrap_or(0) as usize;
    let mut moe = config::synth_moe(file)?;
    moe.gating = match meta.opt_u32(&Kv::ExpertGatingFunc)?.unwrap_or(GATING_NONE) {
        GATING_NONE | GATING_SIGMOID => Gating::Sigmoid,
        GATING_SOFTMAX => Gating::Softmax,
        other => {
            return Err(bad(
                file,
                Kv::ExpertGatingFunc,
                format!("gating function {other} is not softmax (1) or sigmoid (2)"),
            ))
        }
    };
    moe.normalize = meta.opt_bool(&Kv::ExpertWeightsNorm)?.unwrap_or(false);
    moe.selection_bias = true;
    let shared = count(Kv::ExpertSharedCount)?;
    let routed =
        per_layer_f32(file, Kv::SwigluClampExp, c.n_layers)?.unwrap_or(vec![0.0; c.n_layers]);
    let shared_clamp =
        per_layer_f32(file, Kv::SwigluClampShexp, c.n_layers)?.unwrap_or(routed.clone());
    let on = |limit: f32| (limit > CLAMP_OFF).then_some(limit);
    for (l, layer) in c.layers.iter_mut().enumerate() {
        layer.ffn = if l < dense_lead {
            let FfnSpec::Dense { hidden, .. } = layer.ffn else {
                unreachable!("synth_decoder plans dense blocks");
            };
            // llama.cpp's dense SwiGLU takes the shared experts' clamp
            FfnSpec::Dense {
                hidden,
                clamp: on(shared_clamp[l]),
            }
        } else {
            let mut m = moe.clone();
            if let Some(limit) = on(routed[l]) {
                m.activation = ExpertActivation::SwiGluClamped { limit };
            }
            m.shared_expert = Some(SharedExpertSpec {
                ffn: moe.expert_ffn.saturating_mul(shared),
                gated: false,
                clamp: on(shared_clamp[l]),
            });
            FfnSpec::Moe(m)
        };
    }
    Ok(c)
}

/// The k-pool indexer's shape (`owns` set per layer by the caller).
fn pool_indexer(file: &GgufFile) -> Result<IndexerSpec> {
    let meta = file.metadata();
    let heads = file.get_u32(&Kv::AttentionIndexerHeadCount)? as i32;
    let head_dim = file.get_u32(&Kv::AttentionIndexerKeyLength)? as i32;
    let top_k = file.get_u32(&Kv::AttentionIndexerTopK)?;
    let kpool = file.get_u32(&Kv::AttentionIndexerKpool)?;
    if heads <= 0 || head_dim <= 0 {
        return Err(bad(
            file,
            Kv::AttentionIndexerHeadCount,
            format!("{heads} heads of {head_dim}"),
        ));
    }
    // llama.cpp asserts the same
    if kpool < 2 || top_k < kpool || top_k % kpool != 0 {
        return Err(bad(
            file,
            Kv::AttentionIndexerKpool,
            format!(
                "pools of {kpool} keys (at least 2) and top-k {top_k} (a positive multiple of it)"
            ),
        ));
    }
    let select_tail = meta
        .opt_bool(&Kv::AttentionIndexerKpoolSelectTail)?
        .unwrap_or(false);
    Ok(IndexerSpec {
        heads,
        head_dim,
        top_k: i32::try_from(top_k).unwrap_or(i32::MAX),
        owns: true,
        pool: Some((kpool as i32, select_tail)),
    })
}

/// Which attention layers score their own selection (`attention.indexer.types`, every one
/// when absent); the others reuse the last one's.
fn indexer_owners(file: &GgufFile, n_layers: usize, recurrent: &[bool]) -> Result<Vec<bool>> {
    let meta = file.metadata();
    let owns: Vec<bool> = match meta.value(&Kv::AttentionIndexerTypes)? {
        None => vec![true; n_layers],
        Some(Value::Array(flags)) => {
            if flags.len() < n_layers {
                return Err(bad(
                    file,
                    Kv::AttentionIndexerTypes,
                    format!("{} flags for {n_layers} blocks", flags.len()),
                ));
            }
            (0..n_layers)
                .map(|i| match flags.get(i) {
                    Some(Value::Bool(b)) => b,
                    Some(v) => v.as_integer().is_some_and(|n| n != 0),
                    None => false,
                })
                .collect()
        }
        // one flag for every block
        Some(_) => vec![file.get_u32(&Kv::AttentionIndexerTypes)? != 0; n_layers],
    };
    let first_attention = recurrent.iter().position(|r| !r);
    if let Some(l) = first_attention {
        if !owns[l] {
            return Err(bad(
                file,
                Kv::AttentionIndexerTypes,
                format!("block {l}, the first attention block, must score: none before it does"),
            ));
        }
    }
    Ok(owns)
}
