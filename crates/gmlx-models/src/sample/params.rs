use std::collections::BTreeMap;

use gmlx_tokenizer::TokenId;

use crate::error::{Error, Result};

/// How to pick tokens. The default is greedy with no penalties.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 picks the most likely token; above 0 draws from the softened distribution.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0: none).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of tokens seen before (1: off).
    pub repetition_penalty: f32,
    /// Subtract from the logit of every token seen before.
    pub presence_penalty: f32,
    /// Subtract, per occurrence, from the logit of tokens seen before.
    pub frequency_penalty: f32,
    /// How many of the most recent tokens the penalties look at (0: all).
    pub penalty_last_n: usize,
    /// Added to given tokens' logits.
    pub logit_bias: BTreeMap<TokenId, f32>,
    /// Makes a sampled run repeat exactly; `None` seeds from the clock.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: BTreeMap::new(),
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Checks every range, naming the first parameter out of it.
    pub fn validate(&self, vocab: usize) -> Result<()> {
        let bad = |name, reason: String| Err(Error::BadSampling { name, reason });
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(
                "temperature",
                format!("{} is not a finite value >= 0", self.temperature),
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", format!("{} is not in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", format!("{} is not in [0, 1]", self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return bad(
                "repetition_penalty",
                format!("{} is not a finite value > 0", self.repetition_penalty),
            );
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !v.is_finite() {
                return bad(name, format!("{v} is not finite"));
            }
        }
        if let Some((&id, _)) = self.logit_bias.iter().find(|(&id, _)| id as usize >= vocab) {
            return bad(
                "logit_bias",
                format!("token {id} is outside the vocabulary of {vocab}"),
            );
        }
        if let Some((&id, _)) = self.logit_bias.iter().find(|(_, b)| b.is_nan()) {
            return bad("logit_bias", format!("the bias of token {id} is NaN"));
        }
        Ok(())
    }
}
