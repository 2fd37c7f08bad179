//! What mixes information across positions in one block: one variant per kind of layer the
//! plan can ask for.
use gmlx_mlx::Array;

use crate::blocks::attention::Attention;
use crate::blocks::context::ForwardCtx;
use crate::blocks::linear::Linear;
use crate::error::Result;

#[derive(Debug, Clone)]
pub enum Mixer {
    Attention(Attention),
}

impl Mixer {
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        match self {
            Mixer::Attention(a) => a.forward(x, layer, ctx),
        }
    }

    /// Its linear layers adapters can target, in GGUF tensor order.
    pub fn linears(&self) -> Vec<&Linear> {
        match self {
            Mixer::Attention(a) => a.linears().into(),
        }
    }

    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            Mixer::Attention(a) => a.linears_mut().into(),
        }
    }

    /// Every array it holds.
    pub fn arrays(&self) -> Vec<&Array> {
        match self {
            Mixer::Attention(a) => a.arrays(),
        }
    }
}
