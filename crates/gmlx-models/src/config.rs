//! `ModelConfig`: what a llama-family decoder needs, synthesized once from GGUF metadata.
use std::fmt;

use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::GgufFile;

pub use crate::blocks::mlp::Glu;
pub use crate::blocks::moe::{ExpertActivation, Gating};
pub use crate::cache::CacheKind;
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
    /// Interleaved multi-section rotary (IMROPE, Qwen3.5): rotating pairs per section (time,
    /// height, width, extra). A text token has the same position in the first three and 0 in
    /// the extra one, so the pairs IMROPE gives to the extra section do not rotate.
    pub sections: Option<[i32; 4]>,
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
    /// How router logits become expert weights.
    pub gating: Gating,
    /// Divide the selected weights by their sum.
    pub normalize: bool,
    pub activation: ExpertActivation,
    /// The router and the experts carry `.bias` tensors (gpt-oss).
    pub biases: bool,
    /// `exp_probs_b` is added to the scores to select experts, not to weigh them (DeepSeek-V3
    /// style routers).
    pub selection_bias: bool,
    /// Experts come from the token id (`ffn_gate_tid2eid`), not the scores (DeepSeek-V4's
    /// first layers); the scores still weigh them.
    pub hash_routing: bool,
    /// An always-on SwiGLU expert of this hidden size (`ffn_*_shexp`), beside the routed ones.
    pub shared_expert: Option<SharedExpertSpec>,
    /// The routed experts work at this width, between `ffn_routed_down` and `ffn_routed_up`
    /// (Kimi-K3's latent MoE), normed by `ffn_routed_norm` when `.1`.
    pub latent: Option<(i32, bool)>,
}

/// The shared expert of an MoE block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedExpertSpec {
    pub ffn: i32,
    /// Its output is scaled by `sigmoid(x · ffn_gate_inp_shexp)` (Qwen2-MoE, Qwen3-Next).
    pub gated: bool,
    /// Its SwiGLU clamped at this limit (DeepSeek-V4).
    pub clamp: Option<f32>,
}

/// What mixes information across positions in one block.
#[derive(Debug, Clone, PartialEq)]
pub enum MixerSpec {
    /// Grouped-query softmax attention with rotary positions.
    Attention(AttentionSpec),
    /// Linear attention with a recurrent state (Qwen3.5, Qwen3-Next).
    GatedDeltaNet(DeltaNetSpec),
    /// Kimi delta attention: linear attention with a decay per key channel (Kimi-K3).
    Kda(KdaSpec),
    /// Multi-head latent attention (HY4): low-rank queries, one compressed key-value row per
    /// position with a decoupled rotary part.
    Latent(LatentSpec),
    /// DeepSeek-V4's attention: one key row per position (keys are values) over a sliding
    /// window, plus, on compressed layers, one pooled row per block of `ratio` positions.
    Compressed(CompressedSpec),
}

/// One DeepSeek-V4 attention layer's shape and options.
#[derive(Debug, Clone, PartialEq)]
pub struct CompressedSpec {
    pub n_heads: i32,
    pub head_dim: i32,
    /// Trailing dimensions of each head that rotate.
    pub rope_dim: i32,
    pub q_rank: i32,
    /// The raw rows a query sees: the last `window` positions, itself included.
    pub window: i32,
    /// The output projection: `out_groups` groups of heads, each to `out_rank` features.
    pub out_groups: i32,
    pub out_rank: i32,
    /// Positions per compressed row: 0 (none), 4 (overlapped blocks, chosen by the lightning
    /// indexer) or 128 (pooled blocks, all visible).
    pub ratio: i32,
    /// The rotation of this layer's queries, keys and compressed rows (on compressed layers
    /// the second rope base, with the file's YaRN).
    pub rope: RopeConfig,
    /// On ratio-4 layers: the indexer choosing the compressed rows each query sees.
    pub indexer: Option<IndexerSpec>,
}

