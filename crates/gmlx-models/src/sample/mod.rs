//! Turning logits into the next token: penalties, logit bias, then greedy or a seeded draw
//! after top-k, top-p, min-p and temperature (llama.cpp's order).
pub mod device;
mod params;
mod rng;

pub use device::{Adjust, Draw};
pub use params::SamplingParams;
pub use rng::Rng;

use std::collections::HashMap;

use gmlx_tokenizer::TokenId;

/// Per-sequence sampling state: parameters, random stream, and the tokens seen for penalties.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Every token of the sequence so far (prompt and generated).
    history: Vec<TokenId>,
}

impl Sampler {
    /// `params` must have passed [`SamplingParams::validate`].
    pub fn new(params: SamplingParams) -> Sampler {
        let rng = Rng::new(params.seed.unwrap_or_else(Rng::entropy_seed));
        Sampler {
            params,
            rng,
            history: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Records tokens that count for the penalties (the prompt, then each sampled token).
    pub fn observe(&mut self, tokens: &[TokenId]) {
        self.history.extend_from_slice(tokens);
    }

    /// Picks the next token from one row of float32 logits.
    pub fn sample(&mut self, logits: &mut [f32]) -> TokenId {
        self.apply_bias_and_penalties(logits);
        let p = &self.params;
        if p.temperature <= 0.0 {
            return argmax(logits);
        }
        let mut candidates: Vec<(TokenId, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as TokenId, l))
            .collect();
        if candidates.is_empty() {
            return argmax(logits);
        }
        // most likely first, the lower id first among equals: a total order, so keeping the
        // top k by selection and sorting only those is the full sort's first k
        let order =
            |a: &(TokenId, f32), b: &(TokenId, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && candidates.len() > p.top_k {
            candidates.select_nth_unstable_by(p.top_k - 1, order);
            candidates.truncate(p.top_k);
        }
        candidates.sort_by(order);
        let probs = softmax(&candidates, 1.0);
        if p.top_p < 1.0 {
            let mut mass = 0.0;
            let keep = probs
                .iter()
                .position(|&q| {
                    mass += q;
                    mass >= f64::from(p.top_p)
                })
                .map_or(candidates.len(), |i| i + 1);
            candidates.truncate(keep.max(1));
        }
        if p.min_p > 0.0 {
            let probs = softmax(&candidates, 1.0);
            let floor = probs[0] * f64::from(p.min_p);
            let keep = probs.iter().take_while(|&&q| q >= floor).count().max(1);
            candidates.truncate(keep);
        }
        let probs = softmax(&candidates, p.temperature);
        let u = self.rng.next_f64();
        let mut acc = 0.0;
        for (i, q) in probs.iter().enumerate() {
            acc += q;
            if u < acc {
                return candidates[i].0;
            }
        }
        candidates[candidates.len() - 1].0
    }

    /// Whether a draw depends on the tokens seen so far.
    pub fn penalised(&self) -> bool {
        let p = &self.params;
        p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0
    }

    /// The next draw for [`device::draw_row`], which picks what [`Sampler::sample`] would (to
    /// rounding); takes the random number that `sample` would.
    pub fn plan(&mut self) -> Draw {
        let p = &self.params;
        let mut adjust = Adjust {
            repetition_penalty: p.repetition_penalty,
            ..Adjust::default()
        };
        let mut at = HashMap::new();
        for (&id, &bias) in &p.logit_bias {
            at.insert(id, adjust.ids.len());
            adjust.ids.push(id);
            adjust.bias.push(bias);
            adjust.seen.push(false);
            adjust.subtract.push(0.0);
        }
        for (id, count) in self.penalty_counts() {
            let i = *at.entry(id).or_insert_with(|| {
                adjust.ids.push(id);
                adjust.bias.push(0.0);
                adjust.seen.push(false);
                adjust.subtract.push(0.0);
                adjust.ids.len() - 1
            });
            adjust.seen[i] = true;
            adjust.subtract[i] = count as f32 * p.frequency_penalty + p.presence_penalty;
        }
        let p = &self.params;
        let temperature = p.temperature;
        Draw {
            temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            adjust: (!adjust.ids.is_empty()).then_some(adjust),
            uniform: if temperature > 0.0 {
                self.rng.next_f64()
            } else {
                0.0
            },
        }
    }

    /// How often each token occurs in the penalties' window (none when they are off).
    fn penalty_counts(&self) -> HashMap<TokenId, u32> {
        let mut counts: HashMap<TokenId, u32> = HashMap::new();
        if !self.penalised() {
            return counts;
        }
        let window = match self.params.penalty_last_n {
            0 => &self.history[..],
            n => &self.history[self.history.len().saturating_sub(n)..],
        };
        for &t in window {
            *counts.entry(t).or_default() += 1;
        }
        counts
    }

    fn apply_bias_and_penalties(&self, logits: &mut [f32]) {
        let p = &self.params;
        for (&id, &bias) in &p.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
        for (&id, &count) in &self.penalty_counts() {
            let Some(l) = logits.get_mut(id as usize) else {
                continue;
            };
            if *l > 0.0 {
                *l /= p.repetition_penalty;
            } else {
                *l *= p.repetition_penalty;
            }
            *l -= count as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }
}

/// Index of the largest logit (the lowest index among equals).
pub fn argmax(logits: &[f32]) -> TokenId {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as TokenId
}

fn softmax(candidates: &[(TokenId, f32)], temperature: f32) -> Vec<f64> {
    let max = candidates.first().map_or(0.0, |c| c.1);
    let weights: Vec<f64> = candidates
        .iter()
        .map(|&(_, l)| ((f64::from(l) - f64::from(max)) / f64::from(temperature)).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    weights.into_iter().map(|w| w / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SamplingParams {
        SamplingParams::default()
    }

    #[test]
    fn temperature_zero_is_greedy() {
        let mut s = Sampler::new(params());
        assert_eq!(s.sample(&mut [0.1, 3.0, 2.9, -1.0]), 1);
    }

    #[test]
    fn a_seed_repeats_exactly_and_seeds_differ() {
        let p = SamplingParams {
            temperature: 1.0,
            seed: Some(42),
            ..params()
        };
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let draw = |p: &SamplingParams| {
            let mut s = Sampler::new(p.clone());
            (0..64)
                .map(|_| s.sample(&mut logits.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(&p), draw(&p));
        let other = SamplingParams {
            seed: Some(43),
            ..p.clone()
        };
        assert_ne!(draw(&p), draw(&other));
    }

    #[test]
    fn top_k_one_and_tiny_top_p_and_high_min_p_are_greedy() {
        let logits = [0.5f32, 2.0, 1.9, 0.0];
        for p in [
            SamplingParams {
                temperature: 1.5,
                top_k: 1,
                seed: Some(1),
                ..params()
            },
            SamplingParams {
                temperature: 1.5,
                top_p: 0.01,
                seed: Some(2),
                ..params()
            },
            SamplingParams {
                temperature: 1.5,
                min_p: 0.999,
                seed: Some(3),
                ..params()
            },
        ] {
            let mut s = Sampler::new(p);
            for _ in 0..20 {
                assert_eq!(s.sample(&mut logits.clone()), 1);
            }
        }
    }

    #[test]
    fn top_k_draws_as_if_every_other_token_were_masked() {
        // ties everywhere (7 distinct values over 200 ids): the k kept are the most likely, the
        // lower ids first among equals, in the order a full sort gives
        let logits: Vec<f32> = (0..200).map(|i| ((i * 3) % 7) as f32 * 0.4).collect();
        let k = 45;
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let mut masked = vec![f32::NEG_INFINITY; logits.len()];
        for &i in &order[..k] {
            masked[i] = logits[i];
        }
        let draw = |top_k: usize, row: &[f32]| {
            let mut s = Sampler::new(SamplingParams {
                temperature: 0.8,
                top_k,
                seed: Some(11),
                ..params()
            });
            (0..200)
                .map(|_| s.sample(&mut row.to_vec()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(k, &logits), draw(0, &masked));
    }

    #[test]
    fn sampling_follows_the_distribution() {
        // two tokens with logits ln(3) and 0: probabilities 0.75 and 0.25
        let p = SamplingParams {
            temperature: 1.0,
            seed: Some(7),
            ..params()
        };
        let mut s = Sampler::new(p);
        let n = 20_000;
        let ones = (0..n)
            .filter(|_| s.sample(&mut [3f32.ln(), 0.0]) == 0)
            .count();
        let share = ones as f64 / n as f64;
        assert!((share - 0.75).abs() < 0.015, "{share}");
    }

    #[test]
    fn penalties_and_bias_change_the_choice() {
        let mut s = Sampler::new(SamplingParams {
            repetition_penalty: 2.0,
            ..params()
        });
        s.observe(&[1]);
        assert_eq!(s.sample(&mut [1.5, 2.0, 0.0]), 0, "2.0 / 2 < 1.5");
        let mut s = Sampler::new(SamplingParams {
            frequency_penalty: 0.4,
            ..params()
        });
        s.observe(&[1, 1]);
        assert_eq!(s.sample(&mut [1.5, 2.0, 0.0]), 0, "2.0 - 0.8 < 1.5");
        let mut s = Sampler::new(SamplingParams {
            presence_penalty: 0.6,
            ..params()
        });
        s.observe(&[1, 1]);
        assert_eq!(s.sample(&mut [1.5, 2.0, 0.0]), 0, "2.0 - 0.6 < 1.5");
        let bias = [(2u32, 10.0f32)].into_iter().collect();
        let mut s = Sampler::new(SamplingParams {
            logit_bias: bias,
            ..params()
        });
        assert_eq!(s.sample(&mut [1.5, 2.0, 0.0]), 2);
    }
}
