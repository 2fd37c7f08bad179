//! What the engine receives (a validated request) and what it streams back.
pub use gmlx_models::TokenLogprob;
use gmlx_models::{FinishReason, SamplingParams, TokenId};

/// A request checked at the edge: prompt tokenized, sampling validated, limits applied.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    pub id: String,
    pub prompt: Vec<TokenId>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Text that ends generation; not part of the output.
    pub stop: Vec<String>,
    /// `Some(n)`: report each token's logprob and the `n` most likely alternatives.
    pub logprobs: Option<usize>,
    /// Keep generating past end-of-generation tokens (llama-server's `ignore_eos`).
    pub ignore_eos: bool,
    /// The reply must be one JSON value of a schema (`response_format`).
    pub constraint: Option<gmlx_models::constrain::Constraint>,
    /// Choices to generate (`n`): rows that share the prefilled prompt, choice `i` sampled
    /// with seed `seed + i`.
    pub n: usize,
    /// The `request` span the handler opened: the scheduler's work for this request (its
    /// prefill chunks, its end) is recorded inside it.
    pub span: tracing::Span,
}

/// One generated token of choice `index` and the text it releases.
#[derive(Debug, Clone)]
pub struct TokenOut {
    pub index: u32,
    pub token: TokenId,
    pub text: String,
    pub logprob: Option<TokenLogprob>,
}

/// How choice `index` of a request ended (a request ends when all its choices have).
#[derive(Debug, Clone, Copy)]
pub struct Done {
    pub index: u32,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

/// What the engine sends a request's handler.
#[derive(Debug)]
pub enum Event {
    Token(TokenOut),
    Done(Done),
    Failed(crate::error::Error),
}
