//! Mixture of experts: a router picks `top_k` experts per token; the selected experts' gated
//! MLPs run through MLX's gather matmul on the quantized stacks (only the selected experts
//! are touched), and their outputs are summed with the router's weights.
use std::fmt::Debug;
use std::rc::Rc;

use gmlx_mlx::{ops, Array, QuantWeight};

use crate::blocks::delta_net::softplus;
use crate::blocks::linear::Linear;
use crate::blocks::mlp::SwiGlu;
use crate::blocks::visit::{Frozen, LinearVisitorMut, WeightVisitor};
use crate::error::{Error, Result};

/// How router logits become expert scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all experts, then pick the top k.
    Softmax,
    /// Sigmoid of each logit.
    Sigmoid,
    /// Pick the top k logits, then softmax over those k only (gpt-oss).
    SoftmaxSelected,
    /// `sqrt(softplus(logit))` of each logit (DeepSeek-V4).
    SqrtSoftplus,
}

/// The router of one MoE layer.
#[derive(Debug, Clone)]
pub struct Router {
    /// `[experts, hidden]`, with an optional bias.
    pub ffn_gate_inp: Linear,
    pub gating: Gating,
    /// Added to the scores for selection only (DeepSeek-V3 style `exp_probs_b`).
    pub selection_bias: Option<Array>,
    pub top_k: i32,
    /// Divide the selected weights by their sum.
    pub normalize: bool,
    /// Multiply the weights (1: off).
    pub scale: f32,
    /// Hash routing: the `k` experts of each token id (`ffn_gate_tid2eid`, `[vocab, k]`), read
    /// from the file's memory map.
    pub hash: Option<gmlx_gguf::MappedRows>,
}

impl Router {
    /// `x [n, hidden]` to `(indices [n, k] u32, weights [n, k])`, the experts chosen by the
    /// scores (a hash-routed layer chooses by token: [`Router::route_tokens`]).
    pub fn route(&self, x: &Array) -> Result<(Array, Array)> {
        let scores = self.scores(x)?;
        let indices = self.select(&scores)?;
        let weights = self.weigh(&scores, &indices)?;
        Ok((indices, weights))
    }

    /// [`Router::route`] for rows whose token ids are `tokens [n]`: what the layer runs.
    pub fn route_tokens(&self, x: &Array, tokens: &Array) -> Result<(Array, Array)> {
        let scores = self.scores(x)?;
        let indices = self.choose(&scores, tokens)?;
        let weights = self.weigh(&scores, &indices)?;
        Ok((indices, weights))
    }

