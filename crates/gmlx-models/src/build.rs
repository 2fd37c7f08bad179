//! The shared builder: a model's blocks assembled from its per-layer plan, each weight read by
//! its GGUF tensor name and checked against the shape the plan implies.

use gmlx_gguf::names::Tensor;
use gmlx_gguf::GgufFile;
use gmlx_mlx::{Array, Dtype, QuantWeight};

use crate::blocks::attention::{Attention, QkvProjection, Qsa};
use crate::blocks::attn_res::{BlockResidual, ResidualMix};
use crate::blocks::compressed::{hadamard, BlockIndexer, CompressedAttention, Compressor};
use crate::blocks::decoder::{BlockHyper, Decoder, DecoderLayer, Embedding, Ffn, LowRankBlock};
use crate::blocks::delta_net::{DeltaGates, DeltaInput, GatedDeltaNet};
use crate::blocks::hyper::{HyperConnection, HyperHead, StreamsHead};
use crate::blocks::kda::{Kda, KdaGate};
use crate::blocks::latent::{Indexer, LatentAttention, LatentIndexer, LatentQuery, PoolIndexer};
use crate::blocks::linear::Linear;
use crate::blocks::low_rank_hyper::LowRankMix;
use crate::blocks::mixer::Mixer;
use crate::blocks::mlp::{Glu, SwiGlu};
use crate::blocks::moe::{ExpertPlacement, Experts, MoeFfn, RoutedLatent, Router, SharedExpert};
use crate::blocks::norm::RmsNorm;
use crate::blocks::ple::Ple;
use crate::blocks::rope::Rope;
use crate::config::{
    AttentionSpec, CompressedSpec, DeltaNetSpec, FfnSpec, HyperSpec, IndexerSpec, KdaSpec,
    LatentSpec, LayerSpec, MixerSpec, ModelConfig, MoeConfig, RopeConfig,
};
use crate::error::{Error, Result};
use crate::load::LoadOptions;
use crate::model::Model;
use crate::weights::Weights;

/// The model `config` describes, its weights read from `file`. A preflight first looks up
/// every tensor the plan needs: anything missing or misshapen is one error naming all of it,
/// before a byte is read.
pub fn model(file: &GgufFile, config: &ModelConfig, options: &LoadOptions) -> Result<Model> {
    let dtype = options.dtype;
    let preflight = Weights::preflight(file, dtype);
    decoder(&preflight, config)?;
    let problems = preflight.problems();
    if !problems.is_empty() {
        return Err(Error::Tensors { problems });
    }
    let placement = options
        .experts
        .as_deref()
        .map(|p| p as &dyn ExpertPlacement);
    let decoder = decoder(&Weights::new(file, dtype, placement), config)?;
    Ok(Model::new(config.clone(), decoder))
}

