//! Teacher-forced log-probabilities of a text: the log-probability the model gives each token
//! after the ones before it, and the perplexity, `exp(-mean)` over the scored tokens.
use gmlx_mlx::Array;
use gmlx_tokenizer::TokenId;

use crate::blocks::decoder::Logits;
use crate::error::{Error, Result};
use crate::model::Model;

/// The scores of one window of tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// The window's tokens (the first is context only).
    pub tokens: Vec<TokenId>,
    /// `logprobs[i]`: the natural log-probability of `tokens[i + 1]` after `tokens[..=i]`.
    pub logprobs: Vec<f32>,
}

impl Scores {
    /// Mean negative log-likelihood per scored token.
    pub fn mean_nll(&self) -> f64 {
        let sum: f64 = self.logprobs.iter().map(|&l| -f64::from(l)).sum();
        sum / self.logprobs.len().max(1) as f64
    }

    /// `exp(mean_nll)`.
    pub fn perplexity(&self) -> f64 {
        self.mean_nll().exp()
    }
}

/// Scores `tokens` (at least two, at most the model's context) in one window, running the
/// model over `chunk` tokens at a time; every token after the first is scored.
pub fn score(model: &Model, tokens: &[TokenId], chunk: usize) -> Result<Scores> {
    let context = model.config().context_length;
    if tokens.len() < 2 {
        return Err(Error::EmptyPrompt);
    }
    if tokens.len() > context {
        return Err(Error::ContextOverflow {
            needed: tokens.len(),
            context,
        });
    }
    let mut cache = model.new_cache();
    let mut logprobs = Vec::with_capacity(tokens.len() - 1);
    let chunk = chunk.max(1);
    let mut start = 0;
    while start < tokens.len() - 1 {
        let end = (start + chunk).min(tokens.len() - 1);
        let input = Array::from_slice(&tokens[start..end], &[1, (end - start) as i32]);
        let logits = model.forward(&input, &mut cache, Logits::All)?; // [1, n, vocab]
        let n = (end - start) as i32;
        let next = Array::from_slice(&tokens[start + 1..=end], &[1, n, 1]);
        let norm = logits.logsumexp_axis(-1, true)?;
        let picked = logits.take_along_axis(&next, -1)?.subtract(&norm)?;
        let picked = picked.flatten(None, None)?;
        picked.eval()?;
        logprobs.extend_from_slice(picked.as_slice::<f32>());
        start = end;
    }
    Ok(Scores {
        tokens: tokens.to_vec(),
        logprobs,
    })
}
