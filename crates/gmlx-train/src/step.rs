//! The training forward: the frozen, quantized model with the LoRA parameters passed in
//! explicitly (so MLX's transforms can differentiate with respect to them), and the loss.
use gmlx_mlx::checkpoint::Checkpointed;
use gmlx_mlx::mlx_rs::error::Exception;
use gmlx_mlx::mlx_rs::random;
use gmlx_mlx::Array;
use gmlx_models::blocks::decoder::DecoderLayer;
use gmlx_models::blocks::linear::{Lora, LoraDropout};
use gmlx_models::{BlockRunner, Direct, ForwardCtx, Logits, Model, Pass};

use crate::data::Example;
use crate::error::Result;
use crate::lora::{LoraSet, Target};

/// The teacher's distributions at a batch's target positions (in `positions` order), padded
/// to `k` candidates: `ids [n, k]` u32, `probs [n, k]` (0 for padding), `on [n]` 1 where a
/// distribution replaces the label, `neg_entropy [n]` its `sum p log p` (so the loss is the
/// KL divergence, 0 when the student matches the teacher).
#[derive(Debug, Clone)]
pub struct SoftTargets {
    pub ids: Array,
    pub probs: Array,
    pub on: Array,
    pub neg_entropy: Array,
}

impl SoftTargets {
    fn new(rows: &[Option<&Vec<(u32, f32)>>]) -> SoftTargets {
        let k = rows
            .iter()
            .flatten()
            .map(|r| r.len())
            .max()
            .unwrap_or(1)
            .max(1);
        let n = rows.len();
        let (mut ids, mut probs) = (vec![0u32; n * k], vec![0f32; n * k]);
        let (mut on, mut neg_entropy) = (vec![0f32; n], vec![0f32; n]);
        for (r, row) in rows.iter().enumerate() {
            let Some(row) = row else { continue };
            on[r] = 1.0;
            for (c, &(id, p)) in row.iter().enumerate() {
                ids[r * k + c] = id;
                probs[r * k + c] = p;
                if p > 0.0 {
                    neg_entropy[r] += p * p.ln();
                }
            }
        }
        let shape = [n as i32, k as i32];
        SoftTargets {
            ids: Array::from_slice(&ids, &shape),
            probs: Array::from_slice(&probs, &shape),
            on: Array::from_slice(&on, &[n as i32]),
            neg_entropy: Array::from_slice(&neg_entropy, &[n as i32]),
        }
    }
}

/// A padded micro-batch: `inputs[b, t]` predicts `targets[b, t]`; only the positions with
/// weight 1 (not padding, not a masked prompt token) count in the loss, and only their logits
/// are computed: `positions` indexes them in the flattened `[batch × len]` grid and `labels`
/// holds their tokens.
#[derive(Debug, Clone)]
pub struct Batch {
    pub inputs: Array,
    pub targets: Array,
    pub weights: Array,
    pub positions: Array,
    pub labels: Array,
    /// Hidden states entering block `start` (the frozen blocks below it already run), when
    /// they were cached: `(start, [batch, len, hidden])`.
    pub prefix: Option<(usize, Array)>,
    /// Distillation targets, when an example has any.
    pub soft: Option<SoftTargets>,
    /// Tokens fed (without padding).
    pub n_tokens: usize,
    /// Positions that count in the loss.
    pub n_targets: usize,
}

impl Batch {
    pub fn new(examples: &[&Example]) -> Batch {
        let len = examples
            .iter()
            .map(|e| e.ids.len() - 1)
            .max()
            .unwrap_or(1)
            .max(1);
        let rows = examples.len();
        let mut inputs = vec![0u32; rows * len];
        let mut targets = vec![0u32; rows * len];
        let mut weights = vec![0f32; rows * len];
        let (mut n_tokens, mut n_targets) = (0, 0);
        let (mut positions, mut labels) = (Vec::new(), Vec::new());
        let mut soft_rows: Vec<Option<&Vec<(u32, f32)>>> = Vec::new();
        for (r, e) in examples.iter().enumerate() {
            let n = e.ids.len() - 1;
            n_tokens += n;
            for t in 0..n {
                inputs[r * len + t] = e.ids[t];
                targets[r * len + t] = e.ids[t + 1];
                if e.target[t + 1] {
                    weights[r * len + t] = 1.0;
                    n_targets += 1;
                    positions.push((r * len + t) as u32);
                    labels.push(e.ids[t + 1]);
                    soft_rows.push(e.soft.get(t + 1).and_then(Option::as_ref));
                }
            }
        }
        let shape = [rows as i32, len as i32];
        Batch {
            inputs: Array::from_slice(&inputs, &shape),
            targets: Array::from_slice(&targets, &shape),
            weights: Array::from_slice(&weights, &shape),
            positions: Array::from_slice(&positions, &[positions.len() as i32]),
            labels: Array::from_slice(&labels, &[labels.len() as i32]),
            prefix: None,
            soft: soft_rows
                .iter()
                .any(Option::is_some)
                .then(|| SoftTargets::new(&soft_rows)),
            n_tokens,
            n_targets,
        }
    }

