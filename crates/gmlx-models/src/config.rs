//! `ModelConfig`: what a llama-family decoder needs, synthesized once from GGUF metadata.
use gmlx_gguf::names::Kv;
use gmlx_gguf::GgufFile;

use crate::error::{Error, Result};

/// Rotary position embedding, resolved from the file.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeConfig {
    /// Leading dimensions of each head that rotate.
    pub dims: i32,
    pub base: f32,
    /// Adjacent pairs rotate (llama.cpp's NORM layout) rather than the two halves (NEOX).
    pub traditional: bool,
    /// Position multiplier: `1 / factor` of linear scaling, 1 without scaling.
    pub position_scale: f32,
    /// Per-frequency divisors (llama.cpp's `rope_freqs` tensor, llama 3.1 style).
    pub freq_factors: Option<Vec<f32>>,
    /// YaRN context extension.
    pub yarn: Option<Yarn>,
}

/// YaRN: per-frequency interpolation between the original and the `factor`-stretched
/// rotation, and a magnitude correction, as llama.cpp's `rope_yarn` computes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    pub factor: f32,
    pub original_context: u32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// `rope.scaling.attn_factor` (1 when absent).
    pub attn_factor: f32,
}

/// Mixture-of-experts hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    pub experts: i32,
    pub experts_used: i32,
    /// Hidden size of each expert's MLP.
    pub expert_ffn: i32,
    /// Router weight multiplier (`expert_weights_scale`; 1 when absent).
    pub weights_scale: f32,
}

/// A validated decoder configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// `general.architecture`.
    pub arch: String,
    pub n_layers: usize,
    pub hidden: i32,
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub ffn_hidden: i32,
    pub vocab: i32,
    pub rms_eps: f32,
    pub context_length: usize,
    pub rope: RopeConfig,
    /// Present for mixture-of-experts models.
    pub moe: Option<MoeConfig>,
}

fn bad(file: &GgufFile, key: Kv, reason: impl Into<String>) -> Error {
    Error::BadConfig {
        key: file
            .metadata()
            .resolve(&key)
            .unwrap_or_else(|_| key.template().to_owned()),
        reason: reason.into(),
    }
}

fn positive(file: &GgufFile, key: Kv, value: u32) -> Result<i32> {
    match i32::try_from(value) {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(bad(
            file,
            key,
            format!("must be a positive count, found {value}"),
        )),
    }
}

/// Reads the keys every llama-family decoder has. `traditional_rope` is the architecture's
/// rope layout. The vocabulary size comes from the token embedding when the key is absent.
pub fn synth_decoder(file: &GgufFile, traditional_rope: bool) -> Result<ModelConfig> {
    let arch = file.architecture()?.to_owned();
    let meta = file.metadata();
    let n_layers = positive(file, Kv::BlockCount, file.get_u32(&Kv::BlockCount)?)? as usize;
    let hidden = positive(
        file,
        Kv::EmbeddingLength,
        file.get_u32(&Kv::EmbeddingLength)?,
    )?;
    let n_heads = positive(
        file,
        Kv::AttentionHeadCount,
        file.get_u32(&Kv::AttentionHeadCount)?,
    )?;
    let n_kv_heads = match meta.opt_u32(&Kv::AttentionHeadCountKv)? {
        Some(v) => positive(file, Kv::AttentionHeadCountKv, v)?,
        None => n_heads,
    };
    if n_heads % n_kv_heads != 0 {
        return Err(bad(
            file,
            Kv::AttentionHeadCountKv,
            format!("{n_kv_heads} does not divide the {n_heads} query heads"),
        ));
    }
    let head_dim = match meta.opt_u32(&Kv::AttentionKeyLength)? {
        Some(v) => positive(file, Kv::AttentionKeyLength, v)?,
        None if hidden % n_heads == 0 => hidden / n_heads,
        None => {
            return Err(bad(
                file,
                Kv::AttentionHeadCount,
                format!("{n_heads} heads do not divide the embedding length {hidden}"),
            ))
        }
    };
    // MoE models may give only the expert size; 0 then means "no dense MLP"
    let ffn_hidden = match meta.opt_u32(&Kv::FeedForwardLength)? {
        Some(v) => i32::try_from(v).map_err(|_| bad(file, Kv::FeedForwardLength, "too large"))?,
        None => 0,
    };
    let rms_eps = file.get_f32(&Kv::AttentionLayerNormRmsEpsilon)?;
    let vocab = match meta.opt_u32(&Kv::VocabSize)? {
        Some(v) => positive(file, Kv::VocabSize, v)?,
        None => {
            let embd = file.tensor(&gmlx_gguf::names::Tensor::TokenEmbd.weight(0))?;
            i32::try_from(embd.n_rows()).map_err(|_| bad(file, Kv::VocabSize, "too large"))?
        }
    };
    let context_length = file.get_u32(&Kv::ContextLength)? as usize;
    let rope_dims = match meta.opt_u32(&Kv::RopeDimensionCount)? {
        Some(v) => positive(file, Kv::RopeDimensionCount, v)?,
        None => head_dim,
    };
    if rope_dims > head_dim || rope_dims % 2 != 0 {
        return Err(bad(
            file,
            Kv::RopeDimensionCount,
            format!("{rope_dims} must be even and at most the head size {head_dim}"),
        ));
    }
    let base = meta.opt_f32(&Kv::RopeFreqBase)?.unwrap_or(10_000.0);
    let (position_scale, yarn) = rope_scaling(file)?;
    let freq_factors = rope_freq_factors(file, rope_dims)?;
    Ok(ModelConfig {
        arch,
        n_layers,
        hidden,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_hidden,
        vocab,
        rms_eps,
        context_length,
        rope: RopeConfig {
            dims: rope_dims,
            base,
            traditional: traditional_rope,
            position_scale,
            freq_factors,
            yarn,
        },
        moe: None,
    })
}