fn decoder(w: &Weights<'_>, config: &ModelConfig) -> Result<Decoder> {
    let c = config;
    let layers = c
        .layers
        .iter()
        .enumerate()
        .map(|(l, spec)| layer(w, c, l, spec))
        .collect::<Result<Vec<_>>>()?;
    let output = w.optional_matrix(&Tensor::Output.weight(0), c.vocab, c.hidden)?;
    let embd = Tensor::TokenEmbd.weight(0);
    // On a GPU the table stays resident: a row read from the file needs the token id on the
    // host, which would wait for every decoded token before the next step could be queued.
    let on_gpu = gmlx_mlx::device::current() == Some(gmlx_mlx::device::DeviceKind::Gpu);
    let token_embd = match &output {
        // untied on the CPU: only looked up, so read from the file as tokens ask
        Some(_) if !on_gpu => match w.mapped_rows(&embd, &[c.hidden as u64, c.vocab as u64])? {
            Some(rows) => Embedding::Mapped(rows),
            // a preflight, which has recorded any problem
            None => Embedding::Resident(QuantWeight::dense(embd.clone(), Array::from_f32(0.0))),
        },
        _ => Embedding::Resident(w.matrix(&embd, c.vocab, c.hidden)?),
    };
    Ok(Decoder {
        token_embd,
        layers,
        output_norm: if c.low_rank_hyper.is_some() {
            None
        } else {
            Some(w.rms_norm(&Tensor::OutputNorm.weight(0), c.hidden, c.rms_eps)?)
        },
        output,
        hyper_head: match c.low_rank_hyper {
            Some((streams, rank)) => Some((
                streams,
                StreamsHead::LowRank(Box::new(low_rank_mix(
                    w,
                    c,
                    0,
                    streams,
                    rank,
                    [Tensor::HcHeadNorm, Tensor::HcHeadDown, Tensor::HcHeadUp],
                    None,
                )?)),
            )),
            None => c
                .hyper
                .map(|h| -> Result<_> {
                    let (n, flat) = (h.streams as u64, (h.streams * c.hidden) as u64);
                    if c.hyper_mean_head {
                        return Ok((h.streams, StreamsHead::Mean));
                    }
                    Ok((
                        h.streams,
                        StreamsHead::Weighted(HyperHead {
                            mix: w.array_f32(&Tensor::HcHeadFn.weight(0), &[flat, n])?,
                            base: w.array_f32(&Tensor::HcHeadBase.weight(0), &[n])?,
                            scale: w.array_f32(&Tensor::HcHeadScale.weight(0), &[1])?,
                            eps: h.eps,
                            norm_eps: c.rms_eps,
                        }),
                    ))
                })
                .transpose()?,
        },
        res_head: c
            .attn_res
            .map(|_| -> Result<ResidualMix> {
                Ok(ResidualMix {
                    score: w.array_f32(&Tensor::OutputResScore.weight(0), &[c.hidden as u64])?,
                    eps: c.rms_eps,
                })
            })
            .transpose()?,
        dtype: w.dtype(),
    })
}

/// The pre/post weights `[fn, base, scale]` of one sublayer of layer `l`.
fn hyper_connection(
    w: &Weights<'_>,
    c: &ModelConfig,
    l: usize,
    h: &HyperSpec,
    names: [Tensor; 3],
) -> Result<HyperConnection> {
    let (n, flat) = (h.streams as u64, (h.streams * c.hidden) as u64);
    // pre and post weights per stream, then (mHC) the stream-to-stream mixing matrix
    let (rows, scales) = match h.sinkhorn {
        Some(_) => ((2 + n) * n, 3),
        None => (2 * n, 2),
    };
    Ok(HyperConnection {
        mix: w.array_f32(&names[0].weight(l), &[flat, rows])?,
        base: w.array_f32(&names[1].weight(l), &[rows])?,
        scale: w.array_f32(&names[2].weight(l), &[scales])?,
        streams: h.streams,
        eps: h.eps,
        magnitude: h.magnitude,
        post_eps: h.post_eps,
        sinkhorn: h.sinkhorn,
        norm_eps: c.rms_eps,
    })
}

