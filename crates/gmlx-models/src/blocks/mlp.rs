use gmlx_mlx::{ops, Array};

use crate::blocks::linear::Linear;

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
    pub fn linears(&self) -> [&Linear; 3] {
        [&self.ffn_gate, &self.ffn_up, &self.ffn_down]
    }

    pub fn linears_mut(&mut self) -> [&mut Linear; 3] {
        [&mut self.ffn_gate, &mut self.ffn_up, &mut self.ffn_down]
    }
}