/// Reads the expert counts and sizes of an MoE decoder.
pub fn synth_moe(file: &GgufFile) -> Result<MoeConfig> {
    let meta = file.metadata();
    let experts = positive(file, Kv::ExpertCount, file.get_u32(&Kv::ExpertCount)?)?;
    let experts_used = positive(
        file,
        Kv::ExpertUsedCount,
        file.get_u32(&Kv::ExpertUsedCount)?,
    )?;
    if experts_used > experts {
        return Err(bad(
            file,
            Kv::ExpertUsedCount,
            format!("{experts_used} experts per token but only {experts} experts"),
        ));
    }
    let expert_ffn = positive(
        file,
        Kv::ExpertFeedForwardLength,
        file.get_u32(&Kv::ExpertFeedForwardLength)?,
    )?;
    let weights_scale = match meta.opt_f32(&Kv::ExpertWeightsScale)? {
        Some(s) if s != 0.0 => s,
        _ => 1.0,
    };
    Ok(MoeConfig {
        experts,
        experts_used,
        expert_ffn,
        weights_scale,
    })
}

/// The position multiplier of linear scaling, or YaRN's parameters.
fn rope_scaling(file: &GgufFile) -> Result<(f32, Option<Yarn>)> {
    let meta = file.metadata();
    let kind = meta.opt_str(&Kv::RopeScalingType)?.unwrap_or("none");
    let factor = match meta.opt_f32(&Kv::RopeScalingFactor)? {
        Some(f) => f,
        None => meta.opt_f32(&Kv::RopeScaleLinear)?.unwrap_or(1.0),
    };
    if kind != "none" && (factor.is_nan() || factor <= 0.0) {
        return Err(bad(
            file,
            Kv::RopeScalingFactor,
            format!("{factor} is not positive"),
        ));
    }
    match kind {
        "none" => Ok((1.0, None)),
        "linear" => Ok((1.0 / factor, None)),
        "yarn" => {
            let original_context = match meta.opt_u32(&Kv::RopeScalingOrigCtxLen)? {
                Some(n) if n > 0 => n,
                _ => file.get_u32(&Kv::ContextLength)?,
            };
            if meta
                .opt_f32(&Kv::RopeScalingYarnLogMul)?
                .is_some_and(|m| m != 0.0)
            {
                return Err(Error::UnsupportedRopeScaling {
                    kind: "yarn with yarn_log_multiplier".into(),
                });
            }
            Ok((
                1.0,
                Some(Yarn {
                    factor,
                    original_context,
                    beta_fast: meta.opt_f32(&Kv::RopeScalingYarnBetaFast)?.unwrap_or(32.0),
                    beta_slow: meta.opt_f32(&Kv::RopeScalingYarnBetaSlow)?.unwrap_or(1.0),
                    attn_factor: meta.opt_f32(&Kv::RopeScalingAttnFactor)?.unwrap_or(1.0),
                }),
            ))
        }
        other => Err(Error::UnsupportedRopeScaling {
            kind: other.to_owned(),
        }),
    }
}

fn rope_freq_factors(file: &GgufFile, rope_dims: i32) -> Result<Option<Vec<f32>>> {
    let name = gmlx_gguf::names::Tensor::RopeFreqs.weight(0);
    if !file.has_tensor(&name) {
        return Ok(None);
    }
    let factors = file.dequantize(&name)?;
    if factors.len() != rope_dims as usize / 2 {
        return Err(Error::TensorShape {
            name,
            found: vec![factors.len() as u64],
            expected: vec![rope_dims as u64 / 2],
        });
    }
    Ok(Some(factors))
}
