use gmlx_mlx::{ops, Array};

use crate::blocks::linear::Linear;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};

use crate::error::Result;

/// `down(silu(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
pub struct SwiGlu {
    pub ffn_gate: Linear,
    pub ffn_up: Linear,
    pub ffn_down: Linear,
}

impl SwiGlu {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let gate = self.ffn_gate.forward(x)?;
        let up = self.ffn_up.forward(x)?;
        let hidden = gate.multiply(ops::sigmoid(&gate)?)?.multiply(&up)?;
        self.ffn_down.forward(&hidden)
    }
}

impl SwiGlu {
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
