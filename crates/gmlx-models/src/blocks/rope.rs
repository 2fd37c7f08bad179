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
    /// The same as MLX's CUDA rope computes them, float32 `[dims / 2]`, for a fused CUDA kernel
    /// ([`Rope::fused`]): its decode steps rotate keys as the prompt's pass (MLX's rope) did.
    inv_freq_array: Array,
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
        let inv_freqs: Vec<f32> = match &period_values {
            Some(p) => p.iter().map(|v| 1.0 / v).collect(),
            None => {
                let step = config.base.ln() / half as f32;
                (0..half).map(|i| (-(i as f32) * step).exp()).collect()
            }
        };
        let periods = period_values
            .as_ref()
            .map(|v| Array::from_slice(v, &[half as i32]));
        // as MLX's CUDA rope computes them where it has no periods: exp2(-(i / half) * log2(base))
        let device_inv_freqs: Vec<f32> = match &period_values {
            Some(_) => inv_freqs.clone(),
            None => {
                let log2_base = config.base.log2();
                (0..half)
                    .map(|i| (-(i as f32 / half as f32) * log2_base).exp2())
                    .collect()
            }
        };
        let inv_freq_array = Array::from_slice(&device_inv_freqs, &[half as i32]);
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
            inv_freq_array,
            mscale,
        }
    }

    /// The rotation of heads of `head_dim` rows at `position` (int32, one value) as a fused
    /// CUDA kernel applies it ([`gmlx_mlx::cuda_qmv::Rotation`]): MLX's traditional rotation
    /// without YaRN's magnitude correction; `None` for any other.
    pub fn fused<'a>(
        &'a self,
        position: &'a Array,
        head_dim: i32,
    ) -> Option<gmlx_mlx::cuda_qmv::Rotation<'a>> {
        (self.traditional && self.mscale == 1.0).then_some(gmlx_mlx::cuda_qmv::Rotation {
            inv_freqs: &self.inv_freq_array,
            position,
            head_dim,
            dims: self.dims,
            position_scale: self.position_scale,
        })
    }

    /// Each rotating pair's cosine and sine at `position`, for [`Rope::rotate_host`].
    pub fn angles(&self, position: i32) -> Vec<(f32, f32)> {
        let t = position as f32 * self.position_scale;
        self.inv_freqs
            .iter()
            .map(|f| {
                let theta = t * f;
                (theta.cos(), theta.sin())
            })
            .collect()
    }

    /// [`Rope::forward`] on the host: rotates, in place, row-major vectors of `head_dim`
    /// values of one token by its position's [`Rope::angles`].
    pub fn rotate_host(&self, x: &mut [f32], head_dim: usize, angles: &[(f32, f32)]) {
        let half = angles.len();
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

#[cfg(test)]
mod tests {
    use super::Rope;
    use crate::config::{RopeConfig, Yarn};
    use gmlx_mlx::Array;

    /// `rotate_host` gives `Rope::forward`'s values: both pair layouts, partial rotation,
    /// frequency factors and YaRN (its magnitude correction on every value), at a far position.
    #[test]
    fn host_rotation_matches_mlx() {
        let (heads, head_dim) = (3usize, 16usize);
        let plain = RopeConfig {
            dims: 16,
            base: 10000.0,
            traditional: false,
            position_scale: 1.0,
            freq_factors: None,
            yarn: None,
            sections: None,
        };
        let configs = [
            plain.clone(),
            RopeConfig {
                traditional: true,
                ..plain.clone()
            },
            RopeConfig {
                dims: 8,
                position_scale: 0.5,
                ..plain.clone()
            },
            RopeConfig {
                freq_factors: Some((0..8).map(|i| 1.0 + i as f32).collect()),
                ..plain.clone()
            },
            RopeConfig {
                yarn: Some(Yarn {
                    factor: 4.0,
                    original_context: 4096,
                    beta_fast: 32.0,
                    beta_slow: 1.0,
                    attn_factor: 1.0,
                }),
                ..plain
            },
        ];
        let values: Vec<f32> = (0..heads * head_dim)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) / 4.0)
            .collect();
        for (c, config) in configs.iter().enumerate() {
            let rope = Rope::new(config);
            for position in [0, 7, 3000] {
                let x = Array::from_slice(&values, &[1, heads as i32, 1, head_dim as i32]);
                let want = rope.forward(&x, position).expect("rope");
                want.eval().expect("eval");
                let mut ours = values.clone();
                rope.rotate_host(&mut ours, head_dim, &rope.angles(position));
                let worst = ours
                    .iter()
                    .zip(want.as_slice::<f32>())
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                // two float32 computations of an angle `position * f` may differ by a few of
                // its ulps (MLX's `exp` is not libm's): at position 3000, 2.4e-4 radians each
                let tolerance = 1e-5 + position as f32 * 8.0 * f32::EPSILON * 2.0;
                assert!(
                    worst < tolerance,
                    "config {c}, position {position}: {worst}"
                );
            }
        }
    }

    /// A fused CUDA kernel gets MLX's traditional rotation only, without YaRN's magnitude
    /// correction, and the frequencies the host rotation uses (within float32 rounding).
    #[test]
    fn fused_rotation_is_offered_for_traditional_pairs_only() {
        let traditional = RopeConfig {
            dims: 16,
            base: 500000.0,
            traditional: true,
            position_scale: 1.0,
            freq_factors: None,
            yarn: None,
            sections: None,
        };
        let position = Array::from_slice(&[5i32], &[1]);
        for config in [
            traditional.clone(),
            RopeConfig {
                freq_factors: Some((0..8).map(|i| 1.0 + i as f32).collect()),
                ..traditional.clone()
            },
        ] {
            let rope = Rope::new(&config);
            let fused = rope.fused(&position, 16).expect("traditional: offered");
            assert_eq!((fused.dims, fused.head_dim), (16, 16));
            fused.inv_freqs.eval().expect("eval");
            for (device, host) in fused
                .inv_freqs
                .as_slice::<f32>()
                .iter()
                .zip(&rope.inv_freqs)
            {
                assert!(
                    (device - host).abs() <= 4.0 * f32::EPSILON * host,
                    "{device} vs {host}"
                );
            }
        }
        let halves = RopeConfig {
            traditional: false,
            ..traditional.clone()
        };
        assert!(Rope::new(&halves).fused(&position, 16).is_none());
        let yarn = RopeConfig {
            yarn: Some(Yarn {
                factor: 4.0,
                original_context: 4096,
                beta_fast: 32.0,
                beta_slow: 1.0,
                attn_factor: 1.0,
            }),
            ..traditional
        };
        assert!(Rope::new(&yarn).fused(&position, 16).is_none());
    }
}