/// One KDA layer's shape and options.
#[derive(Debug, Clone, PartialEq)]
pub struct KdaSpec {
    pub heads: i32,
    pub head_dim: i32,
    /// Width of the causal convolutions.
    pub kernel: i32,
    /// `kda.gate_lower_bound`: the decay is `bound · sigmoid(..)` (Kimi-K3) rather than
    /// `-exp(A_log) · softplus(..)`.
    pub lower_bound: Option<f32>,
    /// The output gate is one projection, `ssm_g` (Kimi-K3), rather than `ssm_g_a`/`ssm_g_b`.
    pub full_gate: bool,
}

/// One latent attention layer's shape and options.
#[derive(Debug, Clone, PartialEq)]
pub struct LatentSpec {
    pub n_heads: i32,
    /// The queries' rank (`attn_q_a`, norm, `attn_q_b`); 0: one projection, `attn_q`.
    pub q_rank: i32,
    /// Width of the compressed key-value row (the values attention reads).
    pub kv_rank: i32,
    /// Per-head query and key dimensions without rotation, and with it.
    pub nope_dim: i32,
    pub rope_dim: i32,
    /// Per-head output dimension after decompression.
    pub v_dim: i32,
    /// `None`: nothing rotates (Kimi-K3's nope-only attention).
    pub rope: Option<RopeConfig>,
    /// Per-head sink logits.
    pub sinks: bool,
    /// The output is multiplied by `sigmoid(attn_gate · x)` before `attn_output`.
    pub output_gate: bool,
    /// The sparse key selection of a lightning indexer.
    pub indexer: Option<IndexerSpec>,
}

/// A lightning indexer: each query attends to the `top_k` keys its scores rank highest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexerSpec {
    pub heads: i32,
    pub head_dim: i32,
    pub top_k: i32,
    /// This layer computes the selection (and keeps the indexer's keys); otherwise it reuses
    /// the selection of the last layer before it that does.
    pub owns: bool,
    /// GLM-5-Next: scores pools of `kpool` consecutive keys (`.0`), each query also seeing its
    /// own incomplete pool when `.1`; `None`: scores every key.
    pub pool: Option<(i32, bool)>,
}

/// Hyper-connections: the residual stream is `streams` parallel copies of the hidden state,
/// reduced before each sublayer and written back after it with learned per-token weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HyperSpec {
    pub streams: i32,
    pub eps: f32,
    /// Scale of the write-back weights.
    pub magnitude: f32,
    /// Added to the write-back weights (HY4: `eps`; DeepSeek-V4: 0).
    pub post_eps: f32,
    /// mHC: the streams also mix through a Sinkhorn-normalised matrix, with this many
    /// iterations (DeepSeek-V4); `None` adds the output back to each stream only (HY4's iHC).
    pub sinkhorn: Option<i32>,
}

/// Which key head a value head of a gated DeltaNet reads, when there are more value heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadMap {
    /// Value head `h` reads key head `h % k_heads` (Qwen3.5: the converter reorders the
    /// value heads so).
    Tiled,
    /// Value head `h` reads key head `h / (v_heads / k_heads)` (Qwen3-Next).
    Grouped,
}

/// One gated DeltaNet layer's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaNetSpec {
    pub k_heads: i32,
    pub v_heads: i32,
    pub k_dim: i32,
    pub v_dim: i32,
    /// Width of the causal convolution.
    pub kernel: i32,
    pub head_map: HeadMap,
    /// `beta` and `alpha` come from one projection, `ssm_ba` (Qwen3-Next), rather than
    /// `ssm_beta` and `ssm_alpha`.
    pub fused_gates: bool,
    /// Queries, keys, values and the output gate come from one projection, `ssm_in`, grouped
    /// by key head (Qwen3-Next files converted before the split into `attn_qkv`/`attn_gate`).
    pub fused_input: bool,
    /// The normed output is gated by `sigmoid(z)` (Qwen4 experimental) rather than `silu(z)`.
    pub sigmoid_gate: bool,
}

