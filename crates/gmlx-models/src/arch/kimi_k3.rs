//! `kimi-k3` (Kimi-K3): a hybrid of KDA layers (Kimi delta attention: a decay per key
//! channel, bounded below by `kda.gate_lower_bound`, and a full-rank output gate `ssm_g`) and
//! nope-only latent attention (nothing rotates) with a sigmoid output gate; the blocks marked
//! 0 in the per-block `attention.head_count_kv` array are the KDA ones. Attention residuals
//! across blocks (`attn_res.block_size`); leading dense blocks, then a sigmoid router with a
//! selection bias over experts working in a latent width (`expert_latent_length`) beside
//! full-width shared experts; every gated MLP uses `situ`.
use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::GgufFile;

use super::{bad, GATING_SIGMOID, GATING_SOFTMAX};
use crate::config::{
    self, ExpertActivation, FfnSpec, Gating, Glu, KdaSpec, LatentSpec, MixerSpec, ModelConfig,
    SharedExpertSpec,
};
use crate::error::Result;

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let meta = file.metadata();
    let (mut c, recurrent) = config::synth_hybrid_decoder(file, true)?;
    let count = |key: Kv| super::count(file, key);
    let MixerSpec::Attention(first) = &c.layers[0].mixer else {
        unreachable!("synth_decoder plans attention layers");
    };
    let (n_heads, rope_dim) = (first.n_heads, first.rope.dims);
    let key_dim = count(Kv::AttentionKeyLengthMla)?;
    if key_dim <= rope_dim {
        return Err(bad(
            file,
            Kv::AttentionKeyLengthMla,
            format!("{key_dim} leaves no non-rotary part beside {rope_dim} rotary dimensions"),
        ));
    }
    let latent = LatentSpec {
        n_heads,
        q_rank: meta.opt_u32(&Kv::AttentionQLoraRank)?.unwrap_or(0) as i32,
        kv_rank: count(Kv::AttentionKvLoraRank)?,
        nope_dim: key_dim - rope_dim,
        rope_dim,
        v_dim: count(Kv::AttentionValueLengthMla)?,
        rope: None,
        sinks: false,
        output_gate: false,
        indexer: None,
    };
    let lower_bound = meta
        .opt_f32(&Kv::KdaGateLowerBound)?
        .filter(|b| b.is_finite());
    let kda = KdaSpec {
        heads: n_heads,
        head_dim: count(Kv::KdaHeadDim)?,
        kernel: count(Kv::SsmConvKernel)?,
        lower_bound,
        full_gate: true,
    };
    for (l, layer) in c.layers.iter_mut().enumerate() {
        layer.mixer = if recurrent[l] {
            MixerSpec::Kda(kda.clone())
        } else {
            MixerSpec::Latent(LatentSpec {
                // the output gate is optional per layer
                output_gate: file.has_tensor(&Tensor::AttnGate.weight(l)),
                ..latent.clone()
            })
        };
    }

    let block_size = file.get_u32(&Kv::AttnResBlockSize)? as usize;
    c.attn_res = (block_size > 0).then_some(block_size);
    let situ = Glu::Situ {
        beta: file.get_f32(&Kv::ActivationSituBeta)?,
        linear_beta: file.get_f32(&Kv::ActivationSituLinearBeta)?,
    };
    if let Glu::Situ { beta, .. } = situ {
        if !(beta.is_finite() && beta > 0.0) {
            return Err(bad(
                file,
                Kv::ActivationSituBeta,
                format!("{beta} is not a positive scale"),
            ));
        }
    }
    c.glu = situ;

    let dense_lead = meta.opt_u32(&Kv::LeadingDenseBlockCount)?.unwrap_or(0) as usize;
    let mut moe = config::synth_moe(file)?;
    moe.gating = match file.get_u32(&Kv::ExpertGatingFunc)? {
        GATING_SOFTMAX => Gating::Softmax,
        GATING_SIGMOID => Gating::Sigmoid,
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
    moe.activation = ExpertActivation::Glu(situ);
    let shared = meta.opt_u32(&Kv::ExpertSharedCount)?.unwrap_or(0).max(1) as i32;
    let latent_width = meta.opt_u32(&Kv::ExpertLatentLength)?.unwrap_or(0) as i32;
    for (l, layer) in c.layers.iter_mut().enumerate() {
        if l < dense_lead {
            continue;
        }
        let mut m = moe.clone();
        m.shared_expert =
            file.has_tensor(&Tensor::FfnGateShexp.weight(l))
                .then_some(SharedExpertSpec {
                    ffn: moe.expert_ffn.saturating_mul(shared),
                    gated: false,
                    clamp: None,
                });
        m.latent = (latent_width > 0).then(|| {
            (
                latent_width,
                file.has_tensor(&Tensor::FfnRoutedNorm.weight(l)),
            )
        });
        layer.ffn = FfnSpec::Moe(m);
    }
    Ok(c)
}