    /// The experts of each row: the token's hash-table row, or the best scores.
    pub fn choose(&self, scores: &Array, tokens: &Array) -> Result<Array> {
        let Some(table) = &self.hash else {
            return self.select(scores);
        };
        let ids = host_ids(tokens)?;
        let count = scores.shape()[1] as f32;
        let experts = table
            .dequantize_rows(&ids)?
            .into_iter()
            .map(|e| {
                if (0.0..count).contains(&e) {
                    Ok(e as u32)
                } else {
                    Err(Error::BadConfig {
                        key: table.name().to_owned(),
                        reason: format!("expert {e} of a table routing to {count} experts"),
                    })
                }
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(Array::from_slice(
            &experts,
            &[ids.len() as i32, table.row_len() as i32],
        ))
    }

    /// The gating of the router's logits: `[n, experts]` (for `SoftmaxSelected`, the logits).
    pub fn scores(&self, x: &Array) -> Result<Array> {
        let logits = self.ffn_gate_inp.forward_gate(x)?;
        Ok(match self.gating {
            Gating::Softmax => ops::softmax_axis(&logits, -1, true)?,
            Gating::Sigmoid => ops::sigmoid(&logits)?,
            Gating::SoftmaxSelected => logits,
            Gating::SqrtSoftplus => softplus(&logits)?.sqrt()?,
        })
    }

    /// The `top_k` experts of each row: `[n, k]` u32.
    pub fn select(&self, scores: &Array) -> Result<Array> {
        let selection = match &self.selection_bias {
            Some(bias) => scores.add(bias)?,
            None => scores.clone(),
        };
        let experts = selection.shape()[1];
        let k = self.top_k;
        // the k largest: partition the negated scores at k - 1, keep the first k
        let order = ops::argpartition_axis(&selection.negative()?, k - 1, -1)?;
        // which experts is a discrete choice: no gradient flows through it (training reaches
        // the router through the selected weights only)
        let indices = gmlx_mlx::mlx_rs::stop_gradient(gmlx_mlx::slicing::slice(
            &order,
            &[0, 0],
            &[order.shape()[0], k],
        )?)?;
        debug_assert!(k <= experts);
        Ok(indices.as_dtype(gmlx_mlx::Dtype::Uint32)?)
    }

    /// The weights of experts `indices [n, k]` from `scores`, as the router gives them
    /// (softmax over the selected, normalized, scaled as the model says).
    pub fn weigh(&self, scores: &Array, indices: &Array) -> Result<Array> {
        let mut weights = scores.take_along_axis(indices, -1)?;
        if self.gating == Gating::SoftmaxSelected {
            weights = ops::softmax_axis(&weights, -1, true)?;
        }
        if self.normalize {
            let sum = weights.sum_axis(-1, true)?;
            let sum = ops::maximum(&sum, Array::from_f32(6.103_515_6e-5))?;
            weights = weights.divide(&sum)?;
        }
        if self.scale != 1.0 && self.scale != 0.0 {
            weights = weights.multiply(Array::from_f32(self.scale))?;
        }
        Ok(weights)
    }
}

/// One MoE layer's routing of one step, as a [`RouteHook`] sees and may change it.
#[derive(Debug, Clone)]
pub struct Routing {
    /// `[n, experts]`: the router's gated scores.
    pub scores: Array,
    /// `[n, k]` u32: the experts each row uses.
    pub indices: Array,
    /// `[n, k]`: their weights.
    pub weights: Array,
}

/// Where a step's rows stand: row `r` of the `[batch, tokens]` input holds the tokens at
/// positions `positions[b] .. positions[b] + tokens` with `b = r / tokens`.
#[derive(Debug, Clone, Copy)]
pub struct RouteAt<'a> {
    pub layer: usize,
    pub positions: &'a [i32],
    pub tokens: i32,
}

impl RouteAt<'_> {
    /// Many tokens of one sequence (a prefill chunk), as against decode rows.
    pub fn prefill(&self) -> bool {
        self.tokens > 1
    }

    /// The position of flattened row `row`.
    pub fn position(&self, row: usize) -> i32 {
        let t = self.tokens.max(1) as usize;
        self.positions.get(row / t).copied().unwrap_or(0) + (row % t) as i32
    }
}

/// Sees each MoE layer's routing and may change it (record, replay, truncate by mass, probe):
/// installed on a model with [`crate::Model::add_route_hook`], applied in the order added.
pub trait RouteHook: Debug {
    fn route(&self, at: &RouteAt<'_>, router: &Router, routing: Routing) -> Result<Routing>;
}

/// The activation of the experts' gated MLP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExpertActivation {
    /// `silu(gate) * up`.
    SwiGlu,
    /// gpt-oss: `gate' = min(gate, limit)`, `up' = clamp(up, -limit, limit)`,
    /// `gate' * sigmoid(alpha * gate') * (up' + 1)`.
    SwiGluOai { alpha: f32, limit: f32 },
    /// `silu(min(gate, limit)) * clamp(up, -limit, limit)` (DeepSeek-V4, HY4 routed experts).
    SwiGluClamped { limit: f32 },
    /// Any other gated activation of a dense MLP (Kimi-K3's `situ`).
    Glu(crate::blocks::mlp::Glu),
}

/// One of the three matrices of every expert (in this order in a [`Selection`]'s stacks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertProj {
    /// `ffn_gate_exps`: `[experts, ffn, hidden]`.
    Gate,
    /// `ffn_up_exps`: `[experts, ffn, hidden]`.
    Up,
    /// `ffn_down_exps`: `[experts, hidden, ffn]`.
    Down,
}

/// The experts one step's products gather from: `indices` into the store's stacks, and the
/// stacks themselves when the store built them for this step only (a streamed prefill).
#[derive(Debug, Clone)]
pub struct Selection {
    /// `[n, k]` u32: for each row, the stack entries of its selected experts.
    pub indices: Array,
    /// Stacks (gate, up, down) built for this step, in place of the store's own.
    pub stacks: Option<Rc<[QuantWeight; 3]>>,
}