/// One attention layer's shape and options.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionSpec {
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    /// Sliding window: a query sees only the last `window` positions, itself included; the
    /// layer's cache then holds at most that many.
    pub window: Option<i32>,
    pub rope: RopeConfig,
    /// Per-head RMSNorm of queries and keys before rotation (Qwen3).
    pub qk_norm: bool,
    /// Per-head sink logits (gpt-oss).
    pub sinks: bool,
    /// The projections carry `.bias` tensors.
    pub bias: bool,
    /// `attn_q` yields, per head, the queries then as many gate logits; the output is
    /// multiplied by their sigmoid before `attn_output` (Qwen3.5, Qwen3-Next).
    pub output_gate: bool,
    /// QSA block-sparse selection (Qwen4 experimental).
    pub qsa: Option<QsaSpec>,
}

/// A QSA indexer: `heads` of `head_dim`, blocks of `ratio` positions, `top_k` positions (plus
/// the incomplete block) per query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QsaSpec {
    pub heads: i32,
    pub head_dim: i32,
    pub top_k: i32,
    pub ratio: i32,
}

/// PLE n-gram hash embeddings on one block (Qwen4 experimental).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PleSpec {
    pub layer: usize,
    pub hash: crate::blocks::ple::NgramHash,
    /// Width of one table row (`embedding_length_per_layer_input`).
    pub head_dim: i32,
    /// Rows of `per_layer_token_embd`.
    pub rows: i32,
    pub kernel: i32,
}

/// The feed-forward half of one block.
#[derive(Debug, Clone, PartialEq)]
pub enum FfnSpec {
    /// A SwiGLU MLP of this hidden size, its SwiGLU clamped at `clamp` (GLM-5-Next).
    Dense {
        hidden: i32,
        clamp: Option<f32>,
    },
    Moe(MoeConfig),
}

/// One block of the model, as the file describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSpec {
    pub mixer: MixerSpec,
    pub ffn: FfnSpec,
    /// The norm in front of the feed-forward (`ffn_norm`; gpt-oss names it
    /// `post_attention_norm`).
    pub ffn_norm: Tensor,
}

impl LayerSpec {
    /// The cache this layer needs for one sequence.
    pub fn cache_kind(&self) -> CacheKind {
        match &self.mixer {
            MixerSpec::Attention(a) => match (a.window, a.qsa) {
                (Some(window), _) => CacheKind::RotatingKv { window },
                (None, Some(_)) => CacheKind::IndexedKv,
                (None, None) => CacheKind::FullKv,
            },
            MixerSpec::GatedDeltaNet(_) | MixerSpec::Kda(_) => CacheKind::Recurrent,
            MixerSpec::Latent(a) => CacheKind::Latent {
                indexer: a.indexer.is_some_and(|i| i.owns),
            },
            MixerSpec::Compressed(a) => CacheKind::Compressed {
                window: a.window,
                ratio: a.ratio,
                indexer: a.indexer.is_some(),
            },
        }
    }
}