    /// Attaches cached hidden states entering block `start`: one `[1, n, hidden]` array per
    /// example (`n` = its input length), padded here to the batch's length.
    pub fn with_prefix(mut self, start: usize, rows: &[&Array]) -> Result<Batch> {
        let len = self.inputs.shape()[1];
        let mut padded = Vec::with_capacity(rows.len());
        for h in rows {
            let (n, hidden) = (h.shape()[1], h.shape()[2]);
            padded.push(if n < len {
                let pad = gmlx_mlx::ops::zeros_dtype(&[1, len - n, hidden], h.dtype())?;
                gmlx_mlx::ops::concatenate(&[(*h).clone(), pad], 1)?
            } else {
                (*h).clone()
            });
        }
        self.prefix = Some((start, gmlx_mlx::ops::concatenate(&padded, 0)?));
        Ok(self)
    }
}

/// Runs the frozen blocks `0..end` on `ids` (one row): the hidden states entering block `end`.
/// No adapter sits in these blocks, so the result is a constant of training.
pub fn frozen_prefix(model: &Model, ids: &[u32], end: usize) -> Result<Array> {
    let tokens = Array::from_slice(ids, &[1, ids.len() as i32]);
    let pass = Pass {
        from: None,
        until: Some(end),
        logits: Logits::Last,
    };
    let x = model.run(&mut ForwardCtx::uncached(&tokens), pass, &mut Direct)?;
    x.eval()?;
    Ok(x)
}

/// How one forward runs.
#[derive(Debug, Clone, Copy)]
pub struct ForwardOptions {
    /// Run each adapted block under MLX's checkpoint transform.
    pub checkpoint: bool,
    /// Adapter-input dropout and the seed of its masks (`None`: no dropout, as in validation).
    pub dropout: Option<(f32, u64)>,
}

fn exception(e: gmlx_models::Error) -> Exception {
    Exception::custom(e.to_string())
}

/// One block with the given LoRA parameters installed: inputs `[x, a0, b0, a1, b1, ...]`,
/// output `[block(x)]`, then the indexer selection the next blocks see when there is one
/// (`selection` is the one the block was given). Owns what it needs, so it can live inside
/// MLX's graph.
fn block_fn(
    layer: DecoderLayer,
    index: usize,
    tokens: Array,
    selection: Option<Array>,
    names: Vec<String>,
    scale: f32,
    dropout: Option<(f32, Vec<Array>)>,
) -> impl FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception> + 'static {
    move |inputs: &[Array]| {
        let mut layer = layer.clone();
        for (k, name) in names.iter().enumerate() {
            if let Some(linear) = layer.linear_mut(name) {
                linear.lora = Some(Lora {
                    a: inputs[1 + 2 * k].clone(),
                    b: inputs[2 + 2 * k].clone(),
                    scale,
                    dropout: dropout.as_ref().map(|(p, keys)| LoraDropout {
                        p: *p,
                        key: keys[k].clone(),
                    }),
                });
            }
        }
        let mut ctx = ForwardCtx::uncached(&tokens);
        ctx.selection[0] = selection.clone();
        let y = layer
            .forward(&inputs[0], index, &mut ctx)
            .map_err(exception)?;
        // the selection is a discrete choice: no gradient flows through it
        match ctx.selection[0].take() {
            Some(s) => Ok(vec![y, gmlx_mlx::mlx_rs::stop_gradient(&s)?]),
            None => Ok(vec![y]),
        }
    }
}

/// Runs the blocks of a training forward: a block with adapters gets its parameters passed
/// in (under MLX's checkpoint transform when asked), the others run as they are.
struct AdaptedBlocks<'p> {
    by_layer: Vec<Vec<usize>>,
    targets: &'p [Target],
    params: &'p [Array],
    scale: f32,
    options: ForwardOptions,
}

