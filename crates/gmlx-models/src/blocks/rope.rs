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
        let periods = custom.then(|| {
            let values: Vec<f32> = (0..half)
                .map(|i| {
                    if still.as_ref().is_some_and(|s| s[i]) {
                        return f32::INFINITY;
                    }
                    let factor = config.freq_factors.as_ref().map_or(1.0, |f| f[i]);
                    let multiplier = yarn_multiplier.as_ref().map_or(1.0, |m| m[i]);
                    base_period(i) * factor / multiplier
                })
                .collect();
            Array::from_slice(&values, &[half as i32])
        });
        let mscale = config
            .yarn
            .map_or(1.0, |y| y.attn_factor * (1.0 + 0.1 * y.factor.ln()));
        Rope {
            dims: config.dims,
            base: config.base,
            traditional: config.traditional,
            position_scale: config.position_scale,
            periods,
            mscale,
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