impl fmt::Display for LayerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.mixer {
            MixerSpec::Attention(a) => {
                write!(
                    f,
                    "attention {}q/{}kv x {}",
                    a.n_heads, a.n_kv_heads, a.head_dim
                )?;
                if let Some(w) = a.window {
                    write!(f, ", window {w}")?;
                }
                let options = [
                    (a.qk_norm, "qk-norm"),
                    (a.sinks, "sinks"),
                    (a.bias, "bias"),
                    (a.output_gate, "output-gate"),
                    (a.rope.sections.is_some(), "imrope"),
                    (a.qsa.is_some(), "qsa"),
                ];
                for (on, name) in options {
                    if on {
                        write!(f, ", {name}")?;
                    }
                }
            }
            MixerSpec::GatedDeltaNet(d) => {
                write!(
                    f,
                    "gated deltanet {}k/{}v x {}/{}, conv {}",
                    d.k_heads, d.v_heads, d.k_dim, d.v_dim, d.kernel
                )?;
                if d.fused_input {
                    write!(f, ", fused ssm_in")?;
                }
            }
            MixerSpec::Kda(d) => {
                write!(f, "kda {} x {}, conv {}", d.heads, d.head_dim, d.kernel)?;
                if let Some(b) = d.lower_bound {
                    write!(f, ", decay bound {b}")?;
                }
            }
            MixerSpec::Latent(a) => {
                write!(
                    f,
                    "latent attention {}q x {}+{} (q rank {}, kv rank {}, v {})",
                    a.n_heads, a.nope_dim, a.rope_dim, a.q_rank, a.kv_rank, a.v_dim
                )?;
                if a.rope.is_none() {
                    write!(f, ", no rotation")?;
                }
                for (on, name) in [(a.sinks, "sinks"), (a.output_gate, "output-gate")] {
                    if on {
                        write!(f, ", {name}")?;
                    }
                }
                if let Some(i) = a.indexer {
                    let role = if i.owns { "indexer" } else { "shared indexer" };
                    write!(f, ", {role} top {}", i.top_k)?;
                }
            }
            MixerSpec::Compressed(a) => {
                write!(
                    f,
                    "window attention {}q x {} (rope {}, q rank {}, window {}, out {}x{})",
                    a.n_heads, a.head_dim, a.rope_dim, a.q_rank, a.window, a.out_groups, a.out_rank
                )?;
                match (a.ratio, a.indexer) {
                    (0, _) => {}
                    (r, Some(i)) => write!(f, ", compressed 1:{r}, indexer top {}", i.top_k)?,
                    (r, None) => write!(f, ", compressed 1:{r}")?,
                }
            }
        }
        match &self.ffn {
            FfnSpec::Dense { hidden, .. } => write!(f, " | mlp {hidden}"),
            FfnSpec::Moe(m) => {
                write!(
                    f,
                    " | moe {} of {} x {}",
                    m.experts_used, m.experts, m.expert_ffn
                )?;
                if let Some((width, _)) = m.latent {
                    write!(f, " at latent {width}")?;
                }
                match m.shared_expert {
                    Some(s) => write!(f, " + shared {}", s.ffn),
                    None => Ok(()),
                }
            }
        }
    }
}

/// A validated decoder configuration: what is the same for the whole model, and one
/// [`LayerSpec`] per block for what may differ between blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// `general.architecture`.
    pub arch: String,
    /// Decoder blocks run at inference (`block_count` less any multi-token-prediction blocks).
    pub n_layers: usize,
    pub hidden: i32,
    pub vocab: i32,
    pub rms_eps: f32,
    /// `attention.layer_norm_epsilon` (0 when absent, as llama.cpp leaves it): LayerNorms.
    pub layer_norm_eps: f32,
    pub context_length: usize,
    /// One entry per block, in order: what each layer mixes with, its feed-forward, its cache.
    pub layers: Vec<LayerSpec>,
    /// Several residual streams instead of one (HY4).
    pub hyper: Option<HyperSpec>,
    /// The streams' final reduction is their mean (GLM-5-Next), not `output_hc_*`.
    pub hyper_mean_head: bool,
    /// Low-rank hyper-connections: `(streams, rank)`; the blocks have no norms of their own
    /// and the head's mix stands in for the output norm (Qwen4 experimental).
    pub low_rank_hyper: Option<(i32, i32)>,
    /// PLE n-gram hash embeddings.
    pub ple: Option<PleSpec>,
    /// Attention residuals across blocks, banked every this many blocks (Kimi-K3).
    pub attn_res: Option<usize>,
    /// The gated activation of dense MLPs and shared experts.
    pub glu: Glu,
}

impl ModelConfig {
    /// Whether what enters a block is the hidden state alone: no residual streams
    /// (hyper-connections) and no indexer selection one block hands to the next. Only then
    /// can a pass start at a block from the hidden states an earlier pass left there.
    pub fn blocks_pass_only_hidden_states(&self) -> bool {
        let shares_selection = self.layers.iter().any(|l| {
            matches!(&l.mixer, MixerSpec::Latent(spec)
                if spec.indexer.as_ref().is_some_and(|ix| !ix.owns))
        });
        self.hyper.is_none()
            && self.attn_res.is_none()
            && self.low_rank_hyper.is_none()
            && !shares_selection
    }

    /// Edits every attention layer (the architecture's options, by layer index).
    pub fn set_attention(&mut self, edit: impl Fn(usize, &mut AttentionSpec)) {
        for (l, layer) in self.layers.iter_mut().enumerate() {
            if let MixerSpec::Attention(a) = &mut layer.mixer {
                edit(l, a);
            }
        }
    }

