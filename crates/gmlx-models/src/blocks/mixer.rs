//! What mixes information across positions in one block: one variant per kind of layer the
//! plan can ask for.
use gmlx_mlx::Array;

use crate::blocks::attention::Attention;
use crate::blocks::compressed::CompressedAttention;
use crate::blocks::context::ForwardCtx;
use crate::blocks::delta_net::GatedDeltaNet;
use crate::blocks::kda::Kda;
use crate::blocks::latent::LatentAttention;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};
use crate::error::Result;

#[derive(Debug, Clone)]
pub enum Mixer {
    Attention(Attention),
    GatedDeltaNet(GatedDeltaNet),
    Kda(Box<Kda>),
    Latent(Box<LatentAttention>),
    Compressed(Box<CompressedAttention>),
}

impl Mixer {
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        match self {
            Mixer::Attention(a) => a.forward(x, layer, ctx),
            Mixer::GatedDeltaNet(d) => d.forward(x, layer, ctx),
            Mixer::Kda(d) => d.forward(x, layer, ctx),
            Mixer::Latent(a) => a.forward(x, layer, ctx),
            Mixer::Compressed(a) => a.forward(x, layer, ctx),
        }
    }

    /// [`Mixer::forward`] on the host for one token per row (`rows` row-major vectors of
    /// normed hidden values): softmax attention only ([`Attention::forward_host`]); `None`,
    /// before any work, otherwise.
    pub fn forward_host(
        &self,
        x: &[f32],
        rows: usize,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Option<Vec<f32>>> {
        match self {
            Mixer::Attention(a) => a.forward_host(x, rows, layer, ctx),
            _ => Ok(None),
        }
    }

    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        match self {
            Mixer::Attention(a) => a.visit(v),
            Mixer::GatedDeltaNet(d) => d.visit(v),
            Mixer::Kda(d) => d.visit(v),
            Mixer::Latent(a) => a.visit(v),
            Mixer::Compressed(a) => a.visit(v),
        }
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        match self {
            Mixer::Attention(a) => a.visit_mut(v),
            Mixer::GatedDeltaNet(d) => d.visit_mut(v),
            Mixer::Kda(d) => d.visit_mut(v),
            Mixer::Latent(a) => a.visit_mut(v),
            Mixer::Compressed(a) => a.visit_mut(v),
        }
    }
}
