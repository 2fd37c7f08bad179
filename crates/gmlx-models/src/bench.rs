//! `gmlx run --bench`: prefill and decode throughput per prompt length, on synthetic prompts.
use std::time::Instant;

use gmlx_mlx::Array;
use gmlx_tokenizer::TokenId;

use crate::blocks::decoder::Logits;
use crate::error::{Error, Result};
use crate::generate::{host_logits, prefill};
use crate::model::Model;
use crate::sample::argmax;

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct BenchRow {
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
}

/// For each prompt length: prefill a deterministic prompt, then decode `decode_tokens` greedy
/// tokens (end-of-generation ignored).
pub fn run(
    model: &Model,
    prompt_lengths: &[usize],
    decode_tokens: usize,
    chunk: usize,
) -> Result<Vec<BenchRow>> {
    let vocab = model.config().vocab as u64;
    let context = model.config().context_length;
    // warm-up: first-call costs (kernels, allocator) stay out of the table
    let mut caches = model.new_caches();
    prefill(model, &mut caches, &[1, 2, 3, 4], chunk)?;
    prompt_lengths
        .iter()
        .map(|&n| {
            if n == 0 || n + decode_tokens > context {
                return Err(Error::ContextOverflow {
                    needed: n + decode_tokens,
                    context,
                });
            }
            let prompt: Vec<TokenId> = (0..n as u64)
                .map(|i| ((i * 2_654_435_761 + 17) % vocab) as TokenId)
                .collect();
            let mut caches = model.new_caches();
            let start = Instant::now();
            let mut logits = prefill(model, &mut caches, &prompt, chunk)?;
            let prefill_s = start.elapsed().as_secs_f64();
            let start = Instant::now();
            for _ in 0..decode_tokens {
                let token = argmax(&logits);
                let input = Array::from_slice(&[token], &[1, 1]);
                logits = host_logits(&model.forward(&input, &mut caches, Logits::Last)?)?;
            }
            let decode_s = start.elapsed().as_secs_f64();
            Ok(BenchRow {
                prompt_tokens: n,
                decode_tokens,
                prefill_tok_s: n as f64 / prefill_s,
                decode_tok_s: decode_tokens as f64 / decode_s,
            })
        })
        .collect()
}
