//! `qwen4exp` (Qwen4 experimental), as llama.cpp runs it (its graph calls itself pending a
//! reimplementation, and transformers differs: docs/architectures.md): the `qwen35` hybrid of
//! gated DeltaNet and gated attention, with the DeltaNet output gated by `sigmoid(z)`; QSA
//! block-sparse attention on the layers `attention.compress_ratios` gives a ratio; low-rank
//! hyper-connections instead of norms (no `output_norm`: the head's mix stands in for it); PLE
//! n-gram hash embeddings on one DeltaNet layer; an MoE in every block (softmax router,
//! renormalised, a sigmoid-gated shared expert).
use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::GgufFile;

use super::bad;
use crate::arch::qwen35;
use crate::blocks::ple::NgramHash;
use crate::config::{self, FfnSpec, MixerSpec, ModelConfig, PleSpec, QsaSpec};
use crate::error::Result;

/// A positive count under `key`, small enough for the shapes it multiplies into.
fn count(file: &GgufFile, key: Kv) -> Result<i32> {
    let v = file.get_u32(&key)?;
    i32::try_from(v)
        .ok()
        .filter(|&v| v > 0 && v <= 1 << 20)
        .ok_or_else(|| {
            bad(
                file,
                key,
                format!("must be a count from 1 to 2^20, found {v}"),
            )
        })
}

pub fn synth(file: &GgufFile) -> Result<ModelConfig> {
    let meta = file.metadata();
    let mut c = qwen35::synth(file)?;
    let count = |key: Kv| count(file, key);
    // one ratio per block of the file (prediction blocks included), 0: dense
    let blocks = file.get_u32(&Kv::BlockCount)? as usize;
    let ratios = match meta.value(&Kv::AttentionCompressRatios)? {
        Some(_) => meta.get_u32_per_layer(&Kv::AttentionCompressRatios, blocks)?,
        None => vec![0; blocks],
    };
    if let Some(&r) = ratios.iter().find(|&&r| r > 64) {
        return Err(bad(
            file,
            Kv::AttentionCompressRatios,
            format!("blocks of {r} positions: llama.cpp takes at most 64"),
        ));
    }
    let qsa = if ratios.iter().any(|&r| r > 0) {
        Some(QsaSpec {
            heads: count(Kv::AttentionIndexerHeadCount)?,
            head_dim: count(Kv::AttentionIndexerKeyLength)?,
            top_k: count(Kv::AttentionIndexerTopK)?,
            ratio: 0,
        })
    } else {
        None
    };
    for (l, layer) in c.layers.iter_mut().enumerate() {
        match &mut layer.mixer {
            MixerSpec::GatedDeltaNet(d) => d.sigmoid_gate = true,
            MixerSpec::Attention(a) if ratios[l] > 0 => {
                a.qsa = qsa.map(|q| QsaSpec {
                    ratio: ratios[l] as i32,
                    ..q
                });
            }
            _ => {}
        }
    }
    let streams = count(Kv::HyperConnectionCount)?;
    if streams < 2 {
        return Err(bad(
            file,
            Kv::HyperConnectionCount,
            format!("{streams}: hyper-connections need at least 2 streams"),
        ));
    }
    c.low_rank_hyper = Some((streams, count(Kv::HyperConnectionLowRank)?));
    c.ple = ple(file, &c)?;
    let mut moe = config::synth_moe_with_gated_shared_expert(file)?;
    moe.normalize = true;
    c.set_ffn(FfnSpec::Moe(moe));
    Ok(c)
}

/// The PLE module, when the file has one (`ple.layers`).
fn ple(file: &GgufFile, c: &ModelConfig) -> Result<Option<PleSpec>> {
    let meta = file.metadata();
    if meta.value(&Kv::PleLayers)?.is_none() {
        return Ok(None);
    }
    let layers = meta.get_u32_array(&Kv::PleLayers)?;
    let [layer] = layers[..] else {
        return Err(bad(
            file,
            Kv::PleLayers,
            format!("{} layers: llama.cpp supports one PLE layer", layers.len()),
        ));
    };
    let layer = layer as usize;
    if !matches!(
        c.layers.get(layer).map(|l| &l.mixer),
        Some(MixerSpec::GatedDeltaNet(_))
    ) {
        return Err(bad(
            file,
            Kv::PleLayers,
            format!("layer {layer} is not a linear attention layer"),
        ));
    }
    let ngram = file.get_u32(&Kv::PleNgramSize)? as usize;
    let per_ngram = file.get_u32(&Kv::PleHeadsPerNgram)? as usize;
    if !(2..=8).contains(&ngram) || per_ngram == 0 {
        return Err(bad(
            file,
            Kv::PleNgramSize,
            format!("n-grams of {ngram} with {per_ngram} heads each"),
        ));
    }
    let heads = (ngram - 1) * per_ngram;
    let multipliers = meta.get_u64_array(&Kv::PleLayerMultipliers)?.to_vec();
    let offsets = meta.get_u64_array(&Kv::PleHeadOffsets)?.to_vec();
    let vocab_sizes = meta.get_u64_array(&Kv::PleHeadVocabSizes)?.to_vec();
    if multipliers.len() < ngram || offsets.len() < heads || vocab_sizes.len() < heads {
        return Err(bad(
            file,
            Kv::PleHeadOffsets,
            format!("needs {ngram} multipliers and {heads} offsets and vocabulary sizes"),
        ));
    }
    let head_dim = file.get_u32(&Kv::EmbeddingLengthPerLayer)? as i32;
    if head_dim as usize * heads != c.hidden as usize {
        return Err(bad(
            file,
            Kv::EmbeddingLengthPerLayer,
            format!(
                "{heads} heads of {head_dim} do not make the hidden size {}",
                c.hidden
            ),
        ));
    }
    let table = file.tensor(&Tensor::PerLayerTokenEmbd.weight(0))?;
    let rows = table.n_rows();
    let needed = (0..heads)
        .map(|h| offsets[h].saturating_add(vocab_sizes[h]))
        .max()
        .unwrap_or(0);
    if vocab_sizes[..heads].contains(&0) || needed > rows {
        return Err(bad(
            file,
            Kv::PleHeadVocabSizes,
            format!("head ranges need {needed} table rows, the table has {rows}"),
        ));
    }
    Ok(Some(PleSpec {
        layer,
        hash: NgramHash {
            ngram,
            per_ngram,
            multipliers: multipliers[..ngram].to_vec(),
            offsets: offsets[..heads].to_vec(),
            vocab_sizes: vocab_sizes[..heads].to_vec(),
            eos: file.get_u32(&Kv::PleEosTokenId)?,
        },
        head_dim,
        rows: i32::try_from(rows)
            .map_err(|_| bad(file, Kv::PleHeadVocabSizes, "too many rows".into()))?,
        kernel: count(file, Kv::PleConvKernel)?,
    }))
}
