//! One decode step of one sequence, the same for `Generation`, the server's scheduler and the
//! benchmark: sample from the logits, stream the text (never splitting a character, holding
//! back what may start a stop string), and decide whether the sequence ends.
use gmlx_tokenizer::{StreamDecoder, TokenId, Tokenizer};

use crate::constrain::{Constraint, Matcher};
use crate::error::{Error, Result};
use crate::sample::{Draw, Sampler, SamplingParams};
use crate::stop::StopFilter;

/// What to generate and when to stop (`GenerateOptions` is the same type).
#[derive(Debug, Clone)]
pub struct SequenceOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Text that ends generation; it is not part of the output.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens (benchmarks).
    pub ignore_eos: bool,
    /// `Some(n)`: report each token's log-probability and the `n` most likely tokens.
    pub logprobs: Option<usize>,
    /// Prompt tokens per prefill forward pass ([`crate::Generation`]; the server's scheduler
    /// uses its own).
    pub prefill_chunk: usize,
    /// The reply must be one JSON value of this schema ([`crate::constrain`]).
    pub constraint: Option<Constraint>,
}

impl Default for SequenceOptions {
    fn default() -> Self {
        SequenceOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            prefill_chunk: 512,
            constraint: None,
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

impl FinishReason {
    /// `eos`, `stop` or `length`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Eos => "eos",
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

impl std::fmt::Display for FinishReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token's log-probability under the model (before penalties and bias), and the most likely
/// alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// `(text, bytes, logprob)`, most likely first.
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub token: TokenId,
    /// Text the token releases (empty while a character is incomplete or while text might
    /// start a stop string).
    pub text: String,
    /// Set when this token ends the sequence.
    pub finish: Option<FinishReason>,
    pub logprob: Option<TokenLogprob>,
}

/// The decoding state of one sequence.
pub struct Sequence<'t> {
    tokenizer: &'t Tokenizer,
    sampler: Sampler,
    decoder: StreamDecoder<'t>,
    stop: StopFilter,
    ignore_eos: bool,
    logprobs: Option<usize>,
    budget: usize,
    generated: usize,
    finish: Option<FinishReason>,
    matcher: Option<Matcher>,
    /// The sampler draws from the whole distribution (no truncation).
    exact_first_draw: bool,
}

impl<'t> Sequence<'t> {
    /// Checks the prompt against the model's `context` and the options against its `vocab`;
    /// the budget is `max_tokens`, or what is left of the context.
    pub fn new(
        tokenizer: &'t Tokenizer,
        prompt: &[TokenId],
        options: SequenceOptions,
        context: usize,
        vocab: usize,
    ) -> Result<Sequence<'t>> {
        if prompt.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        if prompt.len() >= context {
            return Err(Error::ContextOverflow {
                needed: prompt.len() + 1,
                context,
            });
        }
        options.sampling.validate(vocab)?;
        let mut sampler = Sampler::new(options.sampling.clone());
        sampler.observe(prompt);
        Ok(Sequence {
            tokenizer,
            sampler,
            decoder: tokenizer.stream_decoder(true),
            stop: StopFilter::new(options.stop),
            ignore_eos: options.ignore_eos,
            logprobs: options.logprobs,
            budget: options.max_tokens.min(context - prompt.len()),
            generated: 0,
            finish: None,
            matcher: options.constraint.map(Matcher::new),
            exact_first_draw: options.sampling.top_k == 0
                && options.sampling.top_p >= 1.0
                && options.sampling.min_p <= 0.0,
        })
    }

    /// Tokens generated so far (an end-of-generation token does not count).
    pub fn generated(&self) -> usize {
        self.generated
    }

