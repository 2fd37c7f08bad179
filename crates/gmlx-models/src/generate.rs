//! Generation: chunked prefill of the prompt, then a decode loop of [`Sequence`] steps that
//! stream text pieces.
use std::time::{Duration, Instant};

use gmlx_mlx::{Array, Dtype};
use gmlx_tokenizer::{TokenId, Tokenizer};

use crate::blocks::decoder::Logits;
use crate::cache::SequenceCache;
use crate::error::{Error, Result};
use crate::model::Model;
pub use crate::sequence::FinishReason;
use crate::sequence::{Sequence, SequenceOptions, TokenLogprob};

/// What to generate and when to stop: the options of the decode step, and the prefill
/// chunk.
pub type GenerateOptions = SequenceOptions;

/// One generated token and the text it completes (empty while a character is incomplete or
/// while text might be the start of a stop string).
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub token: TokenId,
    pub text: String,
    pub logprob: Option<TokenLogprob>,
}

/// Timings of one generation.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub prefill: Duration,
    pub decode: Duration,
}

/// Copies rows of logits (`[rows, 1, vocab]` or `[rows, vocab]`) to the host, one `Vec` per
/// row.
pub fn host_logits(logits: &Array) -> Result<Vec<Vec<f32>>> {
    let rows = logits.shape()[0].max(1) as usize;
    let flat = logits.as_dtype(Dtype::Float32)?.flatten(None, None)?;
    flat.eval()?;
    let flat = flat.as_slice::<f32>();
    let vocab = flat.len() / rows;
    Ok(flat.chunks(vocab.max(1)).map(<[f32]>::to_vec).collect())
}

/// Runs `prompt` through the model after what `cache` holds, in chunks; returns the last
/// position's logits.
pub fn prefill(
    model: &Model,
    cache: &mut SequenceCache,
    prompt: &[TokenId],
    chunk: usize,
) -> Result<Vec<f32>> {
    let _span = tracing::debug_span!("prefill", tokens = prompt.len()).entered();
    let mut last = None;
    for part in prompt.chunks(chunk.max(1)) {
        let tokens = Array::from_slice(part, &[1, part.len() as i32]);
        let logits = model.forward(&tokens, cache, Logits::Last)?;
        // Evaluate per chunk so a long prompt never builds one huge graph.
        logits.eval()?;
        last = Some(logits);
    }
    let last = last.ok_or(Error::EmptyPrompt)?;
    tracing::debug!(position = cache.position(), "prefilled");
    host_logits(&last)?.pop().ok_or(Error::EmptyPrompt)
}

/// A running generation: an iterator of pieces.
pub struct Generation<'a> {
    model: &'a Model,
    cache: SequenceCache,
    sequence: Sequence<'a>,
    logits: Option<Vec<f32>>,
    stats: GenerationStats,
}

impl<'a> Generation<'a> {
    /// Validates the options and prefills `prompt`.
    pub fn new(
        model: &'a Model,
        tokenizer: &'a Tokenizer,
        prompt: &[TokenId],
        options: GenerateOptions,
    ) -> Result<Generation<'a>> {
        let config = model.config();
        let chunk = options.prefill_chunk;
        let sequence = Sequence::new(
            tokenizer,
            prompt,
            options,
            config.context_length,
            config.vocab as usize,
        )?;
        let mut cache = model.new_cache();
        let start = Instant::now();
        let logits = prefill(model, &mut cache, prompt, chunk)?;
        Ok(Generation {
            model,
            cache,
            sequence,
            logits: Some(logits),
            stats: GenerationStats {
                prompt_tokens: prompt.len(),
                prefill: start.elapsed(),
                ..Default::default()
            },
        })
    }

    /// Why it ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.sequence.finish()
    }

    pub fn stats(&self) -> GenerationStats {
        self.stats
    }

    fn step(&mut self) -> Result<Option<Piece>> {
        let Some(mut logits) = self.logits.take() else {
            return Ok(None);
        };
        let start = Instant::now();
        let _span = tracing::trace_span!("decode_step", at = self.cache.position()).entered();
        let step = self.sequence.step(&mut logits)?;
        self.stats.generated_tokens = self.sequence.generated();
        if step.finish.is_none() {
            let input = Array::from_slice(&[step.token], &[1, 1]);
            let next = self.model.forward(&input, &mut self.cache, Logits::Last)?;
            self.logits = host_logits(&next)?.pop();
        }
        self.stats.decode += start.elapsed();
        Ok(Some(Piece {
            token: step.token,
            text: step.text,
            logprob: step.logprob,
        }))
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<Piece>;

    fn next(&mut self) -> Option<Result<Piece>> {
        match self.step() {
            Ok(Some(p)) => Some(Ok(p)),
            Ok(None) => None,
            Err(e) => {
                self.logits = None;
                Some(Err(e))
            }
        }
    }
}
