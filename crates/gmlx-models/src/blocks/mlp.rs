use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::{ops, Array, QuantWeight};

use crate::blocks::linear::Linear;
use crate::blocks::norm::RmsNorm;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};

use crate::error::Result;

/// How a gated MLP combines its gate and up projections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Glu {
    /// `silu(gate) * up`.
    Silu,
    /// `silu(min(gate, limit)) * clamp(up, -limit, limit)` (GLM-5-Next's dense blocks).
    SiluClamped { limit: f32 },
    /// Kimi-K3's `situ`: `beta·tanh(gate/beta)·sigmoid(gate) · lb·tanh(up/lb)`, the up branch
    /// left as it is when `linear_beta <= 0`.
    Situ { beta: f32, linear_beta: f32 },
}

impl Glu {
    /// In the dtype of `gate` (float32 scalars would promote bfloat16 activations).
    pub fn apply(self, gate: &Array, up: &Array) -> Result<Array> {
        Ok(self.apply_promoted(gate, up)?.as_dtype(gate.dtype())?)
    }

    fn apply_promoted(self, gate: &Array, up: &Array) -> Result<Array> {
        match self {
            Glu::Silu => {
                if let Some(out) = crate::blocks::host::silu_times_pass(gate, up)? {
                    return Ok(out);
                }
                Ok(gate.multiply(ops::sigmoid(gate)?)?.multiply(up)?)
            }
            Glu::SiluClamped { limit } => crate::blocks::moe::swiglu_clamped(gate, up, limit),
            Glu::Situ { beta, linear_beta } => {
                let soft_cap = |x: &Array, b: f32| -> Result<Array> {
                    Ok(ops::tanh(&x.multiply(Array::from_f32(1.0 / b))?)?
                        .multiply(Array::from_f32(b))?)
                };
                let act = soft_cap(gate, beta)?.multiply(ops::sigmoid(gate)?)?;
                let up = if linear_beta > 0.0 {
                    soft_cap(up, linear_beta)?
                } else {
                    up.clone()
                };
                Ok(act.multiply(&up)?)
            }
        }
    }
}

/// `down(glu(gate(x), up(x)))`, SwiGLU unless the model says otherwise.
#[derive(Debug, Clone)]
pub struct SwiGlu {
    pub ffn_gate: Linear,
    pub ffn_up: Linear,
    pub ffn_down: Linear,
    pub glu: Glu,
}

impl SwiGlu {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        self.ffn_down.forward(&self.activation(x)?)
    }

    /// `h + self.forward(norm(h))` (a block's feed-forward half): where gmlx's CUDA kernels take
    /// them, the norm, both products and the SwiGLU in one launch, the down product and the
    /// add in another (the SwiGLU handed over rounded to 8-bit activations where the down
    /// product reads it so, [`QuantWeight::norm_silu_down_add`]).
    /// `next`: the next block's first matrices, which the down product's launch pulls into L2
    /// ([`gmlx_mlx::cuda_qmv::warming`]).
    pub fn forward_residual(
        &self,
        h: &Array,
        norm: &RmsNorm,
        next: Option<&WarmSet>,
    ) -> Result<Array> {
        if let Some([gate, up, down]) = self.plain_layers() {
            let weights = [&gate.weight, &up.weight, &down.weight];
            if let Some(y) = QuantWeight::norm_silu_down_add(h, norm.fused(), weights, h)? {
                return Ok(y);
            }
        }
        let fused = match self.plain_silu() {
            true => QuantWeight::norm_silu_glu(
                h,
                norm.fused(),
                &self.ffn_gate.weight,
                &self.ffn_up.weight,
            )?,
            false => None,
        };
        let activation = match fused {
            Some(a) => a,
            None => self.activation(&norm.forward(h)?)?,
        };
        self.ffn_down.forward_residual(&activation, h, next)
    }

    /// `glu(gate(x), up(x))`: one CUDA launch for both products and the SwiGLU, where gmlx's
    /// kernel takes them.
    fn activation(&self, x: &Array) -> Result<Array> {
        if self.plain_silu() {
            if let Some(h) = QuantWeight::silu_glu(x, &self.ffn_gate.weight, &self.ffn_up.weight)? {
                return Ok(h);
            }
        }
        let gate = self.ffn_gate.forward(x)?;
        let up = self.ffn_up.forward(x)?;
        self.glu.apply(&gate, &up)
    }

    /// The gate, up and down layers of a SwiGLU whose three layers are plain (no bias or
    /// adapter): what gmlx's decode-layer CUDA kernel computes.
    pub fn plain_layers(&self) -> Option<[&Linear; 3]> {
        (self.plain_silu() && self.ffn_down.is_plain()).then_some([
            &self.ffn_gate,
            &self.ffn_up,
            &self.ffn_down,
        ])
    }

    /// A SwiGLU of layers without bias or adapter (what the fused kernels compute).
    fn plain_silu(&self) -> bool {
        self.glu == Glu::Silu && self.ffn_gate.is_plain() && self.ffn_up.is_plain()
    }
}

impl SwiGlu {
    /// Whether [`SwiGlu::forward_host`] takes `rows` rows now.
    pub fn on_host(&self, rows: usize) -> bool {
        self.glu == Glu::Silu
            && [&self.ffn_gate, &self.ffn_up, &self.ffn_down]
                .iter()
                .all(|l| l.on_host(rows))
    }

    /// [`SwiGlu::forward`] of `rows` row-major float32 rows on the host; `None` where
    /// [`SwiGlu::on_host`] says no.
    pub fn forward_host(&self, x: &[f32], rows: usize) -> Result<Option<Vec<f32>>> {
        if !self.on_host(rows) {
            return Ok(None);
        }
        let (Some(mut gate), Some(up)) = (
            self.ffn_gate.forward_host(x, rows)?,
            self.ffn_up.forward_host(x, rows)?,
        ) else {
            return Ok(None);
        };
        crate::blocks::host::silu_times(&mut gate, &up);
        self.ffn_down.forward_host(&gate, rows)
    }

    /// Its three projections, in GGUF tensor order.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        for l in [&self.ffn_gate, &self.ffn_up, &self.ffn_down] {
            v.linear(l);
        }
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        v.linear(&mut self.ffn_gate);
        v.linear(&mut self.ffn_up);
        v.linear(&mut self.ffn_down);
    }
}