    pub fn finish(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Picks the next token from one row of float32 logits (modified in place by penalties)
    /// and advances the sequence.
    pub fn step(&mut self, logits: &mut [f32]) -> Result<Step> {
        let logprob_of = self.logprobs.map(|n| (n, logits.to_vec()));
        let token = match &self.matcher {
            None => self.sampler.sample(logits),
            Some(m) => {
                // Without truncation (top-k, top-p, min-p), a draw from the whole
                // distribution that the matcher takes is a draw from the masked one (the
                // rejected mass is redrawn from the mask below), so the mask's walk over the
                // vocabulary is skipped on most steps.
                let first = self.exact_first_draw.then(|| {
                    let mut tried = logits.to_vec();
                    self.sampler.sample(&mut tried)
                });
                match first.filter(|&t| m.allows(self.tokenizer, t)) {
                    Some(t) => t,
                    None => {
                        if !m.mask(self.tokenizer, logits) {
                            return Err(Error::ConstraintDeadEnd {
                                generated: self.generated,
                            });
                        }
                        self.sampler.sample(logits)
                    }
                }
            }
        };
        let logprob = logprob_of.map(|(n, raw)| logprobs(self.tokenizer, &raw, token, n));
        self.advance(token, logprob)
    }

    /// The next draw in the device's form ([`crate::sample::device`]), when this step needs no
    /// host logits (no log-probabilities, no schema); then [`Sequence::accept`] takes the
    /// token it gave.
    pub fn device_draw(&mut self) -> Option<Draw> {
        (self.logprobs.is_none() && self.matcher.is_none()).then(|| self.sampler.plan())
    }

    /// Whether the next draw depends on the tokens seen so far (penalties): then it cannot be
    /// planned before the last token is known.
    pub fn draw_needs_history(&self) -> bool {
        self.sampler.penalised()
    }

    /// Tokens this sequence may still generate at most.
    pub fn remaining(&self) -> usize {
        self.budget.saturating_sub(self.generated)
    }

    /// Advances the sequence by the token a [`Sequence::device_draw`] picked.
    pub fn accept(&mut self, token: TokenId) -> Result<Step> {
        self.advance(token, None)
    }

    fn advance(&mut self, token: TokenId, logprob: Option<TokenLogprob>) -> Result<Step> {
        self.sampler.observe(&[token]);
        if let Some(m) = &mut self.matcher {
            if !m.advance(self.tokenizer, token) {
                return Err(Error::ConstraintDeadEnd {
                    generated: self.generated,
                });
            }
        }
        if !self.ignore_eos && self.tokenizer.is_eog(token) {
            self.finish = Some(FinishReason::Eos);
            return Ok(Step {
                token,
                text: self.stop.flush(),
                finish: self.finish,
                logprob,
            });
        }
        self.generated += 1;
        let piece = self.decoder.push(token)?;
        let (mut text, stopped) = self.stop.push(&piece);
        if stopped {
            self.finish = Some(FinishReason::Stop);
        } else if self.generated >= self.budget {
            text.push_str(&self.stop.flush());
            self.finish = Some(FinishReason::Length);
        }
        Ok(Step {
            token,
            text,
            finish: self.finish,
            logprob,
        })
    }
}

/// The log-softmax of `logits` at `token`, and the `n` most likely tokens.
fn logprobs(tokenizer: &Tokenizer, logits: &[f32], token: TokenId, n: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let norm = max + sum.ln() as f32;
    let text = |id: TokenId| {
        let bytes = tokenizer.decode_bytes(&[id], false).unwrap_or_default();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    };
    let mut top = Vec::new();
    if n > 0 {
        let mut order: Vec<TokenId> = (0..logits.len() as TokenId).collect();
        let n = n.min(order.len());
        order.select_nth_unstable_by(n.saturating_sub(1), |&a, &b| {
            logits[b as usize].total_cmp(&logits[a as usize])
        });
        order.truncate(n);
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        top = order
            .iter()
            .map(|&id| {
                let (t, b) = text(id);
                (t, b, logits[id as usize] - norm)
            })
            .collect();
    }
    let (token_text, bytes) = text(token);
    TokenLogprob {
        token: token_text,
        bytes,
        logprob: logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |l| l - norm),
        top,
    }
}
