use gmlx_mlx::{fast, Array};

use crate::config::RopeConfig;
use crate::error::Result;

/// Rotary position embedding over `[batch, heads, tokens, head_dim]`.
#[derive(Debug, Clone)]
pub struct Rope {
    dims: i32,
    base: f32,
    traditional: bool,
    position_scale: f32,
    /// With frequency factors: `base^(2i/dims) * factor[i]`, MLX's per-pair period.
    periods: Option<Array>,
}

impl Rope {
    pub fn new(config: &RopeConfig) -> Rope {
        let periods = config.freq_factors.as_ref().map(|factors| {
            let half = factors.len();
            let values: Vec<f32> = factors
                .iter()
                .enumerate()
                .map(|(i, f)| config.base.powf(2.0 * i as f32 / config.dims as f32) * f)
                .collect();
            Array::from_slice(&values, &[half as i32])
        });
        Rope {
            dims: config.dims,
            base: config.base,
            traditional: config.traditional,
            position_scale: config.position_scale,
            periods,
        }
    }

    /// Rotates `x` whose first token sits at position `offset`.
    pub fn forward(&self, x: &Array, offset: i32) -> Result<Array> {
        let base = if self.periods.is_some() {
            None
        } else {
            Some(self.base)
        };
        Ok(fast::rope(
            x,
            self.dims,
            self.traditional,
            base,
            self.position_scale,
            offset,
            self.periods.as_ref(),
        )?)
    }
}
