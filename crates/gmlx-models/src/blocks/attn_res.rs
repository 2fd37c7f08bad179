//! Attention residuals (Kimi-K3): within one token, a block's sublayers read a softmax mix of
//! the running residual and the residuals banked at earlier checkpoint blocks (every
//! `attn_res.block_size`-th block banks its input, and its residual restarts from its
//! mixer's output). Nothing is cached across tokens.
//!
//! Between blocks the residual travels as `[batch, tokens, streams, hidden]`: the banked
//! checkpoints in order, then the running sum last.
use gmlx_mlx::{ops, Array, Dtype};

use crate::error::Result;
use gmlx_mlx::slicing::slice;

/// A mix's scoring weights: `[hidden]`, float32.
#[derive(Debug, Clone)]
pub struct ResidualMix {
    pub score: Array,
    pub eps: f32,
}

impl ResidualMix {
    /// `x [b, t, streams, hidden]` to `[b, t, hidden]`: each stream scored by
    /// `sum(rms_norm(stream) · score)`, the raw streams summed with the softmax of the scores
    /// (in float32).
    pub fn mix(&self, x: &Array) -> Result<Array> {
        let xf = x.as_dtype(Dtype::Float32)?;
        let mean_square = xf.square()?.mean_axis(-1, true)?;
        let normed = xf.multiply(mean_square.add(Array::from_f32(self.eps))?.rsqrt()?)?;
        let scores = normed.multiply(&self.score)?.sum_axis(-1, false)?; // [b, t, streams]
        let weights = ops::softmax_axis(&scores, -1, true)?.expand_dims(-1)?;
        Ok(xf
            .multiply(&weights)?
            .sum_axis(2, false)?
            .as_dtype(x.dtype())?)
    }
}

/// One block's two mixes and whether it banks its input.
#[derive(Debug, Clone)]
pub struct BlockResidual {
    pub attn: ResidualMix,
    pub ffn: ResidualMix,
    pub banks: bool,
}

/// The running residual (the last stream) of `x [b, t, streams, hidden]`, `[b, t, hidden]`.
pub fn running(x: &Array) -> Result<Array> {
    let s = x.shape().to_vec();
    Ok(slice(x, &[0, 0, s[2] - 1, 0], &[s[0], s[1], s[2], s[3]])?.squeeze_axes(&[2])?)
}

/// The banked checkpoints of `x` (every stream but the last), `None` when there are none.
pub fn banked(x: &Array) -> Result<Option<Array>> {
    let s = x.shape().to_vec();
    if s[2] <= 1 {
        return Ok(None);
    }
    Ok(Some(slice(
        x,
        &[0, 0, 0, 0],
        &[s[0], s[1], s[2] - 1, s[3]],
    )?))
}

/// `banked` followed by `running [b, t, hidden]` as the last stream.
pub fn join(banked: Option<&Array>, running: &Array) -> Result<Array> {
    let last = running.expand_dims(2)?;
    Ok(match banked {
        Some(b) => ops::concatenate(&[b.clone(), last], 2)?,
        None => last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_stream_mixes_to_itself_and_two_streams_by_their_scores() -> Result<()> {
        let mix = ResidualMix {
            score: Array::from_slice(&[1.0f32, 0.0], &[2]),
            eps: 0.0,
        };
        let one = Array::from_slice(&[3.0f32, -1.0], &[1, 1, 1, 2]);
        let out = mix.mix(&one)?;
        out.eval()?;
        assert_eq!(out.as_slice::<f32>(), &[3.0, -1.0]);
        // streams [1, 1] and [-1, 1]: normed first features 1 and -1, weights e/(e+1/e), ...
        let two = Array::from_slice(&[1.0f32, 1.0, -1.0, 1.0], &[1, 1, 2, 2]);
        let out = mix.mix(&two)?;
        out.eval()?;
        let (e, ie) = (1f32.exp(), (-1f32).exp());
        let (p, q) = (e / (e + ie), ie / (e + ie));
        let want = [p - q, 1.0];
        for (got, want) in out.as_slice::<f32>().iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        Ok(())
    }
}
