use gmlx_mlx::{ops, Array, QuantWeight};

use crate::error::Result;

/// `down(silu(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
pub struct SwiGlu {
    pub ffn_gate: QuantWeight,
    pub ffn_up: QuantWeight,
    pub ffn_down: QuantWeight,
}

impl SwiGlu {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let gate = self.ffn_gate.matmul(x)?;
        let up = self.ffn_up.matmul(x)?;
        let hidden = gate.multiply(ops::sigmoid(&gate)?)?.multiply(&up)?;
        Ok(self.ffn_down.matmul(&hidden)?)
    }
}
