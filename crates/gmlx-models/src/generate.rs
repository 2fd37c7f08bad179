//! Generation: chunked prefill of the prompt, then a decode loop of [`Sequence`] steps that
//! stream text pieces.
use std::time::{Duration, Instant};

use gmlx_mlx::{Array, Dtype};
use gmlx_tokenizer::{TokenId, Tokenizer};

use crate::blocks::decoder::Logits;
use crate::cache::SequenceCache;
use crate::error::{Error, Result};
use crate::model::Model;
use crate::sample::device::draw_row;
pub use crate::sequence::FinishReason;
use crate::sequence::{Sequence, SequenceOptions, Step, TokenLogprob};

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
    /// Where the host's time went in the steps submitted ahead (device sampling).
    pub ahead: AheadTimes,
}

/// The host's time in the decode steps submitted before the previous token is read
/// ([`Generation`] with device sampling), summed over `steps`: building the step's graph (the
/// forward pass and the draw), MLX's evaluation call that encodes and submits it, and waiting
/// for the previous token. A step whose build and submission take longer than the device's work
/// leaves the device idle.
#[derive(Debug, Clone, Copy, Default)]
pub struct AheadTimes {
    pub steps: usize,
    pub build: Duration,
    pub submit: Duration,
    pub wait: Duration,
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
    let last = prefill_on_device(model, cache, prompt, chunk)?;
    host_logits(&last)?.pop().ok_or(Error::EmptyPrompt)
}

/// [`prefill`], the last position's logits left on the device (`[1, 1, vocab]`, evaluated).
pub fn prefill_on_device(
    model: &Model,
    cache: &mut SequenceCache,
    prompt: &[TokenId],
    chunk: usize,
) -> Result<Array> {
    let _span = tracing::debug_span!("prefill", tokens = prompt.len()).entered();
    let mut last = None;
    for part in prompt.chunks(chunk.max(1)) {
        let tokens = Array::from_slice(part, &[1, part.len() as i32]);
        let logits = model.forward(&tokens, cache, Logits::Last)?;
        // Evaluate per chunk so a long prompt never builds one huge graph.
        logits.eval()?;
        last = Some(logits);
    }
    tracing::debug!(position = cache.position(), "prefilled");
    last.ok_or(Error::EmptyPrompt)
}

/// Whether decode steps sample on the device (the default): `GMLX_DEVICE_SAMPLING=0` copies
/// every row of logits to the host and samples there, as before.
pub fn device_sampling() -> bool {
    std::env::var("GMLX_DEVICE_SAMPLING").map_or(true, |v| v != "0")
}

/// `sequence`'s next token drawn on the device from its row of `logits` (`[vocab]` or `[1,
/// vocab]`; not evaluated yet) where [`Sequence::device_draw`] allows; `None` where it must pick
/// on the host ([`host_step`]).
pub fn device_token(sequence: &mut Sequence<'_>, logits: &Array) -> Result<Option<Array>> {
    match sequence.device_draw() {
        Some(draw) => Ok(Some(draw_row(&logits.reshape(&[-1])?, &draw)?)),
        None => Ok(None),
    }
}

/// Advances `sequence` by the token it picks from a host copy of its row of `logits`.
pub fn host_step(sequence: &mut Sequence<'_>, logits: &Array) -> Result<Step> {
    let mut row = host_logits(logits)?.pop().ok_or(Error::EmptyPrompt)?;
    sequence.step(&mut row)
}

/// What the next step starts from.
enum Next {
    /// Logits on the host (log-probabilities or a schema need them, or device sampling is off).
    Host(Vec<f32>),
    /// Logits on the device, not sampled yet.
    Device(Array),
    /// The next token, drawn on the device and already submitted for evaluation.
    Token(Array),
}

/// A running generation: an iterator of pieces.
///
/// With device sampling, a step submits the following step (forward pass and draw) before it
/// reads its own token back, so the device works while the host streams text; a step that
/// ends the sequence leaves one token of work unused.
pub struct Generation<'a> {
    model: &'a Model,
    cache: SequenceCache,
    sequence: Sequence<'a>,
    next: Option<Next>,
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
        let logits = prefill_on_device(model, &mut cache, prompt, chunk)?;
        let next = if device_sampling() {
            Next::Device(logits)
        } else {
            Next::Host(host_logits(&logits)?.pop().ok_or(Error::EmptyPrompt)?)
        };
        Ok(Generation {
            model,
            cache,
            sequence,
            next: Some(next),
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
        let Some(next) = self.next.take() else {
            return Ok(None);
        };
        let start = Instant::now();
        let _span = tracing::trace_span!("decode_step", at = self.cache.position()).entered();
        let (step, following) = match next {
            Next::Host(mut logits) => (self.sequence.step(&mut logits)?, None),
            Next::Device(logits) => match self.sequence.device_draw() {
                Some(draw) => {
                    let token = draw_row(&logits.reshape(&[-1])?, &draw)?;
                    self.read_ahead(token)?
                }
                None => {
                    let mut logits = host_logits(&logits)?.pop().ok_or(Error::EmptyPrompt)?;
                    (self.sequence.step(&mut logits)?, None)
                }
            },
            Next::Token(token) => self.read_ahead(token)?,
        };
        self.stats.generated_tokens = self.sequence.generated();
        if step.finish.is_none() {
            self.next = Some(match following {
                Some(next) => next,
                None => {
                    let input = Array::from_slice(&[step.token], &[1, 1]);
                    let logits = self.model.forward(&input, &mut self.cache, Logits::Last)?;
                    if device_sampling() {
                        Next::Device(logits)
                    } else {
                        Next::Host(host_logits(&logits)?.pop().ok_or(Error::EmptyPrompt)?)
                    }
                }
            });
        }
        self.stats.decode += start.elapsed();
        Ok(Some(Piece {
            token: step.token,
            text: step.text,
            logprob: step.logprob,
        }))
    }

    /// Submits the step after `token` (when its draw needs nothing `token` decides), then
    /// reads `token` and advances the sequence by it.
    fn read_ahead(&mut self, token: Array) -> Result<(Step, Option<Next>)> {
        let start = Instant::now();
        let following = if self.sequence.remaining() > 1 && !self.sequence.draw_needs_history() {
            let logits =
                self.model
                    .forward(&token.reshape(&[1, 1])?, &mut self.cache, Logits::Last)?;
            match self.sequence.device_draw() {
                Some(draw) => {
                    let next = draw_row(&logits.reshape(&[-1])?, &draw)?;
                    let built = Instant::now();
                    gmlx_mlx::mlx_rs::transforms::async_eval([&next])?;
                    let ahead = &mut self.stats.ahead;
                    ahead.steps += 1;
                    ahead.build += built - start;
                    ahead.submit += built.elapsed();
                    Some(Next::Token(next))
                }
                None => Some(Next::Device(logits)),
            }
        } else {
            None
        };
        let waiting = Instant::now();
        token.eval()?;
        if matches!(following, Some(Next::Token(_))) {
            self.stats.ahead.wait += waiting.elapsed();
        }
        let id = token.as_slice::<u32>()[0];
        Ok((self.sequence.accept(id)?, following))
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<Piece>;

    fn next(&mut self) -> Option<Result<Piece>> {
        match self.step() {
            Ok(Some(p)) => Some(Ok(p)),
            Ok(None) => None,
            Err(e) => {
                self.next = None;
                Some(Err(e))
            }
        }
    }
}