fn layer(w: &Weights<'_>, c: &ModelConfig, l: usize, spec: &LayerSpec) -> Result<DecoderLayer> {
    let mixer = match &spec.mixer {
        MixerSpec::Attention(a) => Mixer::Attention(attention(w, c, l, a)?),
        MixerSpec::GatedDeltaNet(d) => Mixer::GatedDeltaNet(delta_net(w, c, l, d)?),
        MixerSpec::Kda(d) => Mixer::Kda(Box::new(kda(w, c, l, d)?)),
        MixerSpec::Latent(a) => Mixer::Latent(Box::new(latent(w, c, l, a)?)),
        MixerSpec::Compressed(a) => Mixer::Compressed(Box::new(compressed(w, c, l, a)?)),
    };
    let hyper = c
        .hyper
        .map(|h| -> Result<BlockHyper> {
            Ok(BlockHyper {
                attn: hyper_connection(
                    w,
                    c,
                    l,
                    &h,
                    [Tensor::HcAttnFn, Tensor::HcAttnBase, Tensor::HcAttnScale],
                )?,
                ffn: hyper_connection(
                    w,
                    c,
                    l,
                    &h,
                    [Tensor::HcFfnFn, Tensor::HcFfnBase, Tensor::HcFfnScale],
                )?,
            })
        })
        .transpose()?;
    let ffn = match &spec.ffn {
        FfnSpec::Dense { hidden, clamp } => Ffn::Dense(dense(w, c, l, *hidden, *clamp)?),
        FfnSpec::Moe(m) => Ffn::Moe(Box::new(moe(w, c, l, m)?)),
    };
    let mix = |t: Tensor| -> Result<ResidualMix> {
        Ok(ResidualMix {
            score: w.array_f32(&t.weight(l), &[c.hidden as u64])?,
            eps: c.rms_eps,
        })
    };
    let attn_res = c
        .attn_res
        .map(|block_size| -> Result<BlockResidual> {
            Ok(BlockResidual {
                attn: mix(Tensor::AttnResScore)?,
                ffn: mix(Tensor::FfnResScore)?,
                banks: l.is_multiple_of(block_size.max(1)),
            })
        })
        .transpose()?;
    let low_rank = c
        .low_rank_hyper
        .map(|(streams, rank)| -> Result<LowRankBlock> {
            let mix = |names: [Tensor; 3], inject: Tensor| {
                low_rank_mix(w, c, l, streams, rank, names, Some(inject))
            };
            Ok(LowRankBlock {
                attn: mix(
                    [Tensor::HcAttnNorm, Tensor::HcAttnDown, Tensor::HcAttnUp],
                    Tensor::HcAttnInject,
                )?,
                ffn: mix(
                    [Tensor::HcFfnNorm, Tensor::HcFfnDown, Tensor::HcFfnUp],
                    Tensor::HcFfnInject,
                )?,
                ple: match &c.ple {
                    Some(p) if p.layer == l => ple(w, c, l, streams, p)?,
                    _ => None,
                },
            })
        })
        .transpose()?;
    // low-rank hyper-connections norm the blocks' inputs themselves
    let norm = |t: &str| -> Result<Option<RmsNorm>> {
        if low_rank.is_some() {
            return Ok(None);
        }
        Ok(Some(w.rms_norm(t, c.hidden, c.rms_eps)?))
    };
    Ok(DecoderLayer {
        attn_norm: norm(&Tensor::AttnNorm.weight(l))?,
        mixer,
        ffn_norm: norm(&spec.ffn_norm.weight(l))?,
        ffn,
        hyper,
        attn_res,
        low_rank,
    })
}

/// One low-rank hyper-connection mix of layer `l`: `names` are its norm, down and up tensors,
/// `inject` its write-back (none for the head's).
fn low_rank_mix(
    w: &Weights<'_>,
    c: &ModelConfig,
    l: usize,
    streams: i32,
    rank: i32,
    names: [Tensor; 3],
    inject: Option<Tensor>,
) -> Result<LowRankMix> {
    let flat = streams * c.hidden;
    Ok(LowRankMix {
        norm: w.stream_gammas(&names[0].weight(l), streams, c.hidden)?,
        down: linear(w, names[1], l, rank, flat, false)?,
        up: linear(w, names[2], l, flat, rank, false)?,
        inject: inject
            .map(|t| linear(w, t, l, streams, flat, false))
            .transpose()?,
        streams,
        eps: c.rms_eps,
    })
}

/// The PLE module of layer `l`; `None` in a preflight (which has recorded any problem).
fn ple(
    w: &Weights<'_>,
    c: &ModelConfig,
    l: usize,
    streams: i32,
    p: &crate::config::PleSpec,
) -> Result<Option<Ple>> {
    let (h, flat) = (c.hidden, streams * c.hidden);
    let gamma = |t: Tensor| w.stream_gammas(&t.weight(l), streams, h);
    let ple_key = linear(w, Tensor::PleKey, l, flat, h, false)?;
    let ple_value = linear(w, Tensor::PleValue, l, h, h, false)?;
    let norm_key = gamma(Tensor::PleNormKey)?;
    let norm_query = gamma(Tensor::PleNormQuery)?;
    let norm_conv = gamma(Tensor::PleNormConv)?;
    let conv = w.array_f32(
        &Tensor::PleConv1d.weight(l),
        &[p.kernel as u64, flat as u64],
    )?;
    let table = w.mapped_rows(
        &Tensor::PerLayerTokenEmbd.weight(0),
        &[p.head_dim as u64, p.rows as u64],
    )?;
    Ok(table.map(|table| Ple {
        table,
        hash: p.hash.clone(),
        ple_key,
        ple_value,
        norm_key,
        norm_query,
        norm_conv,
        conv,
        streams,
        kernel: p.kernel,
        eps: c.rms_eps,
    }))
}