impl Selection {
    /// The store's own stacks, indexed by expert id.
    pub fn resident(indices: &Array) -> Selection {
        Selection {
            indices: indices.clone(),
            stacks: None,
        }
    }
}

/// Where a layer's expert weights live. The MoE block asks the store for the product of the
/// selected experts only, so a store that reads experts on demand (gmlx-stream) shares the
/// forward code with the resident one.
pub trait ExpertStore: Debug {
    /// Makes the experts `indices [n, k]` (u32) names available to this step's three
    /// products. `prefill`: the rows are many tokens of one sequence.
    fn select(&self, indices: &Array, prefill: bool) -> Result<Selection>;
    /// `x [n, k or 1, 1, in]` times the `proj` matrix of each selected expert:
    /// `[n, k, 1, out]`.
    fn gather_matmul(&self, proj: ExpertProj, x: &Array, selection: &Selection) -> Result<Array>;
    /// The arrays it holds in memory.
    fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>);
}

/// The three expert stacks of one MoE layer, as the file holds them.
#[derive(Debug, Clone, Copy)]
pub struct ExpertTensors<'f> {
    pub layer: usize,
    pub gate: &'f gmlx_gguf::TensorInfo,
    pub up: &'f gmlx_gguf::TensorInfo,
    pub down: &'f gmlx_gguf::TensorInfo,
}

/// Decides where a model's routed experts live ([`LoadOptions::experts`]): each MoE layer
/// asks it for its store. Without one, experts are resident.
///
/// [`LoadOptions::experts`]: crate::LoadOptions::experts
pub trait ExpertPlacement: Debug + Send + Sync {
    /// The store of one layer's experts (shapes already checked against the plan).
    fn store(
        &self,
        file: &gmlx_gguf::GgufFile,
        tensors: ExpertTensors<'_>,
        dtype: gmlx_mlx::Dtype,
    ) -> Result<Rc<dyn ExpertStore>>;
}

/// Every expert resident, as quantized stacks `[experts, out, in]`.
#[derive(Debug, Clone)]
pub struct ResidentExperts {
    pub ffn_gate_exps: QuantWeight,
    pub ffn_up_exps: QuantWeight,
    pub ffn_down_exps: QuantWeight,
}

impl ResidentExperts {
    fn stack(&self, proj: ExpertProj) -> &QuantWeight {
        match proj {
            ExpertProj::Gate => &self.ffn_gate_exps,
            ExpertProj::Up => &self.ffn_up_exps,
            ExpertProj::Down => &self.ffn_down_exps,
        }
    }
}

/// The product of a selection: the step's own stacks if it has them, else `stack`.
pub fn gather_selected(
    stack: &QuantWeight,
    proj: ExpertProj,
    x: &Array,
    selection: &Selection,
) -> Result<Array> {
    let stack = match &selection.stacks {
        Some(stacks) => &stacks[proj as usize],
        None => stack,
    };
    Ok(stack.gather_matmul(x, &selection.indices)?)
}

impl ExpertStore for ResidentExperts {
    fn select(&self, indices: &Array, _prefill: bool) -> Result<Selection> {
        Ok(Selection::resident(indices))
    }

    fn gather_matmul(&self, proj: ExpertProj, x: &Array, selection: &Selection) -> Result<Array> {
        gather_selected(self.stack(proj), proj, x, selection)
    }

    fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        for w in [&self.ffn_gate_exps, &self.ffn_up_exps, &self.ffn_down_exps] {
            v.quant(w);
        }
    }
}

/// The experts of one layer: their weights behind a store, optional per-expert biases.
#[derive(Debug, Clone)]
pub struct Experts {
    pub store: Rc<dyn ExpertStore>,
    /// `[experts, ffn]`, `[experts, ffn]`, `[experts, hidden]`.
    pub ffn_gate_exps_b: Option<Array>,
    pub ffn_up_exps_b: Option<Array>,
    pub ffn_down_exps_b: Option<Array>,
    pub activation: ExpertActivation,
}

