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

/// Holds back text that might begin a stop string.
#[derive(Debug, Default)]
pub(crate) struct StopFilter {
    stops: Vec<String>,
    held: String,
}

impl StopFilter {
    pub(crate) fn new(stops: Vec<String>) -> StopFilter {
        StopFilter {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Text safe to release, and whether a stop string was hit.
    pub(crate) fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..at].to_owned();
            self.held.clear();
            return (out, true);
        }
        let keep = self
            .stops
            .iter()
            .flat_map(|s| {
                (1..s.len())
                    .filter(|&k| s.is_char_boundary(k))
                    .filter(|&k| self.held.ends_with(&s[..k]))
                    .max()
            })
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_owned();
        self.held.drain(..cut);
        (out, false)
    }

    /// Whatever is still held (generation ended without a stop string).
    pub(crate) fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_cut_and_hold_prefixes() {
        let mut f = StopFilter::new(vec!["END".to_owned()]);
        assert_eq!(f.push("abc E"), ("abc ".to_owned(), false));
        assert_eq!(f.push("N"), (String::new(), false));
        assert_eq!(f.push("Dxyz"), (String::new(), true));
        let mut f = StopFilter::new(vec!["END".to_owned()]);
        assert_eq!(f.push("EN"), (String::new(), false));
        assert_eq!(f.push("d"), ("ENd".to_owned(), false));
        assert_eq!(f.flush(), "");
    }
}
