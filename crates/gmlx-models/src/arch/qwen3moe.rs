//! `qwen3moe`: Qwen3's attention (per-head Q/K norms, NEOX rotary) with a routed MoE in every
//! block: softmax router, top-k experts, weights renormalised over the selected experts (as
//! llama.cpp does for this architecture), SwiGLU experts.
use gmlx_gguf::names::Tensor;
use gmlx_gguf::GgufFile;
use gmlx_mlx::Dtype;

use crate::arch::llama;
use crate::blocks::decoder::Ffn;
use crate::blocks::moe::{ExpertActivation, Experts, Gating, MoeFfn, Router};
use crate::config::{self, ModelConfig};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::weights::Weights;

/// Per-layer tensors.
pub const TENSORS: &[Tensor] = &[
    Tensor::AttnNorm,
    Tensor::AttnQ,
    Tensor::AttnK,
    Tensor::AttnV,
    Tensor::AttnQNorm,
    Tensor::AttnKNorm,
    Tensor::AttnOutput,
    Tensor::FfnNorm,
    Tensor::FfnGateInp,
    Tensor::FfnGateExps,
    Tensor::FfnUpExps,
    Tensor::FfnDownExps,
];

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let mut c = config::synth_decoder(file, false)?;
    c.moe = Some(config::synth_moe(file)?);
    Ok(c)
}

pub fn build(file: &GgufFile, dtype: Dtype) -> Result<Model> {
    llama::build_decoder(file, dtype, synth(file)?, true, moe_ffn)
}

fn moe_ffn(w: &Weights<'_>, c: &ModelConfig, l: usize) -> Result<Ffn> {
    let m = c.moe.as_ref().ok_or_else(|| Error::BadConfig {
        key: "expert_count".into(),
        reason: "missing for an MoE architecture".into(),
    })?;
    Ok(Ffn::Moe(Box::new(MoeFfn {
        router: Router {
            ffn_gate_inp: w
                .matrix(&Tensor::FfnGateInp.weight(l), m.experts, c.hidden)?
                .into(),
            gating: Gating::Softmax,
            selection_bias: None,
            top_k: m.experts_used,
            normalize: true,
            scale: m.weights_scale,
        },
        experts: Experts {
            ffn_gate_exps: w.experts(
                &Tensor::FfnGateExps.weight(l),
                m.experts,
                m.expert_ffn,
                c.hidden,
            )?,
            ffn_up_exps: w.experts(
                &Tensor::FfnUpExps.weight(l),
                m.experts,
                m.expert_ffn,
                c.hidden,
            )?,
            ffn_down_exps: w.experts(
                &Tensor::FfnDownExps.weight(l),
                m.experts,
                c.hidden,
                m.expert_ffn,
            )?,
            ffn_gate_exps_b: None,
            ffn_up_exps_b: None,
            ffn_down_exps_b: None,
            activation: ExpertActivation::SwiGlu,
        },
        shared: None,
    })))
}
