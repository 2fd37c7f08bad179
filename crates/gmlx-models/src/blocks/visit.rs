//! One walk over a model's weights. Each block says once what it holds; what is resident
//! (`arrays`), what adapters can target (`linears`, by tensor name) and training's targets
//! are all read from that one walk.
use gmlx_mlx::{Array, QuantWeight};

use crate::blocks::linear::Linear;

/// What a walk over the weights sees, in GGUF tensor order within each block.
pub trait WeightVisitor<'m> {
    /// A linear layer adapters can target (an attention or dense-MLP projection).
    fn linear(&mut self, linear: &'m Linear);
    /// Any other array the model holds (norms, sinks, biases, routers, expert stacks,
    /// embeddings).
    fn array(&mut self, array: &'m Array);

    fn quant(&mut self, weight: &'m QuantWeight) {
        for a in weight.arrays() {
            self.array(a);
        }
    }
}

/// The same walk over the linear layers adapters can target, mutably (installing adapters).
pub trait LinearVisitorMut<'m> {
    fn linear(&mut self, linear: &'m mut Linear);
}

/// Every array, a linear layer's included.
#[derive(Default)]
pub struct Arrays<'m>(pub Vec<&'m Array>);

impl<'m> WeightVisitor<'m> for Arrays<'m> {
    fn linear(&mut self, linear: &'m Linear) {
        self.0.extend(linear.arrays());
    }

    fn array(&mut self, array: &'m Array) {
        self.0.push(array);
    }
}

/// The linear layers adapters can target.
#[derive(Default)]
pub struct Linears<'m>(pub Vec<&'m Linear>);

impl<'m> WeightVisitor<'m> for Linears<'m> {
    fn linear(&mut self, linear: &'m Linear) {
        self.0.push(linear);
    }

    fn array(&mut self, _: &'m Array) {}
}

/// The same, mutably.
#[derive(Default)]
pub struct LinearsMut<'m>(pub Vec<&'m mut Linear>);

impl<'m> LinearVisitorMut<'m> for LinearsMut<'m> {
    fn linear(&mut self, linear: &'m mut Linear) {
        self.0.push(linear);
    }
}

/// Passes a part's linear layers on as plain arrays: the weights of a part adapters do not
/// target (a router, a shared expert).
pub struct Frozen<'v, 'm>(pub &'v mut dyn WeightVisitor<'m>);

impl<'m> WeightVisitor<'m> for Frozen<'_, 'm> {
    fn linear(&mut self, linear: &'m Linear) {
        for a in linear.arrays() {
            self.0.array(a);
        }
    }

    fn array(&mut self, array: &'m Array) {
        self.0.array(array);
    }
}