/// The `[rows, cols]` projection `t` of layer `l`, with its `.bias` when `bias`.
fn linear(
    w: &Weights<'_>,
    t: Tensor,
    l: usize,
    rows: i32,
    cols: i32,
    bias: bool,
) -> Result<Linear> {
    Ok(Linear {
        weight: w.matrix(&t.weight(l), rows, cols)?,
        bias: bias
            .then(|| w.array(&t.bias(l), &[rows as u64]))
            .transpose()?,
        lora: None,
    })
}

/// Layer `l`'s query, key and value projections: the fused `attn_qkv` when the file has it
/// (with its fused bias, when `bias`), else the three tensors.
fn qkv_projection(
    w: &Weights<'_>,
    l: usize,
    q_rows: i32,
    kv_rows: i32,
    hidden: i32,
    bias: bool,
) -> Result<QkvProjection> {
    if w.has_tensor(&Tensor::AttnQkv.weight(l)) {
        return Ok(QkvProjection::Fused {
            attn_qkv: linear(w, Tensor::AttnQkv, l, q_rows + 2 * kv_rows, hidden, bias)?,
            q_rows,
            kv_rows,
        });
    }
    Ok(QkvProjection::Separate {
        attn_q: linear(w, Tensor::AttnQ, l, q_rows, hidden, bias)?,
        attn_k: linear(w, Tensor::AttnK, l, kv_rows, hidden, bias)?,
        attn_v: linear(w, Tensor::AttnV, l, kv_rows, hidden, bias)?,
    })
}

fn attention(w: &Weights<'_>, c: &ModelConfig, l: usize, a: &AttentionSpec) -> Result<Attention> {
    let (q_out, kv_out, h) = (a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim, c.hidden);
    let q_rows = if a.output_gate { 2 * q_out } else { q_out };
    let head_norm = |t: Tensor| {
        a.qk_norm
            .then(|| w.rms_norm(&t.weight(l), a.head_dim, c.rms_eps))
            .transpose()
    };
    let sinks = a
        .sinks
        .then(|| -> Result<_> {
            Ok(w.array(&Tensor::AttnSinks.weight(l), &[a.n_heads as u64])?
                .as_dtype(Dtype::Float32)?)
        })
        .transpose()?;
    Ok(Attention {
        qkv: qkv_projection(w, l, q_rows, kv_out, h, a.bias)?,
        attn_output: linear(w, Tensor::AttnOutput, l, h, q_out, a.bias)?,
        attn_q_norm: head_norm(Tensor::AttnQNorm)?,
        attn_k_norm: head_norm(Tensor::AttnKNorm)?,
        n_heads: a.n_heads,
        n_kv_heads: a.n_kv_heads,
        head_dim: a.head_dim,
        rope: Rope::new(&a.rope),
        sinks,
        window: a.window,
        output_gate: a.output_gate,
        qsa: a
            .qsa
            .map(|q| -> Result<Box<Qsa>> {
                Ok(Box::new(Qsa {
                    q_proj: linear(w, Tensor::IndexerQProj, l, q.heads * q.head_dim, h, false)?,
                    k_proj: linear(w, Tensor::IndexerKProj, l, q.head_dim, h, false)?,
                    q_norm: w.rms_norm(&Tensor::IndexerQNorm.weight(l), q.head_dim, c.rms_eps)?,
                    k_norm: w.rms_norm(&Tensor::IndexerKNorm.weight(l), q.head_dim, c.rms_eps)?,
                    heads: q.heads,
                    head_dim: q.head_dim,
                    top_k: q.top_k,
                    ratio: q.ratio,
                    rope: Rope::new(&a.rope),
                    block_rope: Rope::new(&RopeConfig {
                        position_scale: a.rope.position_scale * q.ratio as f32,
                        ..a.rope.clone()
                    }),
                }))
            })
            .transpose()?,
    })
}