fn add_expert_bias(y: Array, bias: &Option<Array>, indices: &Array) -> Result<Array> {
    match bias {
        // bias rows [n, k, out] -> [n, k, 1, out]
        Some(b) => Ok(y.add(b.take_axis(indices, 0)?.expand_dims(-2)?)?),
        None => Ok(y),
    }
}

impl Experts {
    /// `x [n, hidden]`, `indices [n, k]` to per-expert outputs `[n, k, hidden]`. `prefill`:
    /// the rows are many tokens of one sequence (a streamed store reads differently).
    pub fn forward(&self, x: &Array, indices: &Array, prefill: bool) -> Result<Array> {
        let selection = self.store.select(indices, prefill)?;
        let x = x.expand_dims_axes(&[-2, -3])?; // [n, 1, 1, hidden]
        let gate = self.store.gather_matmul(ExpertProj::Gate, &x, &selection)?; // [n, k, 1, ffn]
        let gate = add_expert_bias(gate, &self.ffn_gate_exps_b, indices)?;
        let up = self.store.gather_matmul(ExpertProj::Up, &x, &selection)?;
        let up = add_expert_bias(up, &self.ffn_up_exps_b, indices)?;
        let hidden = match self.activation {
            ExpertActivation::SwiGlu => gate.multiply(ops::sigmoid(&gate)?)?.multiply(&up)?,
            ExpertActivation::SwiGluOai { alpha, limit } => {
                let gate = ops::minimum(&gate, Array::from_f32(limit))?;
                let up = ops::minimum(
                    ops::maximum(&up, Array::from_f32(-limit))?,
                    Array::from_f32(limit),
                )?;
                let glu = gate.multiply(ops::sigmoid(gate.multiply(Array::from_f32(alpha))?)?)?;
                glu.multiply(up.add(Array::from_f32(1.0))?)?
            }
            ExpertActivation::SwiGluClamped { limit } => swiglu_clamped(&gate, &up, limit)?,
            ExpertActivation::Glu(glu) => glu.apply(&gate, &up)?,
        };
        let out = self
            .store
            .gather_matmul(ExpertProj::Down, &hidden, &selection)?; // [n, k, 1, hidden]
        let out = add_expert_bias(out, &self.ffn_down_exps_b, indices)?;
        Ok(out.squeeze_axes(&[-2])?)
    }

    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        self.store.visit(v);
        let biases = [
            &self.ffn_gate_exps_b,
            &self.ffn_up_exps_b,
            &self.ffn_down_exps_b,
        ];
        for b in biases.into_iter().flatten() {
            v.array(b);
        }
    }
}

/// Token ids on the host (they come from it: evaluating them is a copy at most).
pub(crate) fn host_ids(tokens: &Array) -> Result<Vec<u32>> {
    let flat = tokens.reshape(&[-1])?.as_dtype(gmlx_mlx::Dtype::Uint32)?;
    flat.eval()?;
    Ok(flat.as_slice::<u32>().to_vec())
}

/// `silu(min(gate, limit)) * clamp(up, -limit, limit)`.
pub(crate) fn swiglu_clamped(gate: &Array, up: &Array, limit: f32) -> Result<Array> {
    let gate = ops::minimum(gate, Array::from_f32(limit))?;
    let up = ops::minimum(
        ops::maximum(up, Array::from_f32(-limit))?,
        Array::from_f32(limit),
    )?;
    Ok(gate.multiply(ops::sigmoid(&gate)?)?.multiply(&up)?)
}

/// An always-on dense expert beside the routed ones (Qwen2-MoE / DeepSeek style).
#[derive(Debug, Clone)]
pub struct SharedExpert {
    pub mlp: SwiGlu,
    /// `[hidden]`: the output is scaled by `sigmoid(x · gate)` per token (Qwen3-Next).
    pub ffn_gate_inp_shexp: Option<Array>,
    /// Its SwiGLU clamped at this limit (DeepSeek-V4), as the routed experts'
    /// [`ExpertActivation::SwiGluClamped`].
    pub clamp: Option<f32>,
}

