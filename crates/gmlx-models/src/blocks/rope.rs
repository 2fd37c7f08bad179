use gmlx_mlx::{fast, Array};

use crate::config::{RopeConfig, Yarn};
use crate::error::Result;

/// Rotary position embedding over `[batch, heads, tokens, head_dim]`.
#[derive(Debug, Clone)]
pub struct Rope {
    dims: i32,
    base: f32,
    traditional: bool,
    position_scale: f32,
    /// With frequency factors or YaRN: the period of each rotating pair (MLX's `freqs`).
    periods: Option<Array>,
    /// Each rotating pair's angle per position, for [`Rope::rotate_host`].
    inv_freqs: Vec<f32>,
    /// YaRN's magnitude correction of the rotated values (1 otherwise).
    mscale: f32,
}

impl Rope {
    pub fn new(config: &RopeConfig) -> Rope {
        let half = (config.dims / 2) as usize;
        let base_period = |i: usize| config.base.powf(2.0 * i as f32 / config.dims as f32);
        let yarn_multiplier = config.yarn.map(|y| yarn_multipliers(config, &y));
        let still = config.sections.map(|s| imrope_still_pairs(&s, half));
        let custom = config.freq_factors.is_some() || yarn_multiplier.is_some() || still.is_some();
        let period_values = custom.then(|| {
            (0..half)
                .map(|i| {
                    if still.as_ref().is_some_and(|s| s[i]) {
                        return f32::INFINITY;
                    }
                    let factor = config.freq_factors.as_ref().map_or(1.0, |f| f[i]);
                    let multiplier = yarn_multiplier.as_ref().map_or(1.0, |m| m[i]);
                    base_period(i) * factor / multiplier
                })
                .collect::<Vec<f32>>()
        });
        // as MLX computes them (its rope's reference form): 1 / period, or
        // exp(-i * ln(base) / half)
        let inv_freqs = match &period_values {
            Some(p) => p.iter().map(|v| 1.0 / v).collect(),
            None => {
                let step = config.base.ln() / half as f32;
                (0..half).map(|i| (-(i as f32) * step).exp()).collect()
            }
        };
        let periods = period_values.map(|v| Array::from_slice(&v, &[half as i32]));
        let mscale = config
            .yarn
            .map_or(1.0, |y| y.attn_factor * (1.0 + 0.1 * y.factor.ln()));
        Rope {
            dims: config.dims,
            base: config.base,
            traditional: config.traditional,
            position_scale: config.position_scale,
            periods,
            inv_freqs,
            mscale,
        }
    }

    /// [`Rope::forward`] on the host: rotates, in place, `heads` row-major vectors of
    /// `head_dim` values of one token at `position`.
    pub fn rotate_host(&self, x: &mut [f32], head_dim: usize, position: i32) {
        let half = self.inv_freqs.len();
        let t = position as f32 * self.position_scale;
        let angles: Vec<(f32, f32)> = self
            .inv_freqs
            .iter()
            .map(|f| {
                let theta = t * f;
                (theta.cos(), theta.sin())
            })
            .collect();
        for head in x.chunks_exact_mut(head_dim.max(1)) {
            for (i, &(cos, sin)) in angles.iter().enumerate() {
                let (a, b) = if self.traditional {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                let (x1, x2) = (head[a], head[b]);
                head[a] = (x1 * cos - x2 * sin) * self.mscale;
                head[b] = (x1 * sin + x2 * cos) * self.mscale;
            }
            if self.mscale != 1.0 {
                for v in &mut head[2 * half..] {
                    *v *= self.mscale;
                }
            }
        }
    }

    /// Rotates `x` whose first token sits at position `offset`.
    pub fn forward(&self, x: &Array, offset: i32) -> Result<Array> {
        let base = if self.periods.is_some() {
            None
        } else {
            Some(self.base)
        };
        let y = fast::rope(
            x,
            self.dims,
            self.traditional,
            base,
            self.position_scale,
            offset,
            self.periods.as_ref(),
        )?;
        if self.mscale == 1.0 {
            Ok(y)
        } else {
            Ok(y.multiply(Array::from_f32(self.mscale))?)
        }
    }
}

/// The rotating pairs IMROPE gives to the extra section (position 0 for text, so they stay
/// put): pair `i` is in sector `i % sum(sections)`, and sectors cycle time, height, width
/// while each of those has pairs left (llama.cpp's `ggml_mrope_cache_init`).
fn imrope_still_pairs(sections: &[i32; 4], pairs: usize) -> Vec<bool> {
    let total: i32 = sections.iter().sum();
    (0..pairs as i32)
        .map(|i| {
            let sector = i % total.max(1);
            let moving = (0..3).any(|s| sector % 3 == s && sector < 3 * sections[s as usize]);
            !moving
        })
        .collect()
}

/// YaRN's per-pair frequency multiplier: `freq_scale` (= 1 / factor) for the low frequencies,
/// 1 for the high ones, a linear ramp between the correction dimensions (llama.cpp's
/// `ggml_rope_yarn_corr_dims` and `rope_yarn_ramp`, with `ext_factor` 1).
fn yarn_multipliers(config: &RopeConfig, yarn: &Yarn) -> Vec<f32> {
    let dims = config.dims as f32;
    let corr_dim = |rotations: f32| {
        dims * (yarn.original_context as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * config.base.ln())
    };
    let low = corr_dim(yarn.beta_fast).floor().max(0.0);
    let high = corr_dim(yarn.beta_slow).ceil().min(dims - 1.0);
    let freq_scale = 1.0 / yarn.factor;
    (0..config.dims / 2)
        .map(|i| {
            let y = (i as f32 - low) / (high - low).max(0.001);
            let ramp = 1.0 - y.clamp(0.0, 1.0);
            freq_scale * (1.0 - ramp) + ramp
        })
        .collect()
}