fn latent(w: &Weights<'_>, c: &ModelConfig, l: usize, a: &LatentSpec) -> Result<LatentAttention> {
    let h = c.hidden;
    let heads = a.n_heads;
    let dims = |v: &[i32]| v.iter().map(|&d| d as u64).collect::<Vec<u64>>();
    let indexer = match a.indexer.filter(|i| i.owns) {
        Some(
            i @ IndexerSpec {
                pool: Some((kpool, select_tail)),
                ..
            },
        ) => {
            let d = i.head_dim as u64;
            Some(LatentIndexer::Pools(PoolIndexer {
                attn_q_b: linear(
                    w,
                    Tensor::IndexerAttnQB,
                    l,
                    i.heads * i.head_dim,
                    a.q_rank,
                    false,
                )?,
                attn_k: linear(w, Tensor::IndexerAttnK, l, i.head_dim, h, false)?,
                k_norm_weight: w.array(&Tensor::IndexerKNorm.weight(l), &[d])?,
                k_norm_bias: w.array(&Tensor::IndexerKNorm.bias(l), &[d])?,
                kpool_gate: linear(w, Tensor::IndexerCompressorGate, l, i.head_dim, h, false)?,
                kpool_ape: w
                    .array_f32(&Tensor::IndexerCompressorApe.weight(l), &[d, kpool as u64])?,
                proj: linear(w, Tensor::IndexerProj, l, i.heads, h, false)?,
                heads: i.heads,
                head_dim: i.head_dim,
                top_k: i.top_k,
                kpool,
                select_tail,
                eps: c.layer_norm_eps,
            }))
        }
        Some(i) => Some(LatentIndexer::Keys(Indexer {
            attn_q_b: linear(
                w,
                Tensor::IndexerAttnQB,
                l,
                i.heads * i.head_dim,
                a.q_rank,
                false,
            )?,
            attn_k: linear(w, Tensor::IndexerAttnK, l, i.head_dim, h, false)?,
            k_norm_weight: w.array(&Tensor::IndexerKNorm.weight(l), &[i.head_dim as u64])?,
            k_norm_bias: w.array(&Tensor::IndexerKNorm.bias(l), &[i.head_dim as u64])?,
            proj: linear(w, Tensor::IndexerProj, l, i.heads, h, false)?,
            heads: i.heads,
            head_dim: i.head_dim,
            top_k: i.top_k,
            eps: c.rms_eps,
        })),
        None => None,
    };
    let q_out = heads * (a.nope_dim + a.rope_dim);
    let query = if a.q_rank > 0 {
        LatentQuery::LowRank {
            attn_q_a: linear(w, Tensor::AttnQA, l, a.q_rank, h, false)?,
            attn_q_a_norm: w.rms_norm(&Tensor::AttnQANorm.weight(l), a.q_rank, c.rms_eps)?,
            attn_q_b: linear(w, Tensor::AttnQB, l, q_out, a.q_rank, false)?,
        }
    } else {
        LatentQuery::Full {
            attn_q: linear(w, Tensor::AttnQ, l, q_out, h, false)?,
        }
    };
    Ok(LatentAttention {
        query,
        attn_kv_a_mqa: linear(w, Tensor::AttnKvAMqa, l, a.kv_rank + a.rope_dim, h, false)?,
        attn_kv_a_norm: w.rms_norm(&Tensor::AttnKvANorm.weight(l), a.kv_rank, c.rms_eps)?,
        attn_k_b: w.array(
            &Tensor::AttnKB.weight(l),
            &dims(&[a.nope_dim, a.kv_rank, heads]),
        )?,
        attn_v_b: w.array(
            &Tensor::AttnVB.weight(l),
            &dims(&[a.kv_rank, a.v_dim, heads]),
        )?,
        attn_gate: a
            .output_gate
            .then(|| linear(w, Tensor::AttnGate, l, heads * a.v_dim, h, false))
            .transpose()?,
        attn_output: linear(w, Tensor::AttnOutput, l, h, heads * a.v_dim, false)?,
        sinks: a
            .sinks
            .then(|| w.array_f32(&Tensor::AttnSinks.weight(l), &[heads as u64]))
            .transpose()?,
        indexer,
        shares_selection: a.indexer.is_some_and(|i| !i.owns),
        n_heads: heads,
        nope_dim: a.nope_dim,
        rope_dim: a.rope_dim,
        kv_rank: a.kv_rank,
        v_dim: a.v_dim,
        rope: a.rope.as_ref().map(Rope::new),
    })
}

