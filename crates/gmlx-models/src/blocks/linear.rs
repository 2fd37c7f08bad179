//! A linear layer: a (usually quantized) base weight, an optional bias, and an optional LoRA
//! adapter applied live: `y = x·Wᵀ + b + scale·(x·Aᵀ)·Bᵀ`, the base never merged or copied.
use gmlx_mlx::cuda_qmv::Rotation;
use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::{Array, QuantWeight};

use crate::blocks::norm::RmsNorm;
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
        let y = self.weight.matmul(x)?;
        self.finish(x, y)
    }

    /// Three layers' [`Linear::forward`] of the same `x`, their base products in one CUDA
    /// launch where gmlx's fused kernel takes all three ([`QuantWeight::matmul_three`]).
    pub fn forward_three(x: &Array, layers: [&Linear; 3]) -> Result<[Array; 3]> {
        match QuantWeight::matmul_three(x, layers.map(|l| &l.weight))? {
            Some([a, b, c]) => Ok([
                layers[0].finish(x, a)?,
                layers[1].finish(x, b)?,
                layers[2].finish(x, c)?,
            ]),
            None => Ok([
                layers[0].forward(x)?,
                layers[1].forward(x)?,
                layers[2].forward(x)?,
            ]),
        }
    }

    /// [`Linear::forward_three`] of `norm(x)`: the norm and the three base products in one
    /// CUDA launch where gmlx's kernel takes them (plain layers only,
    /// [`QuantWeight::norm_matmul_three`]).
    pub fn forward_three_normed(
        x: &Array,
        norm: &RmsNorm,
        layers: [&Linear; 3],
    ) -> Result<[Array; 3]> {
        match Linear::fused_three_normed(x, norm, None, layers)? {
            Some(out) => Ok(out),
            None => Linear::forward_three(&norm.forward(x)?, layers),
        }
    }

    /// [`Linear::forward_three_normed`] with the first two products rotated by `rope` in the
    /// same CUDA launch, or `None` (nothing done) where gmlx's kernel does not take it all.
    pub fn forward_three_normed_rotated(
        x: &Array,
        norm: &RmsNorm,
        rope: Rotation<'_>,
        layers: [&Linear; 3],
    ) -> Result<Option<[Array; 3]>> {
        Linear::fused_three_normed(x, norm, Some(rope), layers)
    }

    /// The fused kernel's normed three products, `None` where it does not take them.
    fn fused_three_normed(
        x: &Array,
        norm: &RmsNorm,
        rope: Option<Rotation<'_>>,
        layers: [&Linear; 3],
    ) -> Result<Option<[Array; 3]>> {
        if !layers.iter().all(|l| l.is_plain()) {
            return Ok(None);
        }
        let weights = layers.map(|l| &l.weight);
        Ok(QuantWeight::norm_matmul_three(
            x,
            norm.fused(),
            rope,
            weights,
        )?)
    }

    /// `residual + self.forward(x)`, in one CUDA launch where gmlx's kernel takes it (a plain
    /// layer, [`QuantWeight::matmul_add`], which pulls `next` into L2 for the launch after it).
    pub fn forward_residual(
        &self,
        x: &Array,
        residual: &Array,
        next: Option<&WarmSet>,
    ) -> Result<Array> {
        if self.is_plain() {
            if let Some(y) = self.weight.matmul_add(x, residual, next)? {
                return Ok(y);
            }
        }
        Ok(residual.add(&self.forward(x)?)?)
    }

    /// Whether the layer is its base weight alone (no bias, no adapter).
    pub fn is_plain(&self) -> bool {
        self.bias.is_none() && self.lora.is_none()
    }

    /// The base product `y` of `x` with the bias and the adapter's product added.
    fn finish(&self, x: &Array, mut y: Array) -> Result<Array> {
        if let Some(bias) = &self.bias {
            y = y.add(bias)?;
        }
        if let Some(lora) = &self.lora {
            y = y.add(self.lora_delta(x, lora)?)?;
        }
        Ok(y)
    }

    /// Whether [`Linear::forward_host`] takes `rows` rows now: no adapter or bias, and a
    /// weight the host kernel reads (`QuantWeight::on_host`).
    pub fn on_host(&self, rows: usize) -> bool {
        self.lora.is_none() && self.bias.is_none() && self.weight.on_host(rows)
    }

    /// [`Linear::forward`] of `rows` row-major float32 rows on the host; `None` where
    /// [`Linear::on_host`] says no.
    pub fn forward_host(&self, x: &[f32], rows: usize) -> Result<Option<Vec<f32>>> {
        if !self.on_host(rows) {
            return Ok(None);
        }
        Ok(self.weight.host_matmul(x, rows)?)
    }

    /// Like [`Linear::forward`] in batch-invariant mode (crate::invariance): each row's
    /// float32 output is its own one-row product (a gathered matrix product whose every row
    /// picks the same matrix), so its reduction order does not depend on the other rows of `x`
    /// or on its place among them (a matrix product's may: kernels pick their blocking by the
    /// number of rows, and MLX folds a batch of one-row products into one). An installed
    /// adapter adds its (ordinary) product.
    pub fn forward_row_invariant(&self, x: &Array) -> Result<Array> {
        use gmlx_mlx::Dtype::Float32;
        let dense;
        let w = match self.weight.as_dense() {
            Some(w) => w,
            None => {
                dense = self.weight.dequantized()?;
                &dense
            }
        };
        let (out, features) = (w.shape()[0], w.shape()[1]);
        let wt = w.as_dtype(Float32)?.t().expand_dims(0)?; // [1, in, out]
        let shape = x.shape().to_vec();
        let rows = x.as_dtype(Float32)?.reshape(&[-1, 1, features])?; // [rows, 1, in]
        let n = rows.shape()[0];
        let same = gmlx_mlx::ops::zeros_dtype(&[n], gmlx_mlx::Dtype::Uint32)?;
        let mut y = gmlx_mlx::ops::gather_mm(&rows, &wt, None, &same, None)?; // [rows, 1, out]
        if let Some(bias) = &self.bias {
            y = y.add(bias.as_dtype(Float32)?)?;
        }
        let mut out_shape = shape;
        *out_shape.last_mut().expect("rank >= 1") = out;
        let y = y.reshape(&out_shape)?;
        match &self.lora {
            Some(lora) => Ok(y.add(self.lora_delta(x, lora)?.as_dtype(Float32)?)?),
            None => Ok(y),
        }
    }

    /// The product batch-invariant mode asks for: [`Linear::forward_row_invariant`] when it
    /// is on, else [`Linear::forward`].
    pub fn forward_gate(&self, x: &Array) -> Result<Array> {
        if crate::invariance::enabled() {
            self.forward_row_invariant(x)
        } else {
            self.forward(x)
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use gmlx_mlx::{ops, QuantWeight};

    fn noise(seed: u64, shape: &[i32]) -> Array {
        gmlx_mlx::mlx_rs::random::normal::<f32>(
            shape,
            None,
            None,
            &gmlx_mlx::mlx_rs::random::key(seed).expect("key"),
        )
        .expect("normal")
    }

    /// `x`'s rows of `f` over `x` stacked between `before` and `after` other rows.
    fn inside(f: &dyn Fn(&Array) -> Array, x: &Array, before: i32, after: i32) -> Vec<f32> {
        let (rows, width) = (x.shape()[0], x.shape()[1]);
        let mut parts = Vec::new();
        if before > 0 {
            parts.push(noise(10 + before as u64, &[before, width]));
        }
        parts.push(x.clone());
        if after > 0 {
            parts.push(noise(20 + after as u64, &[after, width]));
        }
        let y = f(&ops::concatenate(&parts, 0).expect("concat"));
        let y = gmlx_mlx::slicing::slice(&y, &[before, 0], &[before + rows, y.shape()[1]])
            .expect("slice");
        y.eval().expect("eval");
        y.as_slice::<f32>().to_vec()
    }

    /// Router-shaped (128 experts over 1024 features) and gate-shaped (32 heads over 1024
    /// and 4096) products: in batch-invariant form, a 5-row sequence's outputs are bitwise
    /// the same alone and inside products of 7, 64 and 512 rows, at the start, in the middle
    /// and at the end.
    #[test]
    fn row_invariant_products_do_not_depend_on_the_other_rows() {
        for (out, features) in [(128, 1024), (32, 1024), (32, 4096)] {
            let linear = Linear {
                weight: QuantWeight::dense("blk.0.ffn_gate_inp.weight", noise(1, &[out, features])),
                bias: None,
                lora: None,
            };
            let sequence = noise(2, &[5, features]);
            let invariant = |x: &Array| linear.forward_row_invariant(x).expect("forward");
            let alone = inside(&invariant, &sequence, 0, 0);
            for total in [7, 64, 512] {
                for before in [0, (total - 5) / 2, total - 5] {
                    let shared = inside(&invariant, &sequence, before, total - 5 - before);
                    assert!(
                        alone
                            .iter()
                            .zip(&shared)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "[{out}, {features}]: the rows differ inside a product of {total} \
                         after {before} other rows"
                    );
                }
            }
            // the ordinary product, for the docs: does it depend on the other rows here?
            let plain = |x: &Array| linear.forward(x).expect("forward");
            let alone = inside(&plain, &sequence, 0, 0);
            for total in [7, 64, 512] {
                let shared = inside(&plain, &sequence, 0, total - 5);
                let max = alone
                    .iter()
                    .zip(&shared)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                println!(
                    "plain product [{out}, {features}], {total} rows: max |difference| {max:e}"
                );
            }
        }
    }
}
