//! `hy_v4` (HY4): multi-head latent attention (low-rank queries, one compressed key-value row
//! per position with a decoupled rotary part, NORM rotation) with sinks and a sigmoid output
//! gate, optionally sparse through a lightning indexer whose choice later layers may share
//! (`attention.indexer.types`); iHC residual streams (`hyper_connection.*`); leading dense
//! blocks, then a sigmoid router with a selection bias over routed experts (their SwiGLU
//! clamped by `swiglu_clamp_exp`) beside always-on shared experts.
use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::{GgufFile, Value};

use super::{bad, per_layer_f32, GATING_SIGMOID, GATING_SOFTMAX};
use crate::config::{
    self, ExpertActivation, FfnSpec, Gating, HyperSpec, IndexerSpec, LatentSpec, MixerSpec,
    ModelConfig, SharedExpertSpec,
};
use crate::error::Result;

/// Clamps at or below this are off (llama.cpp's threshold).
const CLAMP_OFF: f32 = 1e-6;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let meta = file.metadata();
    let mut c = config::synth_decoder(file, true)?;
    let count = |key: Kv| super::count(file, key);
    let q_rank = count(Kv::AttentionQLoraRank)?;
    let kv_rank = count(Kv::AttentionKvLoraRank)?;
    let key_dim = count(Kv::AttentionKeyLengthMla)?;
    let v_dim = count(Kv::AttentionValueLengthMla)?;
    let MixerSpec::Attention(first) = &c.layers[0].mixer else {
        unreachable!("synth_decoder plans attention layers");
    };
    let (n_heads, rope) = (first.n_heads, first.rope.clone());
    let rope_dim = rope.dims;
    if key_dim <= rope_dim {
        return Err(bad(
            file,
            Kv::AttentionKeyLengthMla,
            format!("{key_dim} leaves no non-rotary part beside {rope_dim} rotary dimensions"),
        ));
    }
    let indexer = indexer(file, c.n_layers, rope_dim)?;
    for (l, layer) in c.layers.iter_mut().enumerate() {
        layer.mixer = MixerSpec::Latent(LatentSpec {
            n_heads,
            q_rank,
            kv_rank,
            nope_dim: key_dim - rope_dim,
            rope_dim,
            v_dim,
            rope: Some(rope.clone()),
            sinks: true,
            output_gate: true,
            indexer: indexer.as_ref().map(|(spec, owns)| IndexerSpec {
                owns: owns[l],
                ..*spec
            }),
        });
    }
    c.hyper = Some(HyperSpec {
        streams: count(Kv::HyperConnectionCount)?,
        eps: file.get_f32(&Kv::HyperConnectionEpsilon)?,
        magnitude: file.get_f32(&Kv::HyperConnectionMagnitude)?,
        post_eps: file.get_f32(&Kv::HyperConnectionEpsilon)?,
        sinkhorn: None,
    });

    let dense_lead = meta.opt_u32(&Kv::LeadingDenseBlockCount)?.unwrap_or(0) as usize;
    let mut moe = config::synth_moe(file)?;
    moe.gating = match meta.opt_u32(&Kv::ExpertGatingFunc)? {
        None | Some(GATING_SOFTMAX) => Gating::Softmax,
        Some(GATING_SIGMOID) => Gating::Sigmoid,
        Some(other) => {
            return Err(bad(
                file,
                Kv::ExpertGatingFunc,
                format!("gating function {other} is not softmax (1) or sigmoid (2)"),
            ))
        }
    };
    moe.normalize = meta.opt_bool(&Kv::ExpertWeightsNorm)?.unwrap_or(false);
    let shared = meta.opt_u32(&Kv::ExpertSharedCount)?.unwrap_or(0) as i32;
    moe.shared_expert = (shared > 0).then_some(SharedExpertSpec {
        ffn: moe.expert_ffn * shared,
        gated: false,
        clamp: None,
    });
    let clamps =
        per_layer_f32(file, Kv::SwigluClampExp, c.n_layers)?.unwrap_or(vec![0.0; c.n_layers]);
    for (l, layer) in c.layers.iter_mut().enumerate() {
        if l < dense_lead {
            continue;
        }
        let mut m = moe.clone();
        m.selection_bias = file.has_tensor(&Tensor::FfnExpProbsB.bias(l));
        if clamps[l] > CLAMP_OFF {
            m.activation = ExpertActivation::SwiGluClamped { limit: clamps[l] };
        }
        layer.ffn = FfnSpec::Moe(m);
    }
    Ok(c)
}

/// The indexer's shape and which layers own one, or `None` for a dense checkpoint (no
/// `indexer.top_k`, or 0).
fn indexer(
    file: &GgufFile,
    n_layers: usize,
    rope_dim: i32,
) -> Result<Option<(IndexerSpec, Vec<bool>)>> {
    let meta = file.metadata();
    let top_k = meta.opt_u32(&Kv::AttentionIndexerTopK)?.unwrap_or(0);
    if top_k == 0 {
        return Ok(None);
    }
    let heads = file.get_u32(&Kv::AttentionIndexerHeadCount)? as i32;
    let head_dim = file.get_u32(&Kv::AttentionIndexerKeyLength)? as i32;
    if heads <= 0 || head_dim <= rope_dim {
        return Err(bad(
            file,
            Kv::AttentionIndexerKeyLength,
            format!("{heads} heads of {head_dim} (must exceed the {rope_dim} rotary dimensions)"),
        ));
    }
    let owns = match meta.value(&Kv::AttentionIndexerTypes)? {
        None => vec![true; n_layers],
        Some(Value::Array(flags)) if flags.len() >= n_layers => (0..n_layers)
            .map(|i| match flags.get(i) {
                Some(Value::Bool(b)) => b,
                Some(v) => v.as_integer().is_some_and(|n| n != 0),
                None => false,
            })
            .collect(),
        Some(_) => {
            return Err(bad(
                file,
                Kv::AttentionIndexerTypes,
                format!("needs one flag per each of the {n_layers} blocks"),
            ))
        }
    };
    if !owns[0] {
        return Err(bad(
            file,
            Kv::AttentionIndexerTypes,
            "block 0 must own an indexer: no earlier block has one to share".into(),
        ));
    }
    Ok(Some((
        IndexerSpec {
            heads,
            head_dim,
            top_k: i32::try_from(top_k).unwrap_or(i32::MAX),
            owns: true,
            pool: None,
        },
        owns,
    )))
}
