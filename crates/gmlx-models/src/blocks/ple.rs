//! PLE n-gram hash embeddings (Qwen4 experimental): each token gathers `heads` rows of one
//! shared table, chosen by hashing the token with its predecessors. For the n-gram of the
//! last `n` tokens (`n` from 2 to `ngram`), `mixed = t[0]·m[0] ^ t[1]·m[1] ^ … ^ t[n-1]·m[n-1]`
//! in wrapping 64-bit arithmetic (`t[s]` is the token `s` positions back), and head `h` of
//! that n-gram reads row `mixed % vocab[h] + offset[h]`. An end-of-sequence token cuts the
//! window: it and everything before it read as the EOS id, as does any position before the
//! sequence start (the token's own EOS does not cut its own context). The hash runs on the
//! host, as llama.cpp's does.

use gmlx_mlx::{fast, ops, Array, Dtype};

use crate::blocks::linear::Linear;
use crate::error::Result;

/// The PLE module of one block: `e` (a token's table rows, concatenated to the hidden width)
/// gives a per-stream key `norm(ple_key · e)` and a value `ple_value · e`; each residual
/// stream `c` is gated by `sigmoid(signed_sqrt(key_c · norm(stream_c) / sqrt(hidden)))`, and
/// the gated values plus a dilated causal depthwise convolution of them (kernel `kernel`,
/// dilation `ngram`, SiLU) are added to the streams.
#[derive(Debug, Clone)]
pub struct Ple {
    /// `per_layer_token_embd`, `[rows, head_dim]`, read from the file's memory map.
    pub table: gmlx_gguf::MappedRows,
    pub hash: NgramHash,
    /// `[streams · hidden, hidden]`.
    pub ple_key: Linear,
    /// `[hidden, hidden]`.
    pub ple_value: Linear,
    /// `[streams, hidden]` float32 gammas of the grouped norms.
    pub norm_key: Array,
    pub norm_query: Array,
    pub norm_conv: Array,
    /// `[streams · hidden, kernel]` float32 taps.
    pub conv: Array,
    pub streams: i32,
    pub kernel: i32,
    pub eps: f32,
}

impl Ple {
    /// Positions of convolution history a sequence keeps: `(kernel - 1) · ngram`.
    pub fn history_len(&self) -> i32 {
        (self.kernel - 1) * self.hash.ngram as i32
    }

    /// The embedding `[tokens, hidden]` of table `rows` (`heads` per token).
    pub fn embed(&self, rows: &[i32]) -> Result<Array> {
        let ids: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        let values = self.table.dequantize_rows(&ids)?;
        let width = (self.hash.heads() as u64 * self.table.row_len()) as i32;
        Ok(Array::from_slice(
            &values,
            &[values.len() as i32 / width, width],
        ))
    }

    fn grouped_norm(&self, x: &Array, gamma: &Array) -> Result<Array> {
        Ok(fast::rms_norm(x, None, self.eps)?.multiply(gamma)?)
    }

    /// The streams `x [batch, tokens, streams, hidden]` with the module's output added, for
    /// embeddings `e [batch, tokens, hidden]` and the convolution's `history [batch,
    /// history_len, streams · hidden]` (float32); returns the new history too.
    pub fn forward(&self, x: &Array, e: &Array, history: &Array) -> Result<(Array, Array)> {
        let s = x.shape().to_vec();
        let (batch, tokens, streams, hidden) = (s[0], s[1], s[2], s[3]);
        let xf = x.as_dtype(Dtype::Float32)?;
        let e = e.as_dtype(x.dtype())?;
        let key = self
            .ple_key
            .forward(&e)?
            .as_dtype(Dtype::Float32)?
            .reshape(&[batch, tokens, streams, hidden])?;
        let key = self.grouped_norm(&key, &self.norm_key)?;
        let query = self.grouped_norm(&xf, &self.norm_query)?;
        let score = key
            .multiply(&query)?
            .sum_axis(-1, true)?
            .multiply(Array::from_f32(1.0 / (hidden as f32).sqrt()))?; // [b, t, c, 1]
        let magnitude = ops::maximum(&score.abs()?, Array::from_f32(1e-6))?.sqrt()?;
        let gate = ops::sigmoid(&ops::sign(&score)?.multiply(&magnitude)?)?;
        let value = self
            .ple_value
            .forward(&e)?
            .as_dtype(Dtype::Float32)?
            .expand_dims(2)?;
        let gated = value.multiply(&gate)?; // [b, t, c, h]
        let normed = self.grouped_norm(&gated, &self.norm_conv)?.reshape(&[
            batch,
            tokens,
            streams * hidden,
        ])?;
        let (conv, history) = self.convolve(&normed, history)?;
        let conv = conv.reshape(&[batch, tokens, streams, hidden])?;
        let out = xf.add(&gated)?.add(&conv)?.as_dtype(x.dtype())?;
        Ok((out, history))
    }

