//! Low-rank hyper-connections (Qwen4 experimental): the residual is `streams` copies of the
//! hidden state, `[batch, tokens, streams, hidden]`, and no block has norms of its own. Before
//! a sublayer, each stream is RMS-normed and scaled by its own gamma (a grouped norm); a
//! low-rank gate `up(silu(down(normed) / streams))` weighs every feature of every stream
//! through a sigmoid, and the sublayer reads the mean of the gated streams. After it, stream
//! `i` adds the output scaled by `2 · sigmoid(inject_i(normed) / streams)` (1 at a zero
//! injection, a plain residual add). The model's head is the same mix without the write-back,
//! in place of an output norm. All in float32, as llama.cpp computes it.
use gmlx_mlx::{fast, ops, Array, Dtype};

use crate::blocks::linear::Linear;
use crate::error::Result;

/// One mix: `hc_{attn,ffn}_{norm,down,up,inject}` of a block, or `hc_head_{norm,down,up}`.
#[derive(Debug, Clone)]
pub struct LowRankMix {
    /// `[streams, hidden]` float32: each stream's norm gamma.
    pub norm: Array,
    /// `[rank, streams · hidden]`.
    pub down: Linear,
    /// `[streams · hidden, rank]`.
    pub up: Linear,
    /// `[streams, streams · hidden]`: the write-back logits; `None` for the head.
    pub inject: Option<Linear>,
    pub streams: i32,
    pub eps: f32,
}

/// A mix's sublayer input and (for a block) its write-back logits.
pub struct Mixed {
    /// `[batch, tokens, hidden]`, in the residual's dtype.
    pub input: Array,
    /// `[batch, tokens, streams]` float32.
    pub inject: Option<Array>,
}

impl LowRankMix {
    /// `x [batch, tokens, streams, hidden]` to the sublayer input and the write-back logits.
    pub fn mix(&self, x: &Array) -> Result<Mixed> {
        let s = x.shape().to_vec();
        let n = self.streams as f32;
        let normed = fast::rms_norm(&x.as_dtype(Dtype::Float32)?, None, self.eps)?
            .multiply(&self.norm)?
            .reshape(&[s[0], s[1], s[2] * s[3]])?;
        let low = self
            .down
            .forward(&normed)?
            .multiply(Array::from_f32(1.0 / n))?;
        let low = low.multiply(ops::sigmoid(&low)?)?;
        let gate = self.up.forward(&low)?;
        let gated = normed
            .multiply(ops::sigmoid(&gate)?)?
            .reshape(&[s[0], s[1], s[2], s[3]])?;
        let input = gated.mean_axis(2, false)?.as_dtype(x.dtype())?;
        let inject = match &self.inject {
            Some(w) => Some(w.forward(&normed)?),
            None => None,
        };
        Ok(Mixed { input, inject })
    }

    /// Stream `i` of `residual [batch, tokens, streams, hidden]` plus `out [batch, tokens,
    /// hidden]` scaled by `2 · sigmoid(inject_i / streams)`.
    pub fn combine(&self, residual: &Array, out: &Array, inject: &Array) -> Result<Array> {
        let w = ops::sigmoid(&inject.multiply(Array::from_f32(1.0 / self.streams as f32))?)?
            .multiply(Array::from_f32(2.0))?
            .expand_dims(-1)?; // [b, t, streams, 1]
        let added = out.as_dtype(Dtype::Float32)?.expand_dims(2)?.multiply(&w)?;
        Ok(residual
            .as_dtype(Dtype::Float32)?
            .add(&added)?
            .as_dtype(residual.dtype())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmlx_mlx::QuantWeight;

    fn linear(name: &str, rows: i32, cols: i32, values: Vec<f32>) -> Linear {
        Linear {
            weight: QuantWeight::dense(name, Array::from_slice(&values, &[rows, cols])),
            bias: None,
            lora: None,
        }
    }

    /// Two streams of two features against the formula worked by hand: with a zero gate
    /// (`up` all 0) every feature is halved by sigmoid(0), and the input is the mean of the
    /// normed, halved streams; a zero injection adds the output once to each stream.
    #[test]
    fn the_mix_and_the_write_back_follow_the_formula() -> Result<()> {
        let mix = LowRankMix {
            norm: Array::from_slice(&[1.0f32, 1.0, 2.0, 2.0], &[2, 2]),
            down: linear("down", 1, 4, vec![1.0, 0.0, 0.0, 0.0]),
            up: linear("up", 4, 1, vec![0.0; 4]),
            inject: Some(linear("inject", 2, 4, vec![0.0; 8])),
            streams: 2,
            eps: 0.0,
        };
        // stream 0 = [3, 4] (rms 3.5355), stream 1 = [1, 1] (rms 1)
        let x = Array::from_slice(&[3.0f32, 4.0, 1.0, 1.0], &[1, 1, 2, 2]);
        let m = mix.mix(&x)?;
        let rms0 = (12.5f32).sqrt();
        let want = [
            0.5 * (3.0 / rms0 * 0.5 + 2.0 * 0.5),
            0.5 * (4.0 / rms0 * 0.5 + 2.0 * 0.5),
        ];
        m.input.eval()?;
        for (got, want) in m.input.as_slice::<f32>().iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        let inject = m.inject.expect("a block's mix injects");
        let out = Array::from_slice(&[10.0f32, 20.0], &[1, 1, 2]);
        let combined = mix.combine(&x, &out, &inject)?;
        combined.eval()?;
        assert_eq!(combined.as_slice::<f32>(), &[13.0, 24.0, 11.0, 21.0]);
        Ok(())
    }
}