fn compressed(
    w: &Weights<'_>,
    c: &ModelConfig,
    l: usize,
    a: &CompressedSpec,
) -> Result<CompressedAttention> {
    let h = c.hidden;
    let (heads, hd) = (a.n_heads, a.head_dim);
    let compressor = |names: [Tensor; 4], dim: i32, hadamard: Option<Array>| -> Result<_> {
        let overlap = a.ratio == 4;
        let width = if overlap { 2 * dim } else { dim };
        Ok(Compressor {
            kv: linear(w, names[0], l, width, h, false)?,
            gate: linear(w, names[1], l, width, h, false)?,
            ape: w.array_f32(&names[2].weight(l), &[width as u64, a.ratio as u64])?,
            norm: w.rms_norm(&names[3].weight(l), dim, c.rms_eps)?,
            ratio: a.ratio,
            overlap,
            dim,
            rope_dim: a.rope_dim,
            rope: Rope::new(&RopeConfig {
                position_scale: a.rope.position_scale * a.ratio as f32,
                ..a.rope.clone()
            }),
            hadamard,
        })
    };
    let attn_compressor = [
        Tensor::AttnCompressorKv,
        Tensor::AttnCompressorGate,
        Tensor::AttnCompressorApe,
        Tensor::AttnCompressorNorm,
    ];
    let indexer_compressor = [
        Tensor::IndexerCompressorKv,
        Tensor::IndexerCompressorGate,
        Tensor::IndexerCompressorApe,
        Tensor::IndexerCompressorNorm,
    ];
    let indexer = match a.indexer {
        Some(i) => {
            let rotation = hadamard(i.head_dim).as_dtype(w.dtype())?;
            Some(BlockIndexer {
                attn_q_b: linear(
                    w,
                    Tensor::IndexerAttnQB,
                    l,
                    i.heads * i.head_dim,
                    a.q_rank,
                    false,
                )?,
                proj: linear(w, Tensor::IndexerProj, l, i.heads, h, false)?,
                compressor: compressor(indexer_compressor, i.head_dim, Some(rotation.clone()))?,
                heads: i.heads,
                head_dim: i.head_dim,
                top_k: i.top_k,
                hadamard: rotation,
            })
        }
        None => None,
    };
    Ok(CompressedAttention {
        attn_q_a: linear(w, Tensor::AttnQA, l, a.q_rank, h, false)?,
        attn_q_a_norm: w.rms_norm(&Tensor::AttnQANorm.weight(l), a.q_rank, c.rms_eps)?,
        attn_q_b: linear(w, Tensor::AttnQB, l, heads * hd, a.q_rank, false)?,
        attn_kv: linear(w, Tensor::AttnKv, l, hd, h, false)?,
        attn_kv_norm: w.rms_norm(&Tensor::AttnKvANorm.weight(l), hd, c.rms_eps)?,
        attn_output_a: w.grouped_matrix(
            &Tensor::AttnOutputA.weight(l),
            a.out_groups,
            a.out_rank,
            heads * hd / a.out_groups,
        )?,
        attn_output_b: linear(
            w,
            Tensor::AttnOutputB,
            l,
            h,
            a.out_groups * a.out_rank,
            false,
        )?,
        sinks: w.array_f32(&Tensor::AttnSinks.weight(l), &[heads as u64])?,
        compressor: (a.ratio > 0)
            .then(|| compressor(attn_compressor, hd, None))
            .transpose()?,
        indexer,
        n_heads: heads,
        head_dim: hd,
        rope_dim: a.rope_dim,
        window: a.window,
        out_groups: a.out_groups,
        eps: c.rms_eps,
        rope: Rope::new(&a.rope),
    })
}

