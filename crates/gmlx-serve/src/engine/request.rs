//! What the engine receives (a validated request) and what it streams back.
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
}

/// A token's log-probability under the model (before penalties and bias).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<(String, Vec<u8>, f32)>,
}

/// One generated token and the text it releases.
#[derive(Debug, Clone)]
pub struct TokenOut {
    pub token: TokenId,
    pub text: String,
    pub logprob: Option<TokenLogprob>,
}

/// How a request ended.
#[derive(Debug, Clone, Copy)]
pub struct Done {
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