    /// `silu(sum_k w[:, k] · x[t - (kernel - 1 - k) · ngram])` after `history`.
    fn convolve(&self, x: &Array, history: &Array) -> Result<(Array, Array)> {
        let tokens = x.shape()[1];
        let hist = self.history_len();
        let joined = ops::concatenate(&[history.clone(), x.clone()], 1)?;
        let (batch, len, channels) = (joined.shape()[0], joined.shape()[1], joined.shape()[2]);
        let dilation = self.hash.ngram as i32;
        let mut sum: Option<Array> = None;
        for k in 0..self.kernel {
            let start = hist - (self.kernel - 1 - k) * dilation;
            let window = gmlx_mlx::slicing::slice(
                &joined,
                &[0, start, 0],
                &[batch, start + tokens, channels],
            )?;
            let tap = gmlx_mlx::slicing::slice(&self.conv, &[0, k], &[channels, k + 1])?
                .reshape(&[channels])?;
            let term = window.multiply(&tap)?;
            sum = Some(match sum {
                Some(s) => s.add(&term)?,
                None => term,
            });
        }
        let conv = sum.expect("kernel >= 1");
        let history =
            gmlx_mlx::slicing::slice(&joined, &[0, len - hist, 0], &[batch, len, channels])?;
        Ok((conv.multiply(ops::sigmoid(&conv)?)?, history))
    }
}

/// The hash's constants, from the `ple.*` keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NgramHash {
    /// Tokens per longest n-gram (at least 2).
    pub ngram: usize,
    /// Heads per n-gram length: `heads = (ngram - 1) · per_ngram`.
    pub per_ngram: usize,
    /// One multiplier per n-gram slot (`ngram` of them).
    pub multipliers: Vec<u64>,
    /// Per head: its first row in the table and how many rows it hashes into.
    pub offsets: Vec<u64>,
    pub vocab_sizes: Vec<u64>,
    pub eos: u32,
}

impl NgramHash {
    pub fn heads(&self) -> usize {
        (self.ngram - 1) * self.per_ngram
    }

    /// The table rows of `tokens` (the last `tokens.len() - history` of them are this pass's;
    /// the first `history` are the tokens before, oldest first, at most `ngram - 1`, fewer at
    /// the start of a sequence): `heads` rows per token of the pass, token-major.
    pub fn rows(&self, tokens: &[u32], history: usize) -> Vec<i32> {
        let heads = self.heads();
        let mut out = Vec::with_capacity((tokens.len() - history) * heads);
        for i in history..tokens.len() {
            let mut window = vec![u64::from(self.eos); self.ngram];
            window[0] = u64::from(tokens[i]);
            for (s, slot) in window.iter_mut().enumerate().skip(1) {
                // before the sequence start, or at/past an EOS, everything reads as EOS
                match i.checked_sub(s).map(|at| tokens[at]) {
                    Some(t) if t != self.eos => *slot = u64::from(t),
                    _ => break,
                }
            }
            for n in 2..=self.ngram {
                let mixed = window[..n]
                    .iter()
                    .zip(&self.multipliers)
                    .map(|(&t, &m)| t.wrapping_mul(m))
                    .fold(0u64, |acc, x| acc ^ x);
                for g in 0..self.per_ngram {
                    let h = (n - 2) * self.per_ngram + g;
                    let row = mixed % self.vocab_sizes[h] + self.offsets[h];
                    out.push(row as i32);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash() -> NgramHash {
        NgramHash {
            ngram: 3,
            per_ngram: 2,
            multipliers: vec![3, 5, 7],
            offsets: vec![0, 10, 20, 30],
            vocab_sizes: vec![10, 10, 10, 10],
            eos: 0,
        }
    }

    #[test]
    fn rows_hash_each_ngram_with_wrapping_multiplies_and_xor() {
        let h = hash();
        // tokens 4, 6, 9: the last one's bigram (9, 6) and trigram (9, 6, 4)
        let rows = h.rows(&[4, 6, 9], 2);
        let bigram = (9u64 * 3) ^ (6 * 5);
        let trigram = bigram ^ (4 * 7);
        assert_eq!(
            rows,
            [
                (bigram % 10) as i32,
                (bigram % 10 + 10) as i32,
                (trigram % 10 + 20) as i32,
                (trigram % 10 + 30) as i32,
            ]
        );
        // a multiplier that overflows wraps
        let big = NgramHash {
            multipliers: vec![u64::MAX, u64::MAX, 1],
            ..hash()
        };
        let rows = big.rows(&[2, 3], 1);
        let mixed = 3u64.wrapping_mul(u64::MAX) ^ 2u64.wrapping_mul(u64::MAX);
        assert_eq!(rows[0], (mixed % 10) as i32);
    }

    #[test]
    fn an_eos_and_the_sequence_start_read_as_eos() {
        let h = hash();
        // 7 after an EOS: its bigram and trigram see only EOS behind it
        let after_eos = h.rows(&[5, 0, 7], 2);
        let at_start = h.rows(&[7], 0);
        assert_eq!(after_eos, at_start);
        let bigram = 7u64 * 3; // EOS is 0: 0 · m vanishes
        assert_eq!(after_eos[0], (bigram % 10) as i32);
        // an EOS token's own rows still hash its predecessors
        let eos_itself = h.rows(&[5, 6, 0], 2);
        let bigram = 6u64 * 5;
        let trigram = bigram ^ (5 * 7);
        assert_eq!(eos_itself[0], (bigram % 10) as i32);
        assert_eq!(eos_itself[2], (trigram % 10 + 20) as i32);
    }
}