fn delta_net(
    w: &Weights<'_>,
    c: &ModelConfig,
    l: usize,
    d: &DeltaNetSpec,
) -> Result<GatedDeltaNet> {
    let h = c.hidden;
    let channels = 2 * d.k_heads * d.k_dim + d.v_heads * d.v_dim;
    let values = d.v_heads * d.v_dim;
    let gates = if d.fused_gates {
        DeltaGates::Fused {
            ssm_ba: linear(w, Tensor::SsmBetaAlpha, l, 2 * d.v_heads, h, false)?,
        }
    } else {
        DeltaGates::Split {
            ssm_beta: linear(w, Tensor::SsmBeta, l, d.v_heads, h, false)?,
            ssm_alpha: linear(w, Tensor::SsmAlpha, l, d.v_heads, h, false)?,
        }
    };
    let input = if d.fused_input {
        DeltaInput::Fused {
            ssm_in: linear(w, Tensor::SsmIn, l, channels + values, h, false)?,
        }
    } else {
        DeltaInput::Split {
            attn_qkv: linear(w, Tensor::AttnQkv, l, channels, h, false)?,
            attn_gate: linear(w, Tensor::AttnGate, l, values, h, false)?,
        }
    };
    Ok(GatedDeltaNet {
        input,
        gates,
        ssm_conv1d: w.array(
            &Tensor::SsmConv1d.weight(l),
            &[d.kernel as u64, channels as u64],
        )?,
        ssm_dt: w.array_f32(&Tensor::SsmDt.bias(l), &[d.v_heads as u64])?,
        ssm_a: w.array_f32(&Tensor::SsmA.base(l), &[d.v_heads as u64])?,
        ssm_norm: w.rms_norm(&Tensor::SsmNorm.weight(l), d.v_dim, c.rms_eps)?,
        ssm_out: linear(w, Tensor::SsmOut, l, h, values, false)?,
        k_heads: d.k_heads,
        v_heads: d.v_heads,
        k_dim: d.k_dim,
        v_dim: d.v_dim,
        kernel: d.kernel,
        head_map: d.head_map,
        eps: c.rms_eps,
        sigmoid_gate: d.sigmoid_gate,
    })
}

fn kda(w: &Weights<'_>, c: &ModelConfig, l: usize, d: &KdaSpec) -> Result<Kda> {
    let h = c.hidden;
    let inner = d.heads * d.head_dim;
    let taps = [Tensor::SsmConv1dQ, Tensor::SsmConv1dK, Tensor::SsmConv1dV]
        .iter()
        .map(|t| w.conv_taps(&t.weight(l), d.kernel, inner))
        .collect::<Result<Vec<Array>>>()?;
    let gate = if d.full_gate {
        KdaGate::Full {
            ssm_g: linear(w, Tensor::SsmG, l, inner, h, false)?,
        }
    } else {
        KdaGate::LowRank {
            ssm_g_a: linear(w, Tensor::SsmGA, l, d.head_dim, h, false)?,
            ssm_g_b: linear(w, Tensor::SsmGB, l, inner, d.head_dim, false)?,
        }
    };
    Ok(Kda {
        attn_q: linear(w, Tensor::AttnQ, l, inner, h, false)?,
        attn_k: linear(w, Tensor::AttnK, l, inner, h, false)?,
        attn_v: linear(w, Tensor::AttnV, l, inner, h, false)?,
        // a preflight's placeholders are scalars: nothing to join
        ssm_conv1d: if taps.iter().any(|t| t.ndim() == 0) {
            Array::from_f32(0.0)
        } else {
            gmlx_mlx::ops::concatenate(&taps, 0)?
        },
        ssm_f_a: linear(w, Tensor::SsmFA, l, d.head_dim, h, false)?,
        ssm_f_b: linear(w, Tensor::SsmFB, l, inner, d.head_dim, false)?,
        ssm_dt: w.array_f32(&Tensor::SsmDt.bias(l), &[inner as u64])?,
        ssm_a: w.array_f32(&Tensor::SsmA.base(l), &[d.heads as u64])?,
        ssm_beta: linear(w, Tensor::SsmBeta, l, d.heads, h, false)?,
        gate,
        ssm_norm: w.rms_norm(&Tensor::SsmNorm.weight(l), d.head_dim, c.rms_eps)?,
        attn_output: linear(w, Tensor::AttnOutput, l, h, inner, false)?,
        heads: d.heads,
        head_dim: d.head_dim,
        kernel: d.kernel,
        lower_bound: d.lower_bound,
        eps: c.rms_eps,
    })
}

/// The SwiGLU MLP of layer `l`.
fn dense(
    w: &Weights<'_>,
    c: &ModelConfig,
    l: usize,
    hidden: i32,
    clamp: Option<f32>,
) -> Result<SwiGlu> {
    if hidden <= 0 {
        return Err(Error::BadConfig {
            key: format!("{}.feed_forward_length", c.arch),
            reason: "missing for a dense feed-forward".into(),
        });
    }
    let h = c.hidden;
    Ok(SwiGlu {
        ffn_gate: linear(w, Tensor::FfnGate, l, hidden, h, false)?,
        ffn_up: linear(w, Tensor::FfnUp, l, hidden, h, false)?,
        ffn_down: linear(w, Tensor::FfnDown, l, h, hidden, false)?,
        glu: clamp.map_or(c.glu, |limit| Glu::SiluClamped { limit }),
    })
}

