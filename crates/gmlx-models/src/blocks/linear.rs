//! A linear layer: a (usually quantized) base weight, an optional bias, and an optional LoRA
//! adapter applied live: `y = x·Wᵀ + b + scale·(x·Aᵀ)·Bᵀ`, the base never merged or copied.
use gmlx_mlx::{Array, QuantWeight};

use crate::error::Result;

/// A low-rank adapter on one linear layer.
#[derive(Debug, Clone)]
pub struct Lora {
    /// `[rank, in]`.
    pub a: Array,
    /// `[out, rank]`.
    pub b: Array,
    /// `alpha / rank` (or an explicit scale).
    pub scale: f32,
}

#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: QuantWeight,
    pub bias: Option<Array>,
    pub lora: Option<Lora>,
}

impl From<QuantWeight> for Linear {
    fn from(weight: QuantWeight) -> Linear {
        Linear {
            weight,
            bias: None,
            lora: None,
        }
    }
}

impl Linear {
    /// The GGUF tensor name of the base weight (`blk.0.attn_q.weight`).
    pub fn name(&self) -> &str {
        self.weight.name()
    }

    /// `x [..., in]` to `[..., out]`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let mut y = self.weight.matmul(x)?;
        if let Some(bias) = &self.bias {
            y = y.add(bias)?;
        }
        if let Some(lora) = &self.lora {
            y = y.add(self.lora_delta(x, lora)?)?;
        }
        Ok(y)
    }

    /// `scale·(x·Aᵀ)·Bᵀ` for an adapter that may differ from the one installed (training
    /// passes its parameters explicitly).
    pub fn lora_delta(&self, x: &Array, lora: &Lora) -> Result<Array> {
        let low = x.matmul(lora.a.t())?;
        let delta = low.matmul(lora.b.t())?;
        Ok(delta.multiply(Array::from_f32(lora.scale))?)
    }

    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = self.weight.arrays();
        out.extend(self.bias.as_ref());
        if let Some(l) = &self.lora {
            out.push(&l.a);
            out.push(&l.b);
        }
        out
    }
}
