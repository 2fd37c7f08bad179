//! The sampler's steps as MLX operations, so a decode step returns one token id to the host
//! instead of a row of logits. Same order and rules as [`super::Sampler::sample`] (bias and
//! penalties, then greedy, or top-k, top-p, min-p and temperature with the host's uniform
//! draw); the host computes in float64, this in float32, so a draw that falls within rounding
//! of a boundary between two tokens may pick the other one.
use gmlx_mlx::{ops, Array};

use crate::error::Result;

/// One row's draw: what [`super::Sampler::plan`] decided on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Draw {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    /// The uniform number the host sampler would have used (unused when greedy).
    pub uniform: f64,
    pub adjust: Option<Adjust>,
}

/// Logit changes at a few tokens: the bias, then the penalties of the tokens seen before.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Adjust {
    pub ids: Vec<u32>,
    pub bias: Vec<f32>,
    /// Whether the token counts for the penalties.
    pub seen: Vec<bool>,
    /// What the presence and frequency penalties subtract at the token.
    pub subtract: Vec<f32>,
    pub repetition_penalty: f32,
}

/// One token per row of `logits` (`[rows, vocab]`, float32): u32 `[rows]`, not evaluated.
pub fn draw_rows(logits: &Array, draws: &[Draw]) -> Result<Array> {
    let tokens = draws
        .iter()
        .enumerate()
        .map(|(i, draw)| {
            let row = gmlx_mlx::slicing::slice_axis(logits, 0, i as i32, i as i32 + 1)?;
            draw_row(&row.reshape(&[-1])?, draw)
        })
        .collect::<Result<Vec<_>>>()?;
    let tokens: Vec<&Array> = tokens.iter().collect();
    Ok(ops::concatenate(&tokens, 0)?)
}

/// One token (u32 `[1]`) from one row of float32 logits (`[vocab]`).
pub fn draw_row(logits: &Array, draw: &Draw) -> Result<Array> {
    let logits = match &draw.adjust {
        Some(adjust) => adjusted(logits, adjust)?,
        None => logits.clone(),
    };
    if draw.temperature <= 0.0 {
        return Ok(ops::indexing::argmax_axis(&logits, 0, true)?.as_type::<u32>()?);
    }
    let vocab = logits.shape()[0] as usize;
    // the candidates: the top k (or all), most likely first
    let (ids, values) = if draw.top_k > 0 && draw.top_k < vocab {
        let k = draw.top_k as i32;
        let part = ops::argpartition_axis(&logits.negative()?, k - 1, 0)?;
        let ids = gmlx_mlx::slicing::slice_axis(&part, 0, 0, k)?;
        let values = logits.take_along_axis(&ids, 0)?;
        (ids, values)
    } else {
        // made by the device (a host array of the vocabulary's ids would be copied every step)
        let ids = Array::arange::<_, u32>(0, vocab as u32, None)?;
        (ids, logits)
    };
    let order = ops::argsort_axis(&values.negative()?, 0)?;
    let ids = ids.take_along_axis(&order, 0)?;
    let values = values.take_along_axis(&order, 0)?;
    let mut keep = values.gt(Array::from_f32(f32::NEG_INFINITY))?;
    if draw.top_p < 1.0 {
        // the smallest prefix whose mass reaches top_p: the tokens before which it is not
        // reached yet
        let probs = ops::softmax_axis(&values, 0, true)?;
        let before = probs.cumsum(0, None, false)?;
        keep = before.lt(Array::from_f32(draw.top_p))?;
    }
    if draw.min_p > 0.0 {
        let first = gmlx_mlx::slicing::slice_axis(&values, 0, 0, 1)?;
        let ratio = ops::exp(values.subtract(&first)?)?;
        keep = keep.logical_and(ratio.ge(Array::from_f32(draw.min_p))?)?;
    }
    let scaled = values.divide(Array::from_f32(draw.temperature))?;
    let scaled = ops::select(&keep, &scaled, Array::from_f32(f32::NEG_INFINITY))?;
    let probs = ops::softmax_axis(&scaled, 0, true)?;
    let mass = probs.cumsum(0, None, true)?;
    // the first token whose cumulative mass passes u; the last kept one if rounding leaves u
    // above the total
    let passed = mass.le(Array::from_f32(draw.uniform as f32))?;
    let index = passed.as_type::<u32>()?.sum(None)?;
    let kept = keep.as_type::<u32>()?.sum(None)?;
    let last = ops::maximum(
        kept.subtract(Array::from_slice(&[1u32], &[]))?,
        Array::from_slice(&[0u32], &[]),
    )?;
    let index = ops::minimum(&index, &last)?.reshape(&[1])?;
    Ok(ids.take_along_axis(&index, 0)?.as_type::<u32>()?)
}

