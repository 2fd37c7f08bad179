//! Generation: chunked prefill of the prompt, then a decode loop that samples, stops on an
//! end-of-generation token, a stop string or the token budget, and streams text pieces that
//! never split a UTF-8 character.
use std::time::{Duration, Instant};

use gmlx_mlx::{Array, Dtype};
use gmlx_tokenizer::{StreamDecoder, TokenId, Tokenizer};

use crate::blocks::decoder::Logits;
use crate::cache::KvCache;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::sample::{Sampler, SamplingParams};
use crate::stop::StopFilter;

/// What to generate and when to stop.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Text that ends generation; it is not part of the output.
    pub stop: Vec<String>,
    /// Prompt tokens per prefill forward pass.
    pub prefill_chunk: usize,
    /// Keep going past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            prefill_chunk: 512,
            ignore_eos: false,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token.
    Eos,
    /// A stop string.
    Stop,
    /// `max_tokens`, or the model's context.
    Length,
}

/// One generated token and the text it completes (empty while a character is incomplete or
/// while text might be the start of a stop string).
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub token: TokenId,
    pub text: String,
}

/// Timings of one generation.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub prefill: Duration,
    pub decode: Duration,
}

/// Copies one row of logits (`[1, 1, vocab]`) to the host.
pub(crate) fn host_logits(logits: &Array) -> Result<Vec<f32>> {
    let flat = logits.as_dtype(Dtype::Float32)?.flatten(None, None)?;
    flat.eval()?;
    Ok(flat.as_slice::<f32>().to_vec())
}

/// Runs `prompt` through the model in chunks; returns the last position's logits.
pub fn prefill(
    model: &Model,
    caches: &mut [KvCache],
    prompt: &[TokenId],
    chunk: usize,
) -> Result<Vec<f32>> {
    if prompt.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    let mut last = None;
    for part in prompt.chunks(chunk.max(1)) {
        let tokens = Array::from_slice(part, &[1, part.len() as i32]);
        let logits = model.forward(&tokens, caches, Logits::Last)?;
        // Evaluate per chunk so a long prompt never builds one huge graph.
        logits.eval()?;
        last = Some(logits);
    }
    match last {
        Some(l) => host_logits(&l),
        None => Err(Error::EmptyPrompt),
    }
}

/// A running generation: an iterator of pieces.
pub struct Generation<'a> {
    model: &'a Model,
    tokenizer: &'a Tokenizer,
    caches: Vec<KvCache>,
    sampler: Sampler,
    decoder: StreamDecoder<'a>,
    options: GenerateOptions,
    logits: Option<Vec<f32>>,
    stop: StopFilter,
    finish: Option<FinishReason>,
    stats: GenerationStats,
    budget: usize,
}

impl<'a> Generation<'a> {
    /// Validates the options and prefills `prompt`.
    pub fn new(
        model: &'a Model,
        tokenizer: &'a Tokenizer,
        prompt: &[TokenId],
        options: GenerateOptions,
    ) -> Result<Generation<'a>> {
        options.sampling.validate(model.config().vocab as usize)?;
        let context = model.config().context_length;
        if prompt.len() >= context {
            return Err(Error::ContextOverflow {
                needed: prompt.len() + 1,
                context,
            });
        }
        let mut caches = model.new_caches();
        let start = Instant::now();
        let logits = prefill(model, &mut caches, prompt, options.prefill_chunk)?;
        let mut sampler = Sampler::new(options.sampling.clone());
        sampler.observe(prompt);
        let budget = options.max_tokens.min(context - prompt.len());
        Ok(Generation {
            model,
            tokenizer,
            caches,
            sampler,
            decoder: tokenizer.stream_decoder(true),
            logits: Some(logits),
            stop: StopFilter::new(options.stop.clone()),
            finish: None,
            stats: GenerationStats {
                prompt_tokens: prompt.len(),
                prefill: start.elapsed(),
                ..Default::default()
            },
            options,
            budget,
        })
    }

    /// Why it ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    pub fn stats(&self) -> GenerationStats {
        self.stats
    }

    fn step(&mut self) -> Result<Option<Piece>> {
        if self.finish.is_some() {
            return Ok(None);
        }
        let start = Instant::now();
        let mut logits = match self.logits.take() {
            Some(l) => l,
            None => return Ok(None),
        };
        let token = self.sampler.sample(&mut logits);
        self.sampler.observe(&[token]);
        if !self.options.ignore_eos && self.tokenizer.is_eog(token) {
            self.finish = Some(FinishReason::Eos);
            let text = self.stop.flush();
            self.stats.decode += start.elapsed();
            return Ok(Some(Piece { token, text }));
        }
        self.stats.generated_tokens += 1;
        let decoded = self.decoder.push(token)?;
        let (mut text, stopped) = self.stop.push(&decoded);
        if stopped {
            self.finish = Some(FinishReason::Stop);
        }
        if self.finish.is_none() && self.stats.generated_tokens >= self.budget {
            self.finish = Some(FinishReason::Length);
            text.push_str(&self.stop.flush());
        }
        if self.finish.is_none() {
            let input = Array::from_slice(&[token], &[1, 1]);
            let next = self.model.forward(&input, &mut self.caches, Logits::Last)?;
            self.logits = Some(host_logits(&next)?);
        }
        self.stats.decode += start.elapsed();
        Ok(Some(Piece { token, text }))
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<Piece>;

    fn next(&mut self) -> Option<Result<Piece>> {
        match self.step() {
            Ok(Some(p)) => Some(Ok(p)),
            Ok(None) => None,
            Err(e) => {
                self.finish = Some(FinishReason::Length);
                Some(Err(e))
            }
        }
    }
}