    /// Every layer's feed-forward becomes `ffn`.
    pub fn set_ffn(&mut self, ffn: FfnSpec) {
        for layer in &mut self.layers {
            layer.ffn = ffn.clone();
        }
    }
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
    Ok(synth_blocks(file, traditional_rope, false)?.0)
}

/// [`synth_decoder`] for hybrids that mark their recurrent blocks with 0 in the per-block
/// `attention.head_count_kv` array (Kimi-K3, GLM-5-Next): the plan (those blocks planned as
/// attention over all heads, for the architecture to replace) and which blocks are marked.
pub fn synth_hybrid_decoder(
    file: &GgufFile,
    traditional_rope: bool,
) -> Result<(ModelConfig, Vec<bool>)> {
    synth_blocks(file, traditional_rope, true)
}

fn synth_blocks(
    file: &GgufFile,
    traditional_rope: bool,
    zero_marks_recurrent: bool,
) -> Result<(ModelConfig, Vec<bool>)> {
    let arch = file.architecture()?.to_owned();
    let meta = file.metadata();
    let blocks = positive(file, Kv::BlockCount, file.get_u32(&Kv::BlockCount)?)? as usize;
    // multi-token-prediction blocks sit after the decoder's and are skipped at inference
    let nextn = meta.opt_u32(&Kv::NextnPredictLayers)?.unwrap_or(0) as usize;
    if nextn >= blocks {
        return Err(bad(
            file,
            Kv::NextnPredictLayers,
            format!("{nextn} prediction layers leave none of the {blocks} blocks"),
        ));
    }
    let n_layers = blocks - nextn;
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
    // one count for every layer, or an array with one per layer
    let kv_per_layer = if meta
        .get(&meta.resolve(&Kv::AttentionHeadCountKv)?)
        .is_some()
    {
        meta.get_u32_per_layer(&Kv::AttentionHeadCountKv, blocks)?
    } else {
        vec![n_heads as u32; blocks]
    };
    let recurrent: Vec<bool> = kv_per_layer[..n_layers]
        .iter()
        .map(|&v| zero_marks_recurrent && v == 0)
        .collect();
    let kv_per_layer = kv_per_layer[..n_layers]
        .iter()
        .map(|&v| {
            if zero_marks_recurrent && v == 0 {
                return Ok(n_heads);
            }
            let kv = positive(file, Kv::AttentionHeadCountKv, v)?;
            if n_heads % kv != 0 {
                return Err(bad(
                    file,
                    Kv::AttentionHeadCountKv,
                    format!("{kv} does not divide the {n_heads} query heads"),
                ));
            }
            Ok(kv)
        })
        .collect::<Result<Vec<i32>>>()?;
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
        // a hybrid's attention may rotate nothing (GLM-5-Next)
        Some(0) if zero_marks_recurrent => 0,
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
    let rope = RopeConfig {
        dims: rope_dims,
        base,
        traditional: traditional_rope,
        position_scale,
        freq_factors,
        yarn,
        sections: None,
    };
    let layers = kv_per_layer
        .iter()
        .map(|&kv| LayerSpec {
            mixer: MixerSpec::Attention(AttentionSpec {
                n_heads,
                n_kv_heads: kv,
                head_dim,
                window: None,
                rope: rope.clone(),
                qk_norm: false,
                sinks: false,
                bias: false,
                output_gate: false,
                qsa: None,
            }),
            ffn: FfnSpec::Dense {
                hidden: ffn_hidden,
                clamp: None,
            },
            ffn_norm: Tensor::FfnNorm,
        })
        .collect();
    let config = ModelConfig {
        arch,
        n_layers,
        hidden,
        vocab,
        rms_eps,
        layer_norm_eps: meta.opt_f32(&Kv::AttentionLayerNormEpsilon)?.unwrap_or(0.0),
        context_length,
        layers,
        hyper: None,
        hyper_mean_head: false,
        low_rank_hyper: None,
        ple: None,
        attn_res: None,
        glu: Glu::Silu,
    };
    Ok((config, recurrent))
}