impl SharedExpert {
    /// `x [n, hidden]`.
    pub fn forward(&self, x: &Array) -> Result<Array> {
        let out = match self.clamp {
            Some(limit) => {
                let gate = self.mlp.ffn_gate.forward(x)?;
                let up = self.mlp.ffn_up.forward(x)?;
                self.mlp
                    .ffn_down
                    .forward(&swiglu_clamped(&gate, &up, limit)?)?
            }
            None => self.mlp.forward(x)?,
        };
        match &self.ffn_gate_inp_shexp {
            Some(gate) => {
                let logit = x.matmul(gate.expand_dims(-1)?)?; // [n, 1]
                Ok(out.multiply(ops::sigmoid(&logit)?)?)
            }
            None => Ok(out),
        }
    }

    /// Its weights: the MLP's projections are adapter targets, the gate vector is not.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        self.mlp.visit(v);
        if let Some(gate) = &self.ffn_gate_inp_shexp {
            v.array(gate);
        }
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        self.mlp.visit_mut(v);
    }
}

/// Routed experts that work in a narrower latent space (Kimi-K3): the router scores the full
/// input, the experts read `ffn_routed_down(x)`, and their weighted sum is normed
/// (`ffn_routed_norm`, when present) and brought back by `ffn_routed_up`.
#[derive(Debug, Clone)]
pub struct RoutedLatent {
    pub ffn_routed_down: Linear,
    pub ffn_routed_norm: Option<crate::blocks::norm::RmsNorm>,
    pub ffn_routed_up: Linear,
}

/// A routed MoE feed-forward with an optional shared expert.
#[derive(Debug, Clone)]
pub struct MoeFfn {
    pub router: Router,
    pub experts: Experts,
    pub shared: Option<SharedExpert>,
    pub latent: Option<RoutedLatent>,
    /// See and may change the routing, in order.
    pub hooks: Vec<Rc<dyn RouteHook>>,
}

impl MoeFfn {
    /// `x [batch, tokens, hidden]` of layer `layer`, its rows starting at `positions`, their
    /// token ids `tokens [batch, tokens]`.
    pub fn forward(
        &self,
        x: &Array,
        layer: usize,
        positions: &[i32],
        tokens: &Array,
    ) -> Result<Array> {
        let shape = x.shape().to_vec();
        let flat = x.reshape(&[-1, shape[2]])?;
        let ids = tokens.reshape(&[-1])?;
        let at = RouteAt {
            layer,
            positions,
            tokens: shape[1],
        };
        let (indices, weights) = if self.hooks.is_empty() {
            self.router.route_tokens(&flat, &ids)?
        } else {
            let scores = self.router.scores(&flat)?;
            let indices = self.router.choose(&scores, &ids)?;
            let weights = self.router.weigh(&scores, &indices)?;
            let mut routing = Routing {
                scores,
                indices,
                weights,
            };
            for hook in &self.hooks {
                routing = hook.route(&at, &self.router, routing)?;
            }
            (routing.indices, routing.weights)
        };
        let routed_in = match &self.latent {
            Some(l) => l.ffn_routed_down.forward(&flat)?,
            None => flat.clone(),
        };
        let per_expert = self.experts.forward(&routed_in, &indices, at.prefill())?; // [n, k, d]
        let weights = weights.as_dtype(per_expert.dtype())?.expand_dims(-1)?;
        let mut out = per_expert.multiply(&weights)?.sum_axis(1, false)?;
        if let Some(l) = &self.latent {
            if let Some(norm) = &l.ffn_routed_norm {
                out = norm.forward(&out)?;
            }
            out = l.ffn_routed_up.forward(&out)?;
        }
        if let Some(shared) = &self.shared {
            out = out.add(shared.forward(&flat)?)?;
        }
        Ok(out.reshape(&shape)?)
    }

    /// Its weights: the router (not an adapter target), the experts, the shared expert (whose
    /// projections are).
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        Frozen(v).linear(&self.router.ffn_gate_inp);
        if let Some(bias) = &self.router.selection_bias {
            v.array(bias);
        }
        if let Some(l) = &self.latent {
            v.linear(&l.ffn_routed_down);
        }
        self.experts.visit(v);
        if let Some(l) = &self.latent {
            if let Some(norm) = &l.ffn_routed_norm {
                v.array(&norm.weight);
            }
            v.linear(&l.ffn_routed_up);
        }
        if let Some(shared) = &self.shared {
            shared.visit(v);
        }
    }
}