impl BlockRunner for AdaptedBlocks<'_> {
    fn run(
        &mut self,
        li: usize,
        block: &DecoderLayer,
        x: Array,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> gmlx_models::Result<Array> {
        let targets = &self.by_layer[li];
        if targets.is_empty() {
            return block.forward(&x, li, ctx);
        }
        let names: Vec<String> = targets
            .iter()
            .map(|&t| self.targets[t].name.clone())
            .collect();
        let dropout = match self.options.dropout {
            Some((p, seed)) if p > 0.0 => {
                // one mask stream per (block, projection), the projection numbered by its
                // place in the block
                let place = |name: &str| {
                    block
                        .linears()
                        .iter()
                        .position(|l| l.name() == name)
                        .unwrap_or(0) as u64
                };
                let keys = names
                    .iter()
                    .map(|name| random::key(seed ^ ((li as u64) << 32) ^ (place(name) << 48)))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Some((p, keys))
            }
            _ => None,
        };
        let mut inputs = Vec::with_capacity(1 + 2 * targets.len());
        inputs.push(x);
        for &t in targets {
            inputs.push(self.params[2 * t].clone());
            inputs.push(self.params[2 * t + 1].clone());
        }
        let tokens = ctx.tokens.clone();
        let selection = ctx.selection[0].clone();
        let mut f = block_fn(
            block.clone(),
            li,
            tokens,
            selection,
            names,
            self.scale,
            dropout,
        );
        let mut out = if self.options.checkpoint {
            Checkpointed::new(f).and_then(|c| c.apply(&inputs))?
        } else {
            f(&inputs)?
        };
        if out.len() > 1 {
            ctx.selection[0] = out.pop();
        }
        Ok(out.remove(0))
    }
}

/// Mean cross-entropy over the batch's target positions, as a function of `params` (the
/// [`LoraSet`]'s layout). The base weights are constants of the graph: no gradient reaches
/// them and none is computed for them.
pub fn loss(
    model: &Model,
    set: &LoraSet,
    params: &[Array],
    batch: &Batch,
    options: ForwardOptions,
) -> Result<Array> {
    let mut blocks = AdaptedBlocks {
        by_layer: set.by_layer(model.layers().len()),
        targets: &set.targets,
        params,
        scale: set.scale,
        options,
    };
    // Only the target positions go through the output head, the costliest matmul.
    let pass = Pass {
        from: batch.prefix.clone(),
        until: None,
        logits: Logits::Positions(batch.positions.clone()),
    };
    let logits = model.run(&mut ForwardCtx::uncached(&batch.inputs), pass, &mut blocks)?;
    match &batch.soft {
        Some(soft) => distillation_loss(&logits, &batch.labels, soft),
        None => cross_entropy(&logits, &batch.labels),
    }
}

/// Mean over rows of `KL(teacher || student)` where a row has a teacher distribution, of the
/// cross-entropy of its label elsewhere: `logits [n, vocab]`, `labels [n]`.
pub fn distillation_loss(logits: &Array, labels: &Array, soft: &SoftTargets) -> Result<Array> {
    let n = labels.shape()[0];
    let logp = logits.subtract(logits.logsumexp_axis(-1, true)?)?;
    let hard = logp
        .take_along_axis(labels.reshape(&[n, 1])?, -1)?
        .reshape(&[n])?
        .negative()?;
    let candidates = logp.take_along_axis(&soft.ids, -1)?; // [n, k]
    let kl = soft
        .neg_entropy
        .subtract(soft.probs.multiply(&candidates)?.sum_axis(-1, false)?)?;
    let one = Array::from_f32(1.0);
    let per_row = soft
        .on
        .multiply(&kl)?
        .add(one.subtract(&soft.on)?.multiply(&hard)?)?;
    Ok(per_row.mean(None)?)
}

/// Mean of `logsumexp(logits) − logits[label]` over rows: `logits [n, vocab]`, `labels [n]`.
pub fn cross_entropy(logits: &Array, labels: &Array) -> Result<Array> {
    let n = labels.shape()[0];
    let lse = logits.logsumexp_axis(-1, false)?;
    let picked = logits
        .take_along_axis(labels.reshape(&[n, 1])?, -1)?
        .reshape(&[n])?;
    Ok(lse.subtract(&picked)?.mean(None)?)
}