/// Reads the expert counts and sizes of an MoE decoder; the router and expert options start
/// as softmax gating, renormalised, SwiGLU experts without biases.
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
        gating: Gating::Softmax,
        normalize: true,
        activation: ExpertActivation::SwiGlu,
        biases: false,
        selection_bias: false,
        hash_routing: false,
        shared_expert: None,
        latent: None,
    })
}

/// [`synth_moe`] with the sigmoid-gated shared expert of `expert_shared_feed_forward_length`
/// (Qwen3-Next, Qwen3.5 MoE).
pub fn synth_moe_with_gated_shared_expert(file: &GgufFile) -> Result<MoeConfig> {
    let mut moe = synth_moe(file)?;
    let ffn = positive(
        file,
        Kv::ExpertSharedFeedForwardLength,
        file.get_u32(&Kv::ExpertSharedFeedForwardLength)?,
    )?;
    moe.shared_expert = Some(SharedExpertSpec {
        ffn,
        gated: true,
        clamp: None,
    });
    Ok(moe)
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

#[cfg(test)]
mod tests {
    use super::*;
    use gmlx_gguf::{GgufWriter, Limits, Value};

    /// A header-only llama file with the given extra keys.
    fn header(extra: &[(&str, Value)]) -> GgufFile {
        let mut w = GgufWriter::new();
        let base: [(&str, Value); 8] = [
            ("general.architecture", "llama".into()),
            ("llama.block_count", 3u32.into()),
            ("llama.embedding_length", 64u32.into()),
            ("llama.attention.head_count", 4u32.into()),
            ("llama.feed_forward_length", 128u32.into()),
            ("llama.attention.layer_norm_rms_epsilon", 1e-5f32.into()),
            ("llama.context_length", 256u32.into()),
            ("llama.vocab_size", 32u32.into()),
        ];
        for (k, v) in base.into_iter().chain(extra.iter().cloned()) {
            w.add_kv(k, v).expect("kv");
        }
        GgufFile::from_bytes(w.to_bytes(), &Limits::default()).expect("header")
    }

    fn kv_heads(c: &ModelConfig) -> Vec<i32> {
        c.layers
            .iter()
            .map(|l| match &l.mixer {
                MixerSpec::Attention(a) => a.n_kv_heads,
                MixerSpec::GatedDeltaNet(_)
                | MixerSpec::Kda(_)
                | MixerSpec::Latent(_)
                | MixerSpec::Compressed(_) => 0,
            })
            .collect()
    }

    #[test]
    fn per_layer_kv_heads_and_prediction_layers_shape_the_plan() {
        let c = synth_decoder(&header(&[]), true).expect("config");
        assert_eq!(c.n_layers, 3);
        assert_eq!(kv_heads(&c), [4, 4, 4]);
        let file = header(&[
            ("llama.attention.head_count_kv", vec![2u32, 4, 1].into()),
            ("llama.nextn_predict_layers", 1u32.into()),
        ]);
        let c = synth_decoder(&file, true).expect("config");
        // the last block predicts the next-next token: not part of the decoder
        assert_eq!((c.n_layers, c.layers.len()), (2, 2));
        assert_eq!(kv_heads(&c), [2, 4]);
        assert_eq!(c.layers[0].cache_kind(), CacheKind::FullKv);
    }

    #[test]
    fn inconsistent_per_layer_arrays_are_refused_naming_the_key() {
        let short = header(&[("llama.attention.head_count_kv", vec![2u32, 4].into())]);
        let e = synth_decoder(&short, true).expect_err("two entries for three blocks");
        assert!(e.to_string().contains("head_count_kv"), "{e}");
        let uneven = header(&[("llama.attention.head_count_kv", vec![3u32, 4, 4].into())]);
        let e = synth_decoder(&uneven, true).expect_err("3 does not divide 4");
        assert!(e.to_string().contains("head_count_kv"), "{e}");
        let all = header(&[("llama.nextn_predict_layers", 3u32.into())]);
        let e = synth_decoder(&all, true).expect_err("no decoder blocks left");
        assert!(e.to_string().contains("nextn_predict_layers"), "{e}");
    }
}