fn adjusted(logits: &Array, adjust: &Adjust) -> Result<Array> {
    let n = adjust.ids.len() as i32;
    let ids = Array::from_slice(&adjust.ids, &[n]);
    let biased = logits
        .take_along_axis(&ids, 0)?
        .add(Array::from_slice(&adjust.bias, &[n]))?;
    let rp = Array::from_f32(adjust.repetition_penalty);
    let penalised = ops::select(
        biased.gt(Array::from_f32(0.0))?,
        biased.divide(&rp)?,
        biased.multiply(&rp)?,
    )?
    .subtract(Array::from_slice(&adjust.subtract, &[n]))?;
    let seen = Array::from_slice(&adjust.seen, &[n]);
    let values = ops::select(&seen, &penalised, &biased)?;
    Ok(logits.put_along_axis(&ids, &values, 0)?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sample::{Rng, Sampler, SamplingParams};

    fn logits(rng: &mut Rng, vocab: usize) -> Vec<f32> {
        // a peaked, heavy-tailed row with ties, like a model's
        (0..vocab)
            .map(|_| {
                let u = rng.next_f64() as f32;
                if u < 0.01 {
                    1.5
                } else {
                    (u * 6.0).powi(2) / 6.0
                }
            })
            .collect()
    }

    /// The host sampler and the device draw, same seed and history, pick the same tokens.
    fn same_tokens(params: SamplingParams) {
        let vocab = 700;
        let mut host = Sampler::new(params.clone());
        let mut device = Sampler::new(params.clone());
        let mut rows = Rng::new(7);
        for step in 0..150 {
            let row = logits(&mut rows, vocab);
            let expected = host.sample(&mut row.clone());
            let draw = device.plan();
            let token = draw_row(&Array::from_slice(&row, &[vocab as i32]), &draw).expect("draw");
            token.eval().expect("eval");
            let got = token.as_slice::<u32>()[0];
            assert_eq!(got, expected, "step {step}, {params:?}");
            host.observe(&[expected]);
            device.observe(&[expected]);
        }
    }

    fn sampled() -> SamplingParams {
        SamplingParams {
            temperature: 0.9,
            seed: Some(11),
            ..SamplingParams::default()
        }
    }

    #[test]
    fn greedy_matches_the_host() {
        same_tokens(SamplingParams::default());
    }

    #[test]
    fn temperature_over_the_whole_vocabulary_matches_the_host() {
        same_tokens(sampled());
    }

    #[test]
    fn top_k_top_p_and_min_p_match_the_host() {
        for (top_k, top_p, min_p) in [(40, 1.0, 0.0), (0, 0.9, 0.0), (0, 1.0, 0.3), (25, 0.8, 0.1)]
        {
            same_tokens(SamplingParams {
                top_k,
                top_p,
                min_p,
                ..sampled()
            });
        }
    }

    #[test]
    fn bias_and_penalties_match_the_host() {
        let bias = BTreeMap::from([(3, 4.0), (10, f32::NEG_INFINITY), (500, -2.5)]);
        for temperature in [0.0, 0.9] {
            same_tokens(SamplingParams {
                temperature,
                repetition_penalty: 1.3,
                presence_penalty: 0.4,
                frequency_penalty: 0.2,
                penalty_last_n: 16,
                logit_bias: bias.clone(),
                ..sampled()
            });
        }
    }

    #[test]
    fn rows_draw_independently() {
        let vocab = 50;
        let mut rng = Rng::new(3);
        let a = logits(&mut rng, vocab);
        let b = logits(&mut rng, vocab);
        let both = Array::from_slice(&[a.clone(), b.clone()].concat(), &[2, vocab as i32]);
        let greedy = Sampler::new(SamplingParams::default()).plan();
        let tokens = draw_rows(&both, &[greedy.clone(), greedy]).expect("draw");
        tokens.eval().expect("eval");
        let argmax = |row: &[f32]| super::super::argmax(row);
        assert_eq!(tokens.as_slice::<u32>(), &[argmax(&a), argmax(&b)]);
    }
}
