//! The state of one recurrent (linear-attention) layer for one sequence: the last inputs of
//! its causal convolution and its float32 delta-rule state. Its size does not grow with the
//! sequence.
use gmlx_mlx::Array;

#[derive(Debug, Clone, Default)]
pub struct Recurrent {
    /// `[1, kernel - 1, channels]`: the convolution's inputs before the next token.
    pub conv: Option<Array>,
    /// `[1, heads, k_dim, v_dim]` float32.
    pub state: Option<Array>,
    /// A PLE block's convolution history `[1, history, streams · hidden]` (float32).
    pub ple_history: Option<Array>,
    /// A PLE block's last tokens (at most `ngram - 1`), oldest first, for the next hash.
    pub ple_tokens: Vec<u32>,
}

impl Recurrent {
    /// Bytes of device memory held.
    pub fn nbytes(&self) -> usize {
        [&self.conv, &self.state, &self.ple_history]
            .into_iter()
            .flatten()
            .map(Array::nbytes)
            .sum()
    }
}
