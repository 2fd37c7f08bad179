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
    /// Dropout on the adapter's input, in training only.
    pub dropout: Option<LoraDropout>,
}

impl Lora {
    /// An adapter for inference: no dropout.
    pub fn new(a: Array, b: Array, scale: f32) -> Lora {
        Lora {
            a,
            b,
            scale,
            dropout: None,
        }
    }
}

/// Dropout of the adapter's input `x`: each element kept with probability `1 - p` and scaled
/// by `1 / (1 - p)`. The mask is drawn from `key`, so recomputing the same forward (gradient
/// checkpointing) draws the same mask.
#[derive(Debug, Clone)]
pub struct LoraDropout {
    pub p: f32,
    pub key: Array,
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
        let out_dtype = x.dtype();
        let dropped;
        let x = match &lora.dropout {
            Some(d) if d.p > 0.0 => {
                let keep = Array::from_f32(1.0 - d.p);
                let mask = gmlx_mlx::mlx_rs::random::bernoulli(&keep, x.shape(), &d.key)?;
                dropped = x
                    .multiply(mask.as_dtype(x.dtype())?)?
                    .multiply(Array::from_f32(1.0 / (1.0 - d.p)).as_dtype(x.dtype())?)?;
                &dropped
            }
            _ => x,
        };
        let x = &x.as_dtype(lora.a.dtype())?;
        let low = x.matmul(lora.a.t())?;
        let delta = low.matmul(lora.b.t())?;
        Ok(delta
            .multiply(Array::from_f32(lora.scale))?
            .as_dtype(out_dtype)?)
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