fn moe(w: &Weights<'_>, c: &ModelConfig, l: usize, m: &MoeConfig) -> Result<MoeFfn> {
    let (e, ff, h) = (m.experts, m.expert_ffn, c.hidden);
    // the experts' own width: the latent one where they work there
    let d = m.latent.map_or(h, |(width, _)| width);
    let latent = m
        .latent
        .map(|(width, normed)| -> Result<RoutedLatent> {
            Ok(RoutedLatent {
                ffn_routed_down: linear(w, Tensor::FfnRoutedDown, l, width, h, false)?,
                ffn_routed_norm: normed
                    .then(|| w.rms_norm(&Tensor::FfnRoutedNorm.weight(l), width, c.rms_eps))
                    .transpose()?,
                ffn_routed_up: linear(w, Tensor::FfnRoutedUp, l, h, width, false)?,
            })
        })
        .transpose()?;
    let bias = |t: Tensor, rows: i32| {
        m.biases
            .then(|| w.array(&t.bias(l), &[rows as u64, e as u64]))
            .transpose()
    };
    // the gate (0) or up (1) biases, from their own tensor or half of the fused one
    let gate_up_bias = |half: i32| -> Result<Option<Array>> {
        let fused = Tensor::FfnGateUpExps.bias(l);
        if !(m.biases && w.has_tensor(&fused)) {
            return bias([Tensor::FfnGateExps, Tensor::FfnUpExps][half as usize], ff);
        }
        let both = w.array(&fused, &[2 * ff as u64, e as u64])?;
        if both.ndim() < 2 {
            return Ok(Some(both)); // a preflight's placeholder
        }
        Ok(Some(gmlx_mlx::slicing::slice(
            &both,
            &[0, half * ff],
            &[e, (half + 1) * ff],
        )?))
    };
    Ok(MoeFfn {
        router: Router {
            ffn_gate_inp: linear(w, Tensor::FfnGateInp, l, e, h, m.biases)?,
            gating: m.gating,
            selection_bias: m
                .selection_bias
                .then(|| w.array_f32(&Tensor::FfnExpProbsB.bias(l), &[e as u64]))
                .transpose()?,
            top_k: m.experts_used,
            normalize: m.normalize,
            scale: m.weights_scale,
            hash: if m.hash_routing {
                let dims = [m.experts_used as u64, c.vocab as u64];
                w.mapped_rows(&Tensor::FfnGateTid2eid.weight(l), &dims)?
            } else {
                None
            },
        },
        experts: Experts {
            store: w.expert_store(
                l,
                [
                    &Tensor::FfnGateExps.weight(l),
                    &Tensor::FfnUpExps.weight(l),
                    &Tensor::FfnDownExps.weight(l),
                ],
                &Tensor::FfnGateUpExps.weight(l),
                e,
                (ff, d),
            )?,
            ffn_gate_exps_b: gate_up_bias(0)?,
            ffn_up_exps_b: gate_up_bias(1)?,
            ffn_down_exps_b: bias(Tensor::FfnDownExps, d)?,
            activation: m.activation,
        },
        shared: m
            .shared_expert
            .map(|s| -> Result<SharedExpert> {
                Ok(SharedExpert {
                    mlp: SwiGlu {
                        ffn_gate: linear(w, Tensor::FfnGateShexp, l, s.ffn, h, false)?,
                        ffn_up: linear(w, Tensor::FfnUpShexp, l, s.ffn, h, false)?,
                        ffn_down: linear(w, Tensor::FfnDownShexp, l, h, s.ffn, false)?,
                        glu: c.glu,
                    },
                    ffn_gate_inp_shexp: s
                        .gated
                        .then(|| w.vector(&Tensor::FfnGateInpShexp.weight(l), h))
                        .transpose()?,
                    clamp: s.clamp,
                })
            })
            .transpose()?,
        latent,
        hooks: Vec::new(),
    })
}
