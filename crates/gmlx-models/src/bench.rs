//! `gmlx run --bench`: prefill and decode throughput per prompt length, on synthetic prompts.
use std::time::Instant;

use gmlx_tokenizer::{TokenId, Tokenizer};

use crate::error::{Error, Result};
use crate::generate::{AheadTimes, GenerateOptions, Generation};
use crate::model::Model;

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct BenchRow {
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// The host's time in the decode steps submitted ahead (none with host sampling, or where
    /// a draw needs the tokens before it, as repetition penalties do).
    pub ahead: AheadTimes,
}

/// For each prompt length: prefill a deterministic prompt, then decode `decode_tokens` greedy
/// tokens (end-of-generation ignored), through the same decode step as generation.
///
/// First-use costs stay out of the table: a short untimed pass runs first, and on a GPU each
/// length also runs once untimed, because MLX's CUDA backend compiles a kernel for each new
/// shape class on first use (seconds; measured on the H200 as a 7.6 tok/s first row).
pub fn run(
    model: &Model,
    tokenizer: &Tokenizer,
    prompt_lengths: &[usize],
    decode_tokens: usize,
    chunk: usize,
) -> Result<Vec<BenchRow>> {
    let vocab = model.config().vocab as u64;
    let context = model.config().context_length;
    let prompt = |n: usize| -> Vec<TokenId> {
        (0..n as u64)
            .map(|i| ((i * 2_654_435_761 + 17) % vocab) as TokenId)
            .collect()
    };
    let pass = |prompt: &[TokenId], decode: usize| -> Result<(f64, f64, AheadTimes)> {
        // one more token than decoded, so `decode` forward passes are timed
        let options = GenerateOptions {
            max_tokens: decode + 1,
            prefill_chunk: chunk,
            ignore_eos: true,
            ..Default::default()
        };
        let start = Instant::now();
        let mut generation = Generation::new(model, tokenizer, prompt, options)?;
        let prefill_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        for piece in generation.by_ref() {
            piece?;
        }
        Ok((
            prefill_s,
            start.elapsed().as_secs_f64(),
            generation.stats().ahead,
        ))
    };
    pass(&prompt(4.min(context.saturating_sub(3)).max(1)), 2)?;
    let on_gpu = matches!(
        gmlx_mlx::mlx_rs::Device::try_default()?.get_type()?,
        gmlx_mlx::mlx_rs::DeviceType::Gpu
    );
    prompt_lengths
        .iter()
        .map(|&n| {
            if n == 0 || n + decode_tokens >= context {
                return Err(Error::ContextOverflow {
                    needed: n + decode_tokens + 1,
                    context,
                });
            }
            let prompt = prompt(n);
            if on_gpu {
                pass(&prompt, 2)?;
            }
            let (prefill_s, decode_s, ahead) = pass(&prompt, decode_tokens)?;
            Ok(BenchRow {
                prompt_tokens: n,
                decode_tokens,
                prefill_tok_s: n as f64 / prefill_s,
                decode_tok_s: decode_tokens as f64 / decode_s,
                ahead,
            })
        })
        .collect()
}
