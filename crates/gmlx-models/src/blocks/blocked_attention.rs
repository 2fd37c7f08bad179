//! Softmax attention over a long row, for training: the queries are split into blocks of
//! [`BLOCK`], each attending to the keys up to its last query (causally), under a custom VJP.
//! The gradient tape keeps only the row's q, k, v and output; the backward pass recomputes
//! one block's scores at a time and differentiates them, as flash attention's backward does,
//! so the `[heads, queries, keys]` scores and probabilities of the whole row never exist at
//! once. `GMLX_TRAIN_BLOCKED_ATTN=0` restores MLX's whole-row attention.
use gmlx_mlx::custom_vjp::CustomVjp;
use gmlx_mlx::fast::{self, ScaledDotProductAttentionMask};
use gmlx_mlx::mlx_rs::error::Exception;
use gmlx_mlx::Array;

use crate::cache::KeyMask;
use crate::error::Result;

/// Queries per block.
pub const BLOCK: i32 = 256;

/// Whether a differentiated pass over `queries` queries attends in blocks.
pub fn blocked_here(queries: i32) -> bool {
    queries > BLOCK
        && gmlx_mlx::quant::training()
        && !std::env::var("GMLX_TRAIN_BLOCKED_ATTN").is_ok_and(|v| v == "0")
}

/// `softmax(q k^T · scale + mask) v` with the optional per-head `sinks` logit, as MLX's
/// `scaled_dot_product_attention` computes it (`q [batch, heads, queries, dim]`, `k`, `v`
/// `[batch, kv_heads, keys, dim]`, grouped heads), in blocks of queries when
/// [`blocked_here`] says so.
pub fn attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: &KeyMask,
    sinks: Option<&Array>,
) -> Result<Array> {
    let queries = q.shape()[2];
    if !blocked_here(queries) {
        return whole(q, k, v, scale, mask, sinks);
    }
    blocked(q, k, v, scale, mask, sinks, BLOCK)
}

/// Attention over all queries at once: on the CPU for many queries [`super::cpu_attention`],
/// else MLX's.
pub fn whole(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: &KeyMask,
    sinks: Option<&Array>,
) -> Result<Array> {
    if let Some(out) = super::cpu_attention::attention(q, k, v, scale, mask, sinks)? {
        return Ok(out);
    }
    let mask = match mask {
        KeyMask::All => None,
        KeyMask::Causal => Some(ScaledDotProductAttentionMask::Causal),
        KeyMask::Array(m) => Some(ScaledDotProductAttentionMask::Array(m)),
    };
    Ok(fast::scaled_dot_product_attention(
        q, k, v, scale, mask, sinks,
    )?)
}

/// [`attention`] in blocks of `block` queries, whatever the pass, with its own backward pass.
pub fn blocked(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: &KeyMask,
    sinks: Option<&Array>,
    block: i32,
) -> Result<Array> {
    let plan = Blocks {
        queries: q.shape()[2],
        keys: k.shape()[2],
        block,
        scale,
        causal: matches!(mask, KeyMask::Causal),
        has_mask: matches!(mask, KeyMask::Array(_)),
        has_sinks: sinks.is_some(),
    };
    let mut inputs = vec![q.clone(), k.clone(), v.clone()];
    if let KeyMask::Array(m) = mask {
        inputs.push(m.clone());
    }
    inputs.extend(sinks.cloned());
    let forward = move |xs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
        let mut outs: Vec<Array> = Vec::new();
        for (start, end) in plan.ranges() {
            let mut inputs = plan.inputs(xs, start, end).map_err(exception)?;
            // one block after another: MLX would otherwise run many side by side
            if let Some(last) = outs.last() {
                inputs = gmlx_mlx::custom_vjp::depends(&inputs, std::slice::from_ref(last))
                    .map_err(gmlx_mlx::Error::into_exception)?;
            }
            outs.push(plan.attend(&inputs)?);
        }
        Ok(vec![gmlx_mlx::ops::concatenate(&outs, 2)?])
    };
    let backward =
        move |xs: &[Array], cotangents: &[Array], _: &[Array]| plan.backward(xs, &cotangents[0]);
    let f = CustomVjp::new(forward, backward)?;
    let mut out = f.apply(&inputs)?;
    Ok(out.remove(0))
}

/// How a row's queries split into blocks, and what one block attends with.
#[derive(Debug, Clone, Copy)]
struct Blocks {
    queries: i32,
    keys: i32,
    block: i32,
    scale: f32,
    causal: bool,
    has_mask: bool,
    has_sinks: bool,
}

impl Blocks {
    /// The blocks' query ranges, in order.
    fn ranges(self) -> impl Iterator<Item = (i32, i32)> {
        (0..self.queries)
            .step_by(self.block.max(1) as usize)
            .map(move |start| (start, (start + self.block).min(self.queries)))
    }

    /// The keys the queries `..end` can see: causal queries are aligned to the last key, as
    /// MLX aligns them, so they see none after `keys - queries + end`.
    fn seen(self, end: i32) -> i32 {
        if self.causal {
            self.keys - self.queries + end
        } else {
            self.keys
        }
    }

    /// One block's `[q, k, v, (mask), (sinks)]` out of the whole row's.
    fn inputs(self, xs: &[Array], start: i32, end: i32) -> Result<Vec<Array>> {
        let seen = self.seen(end);
        let mut block = vec![
            last_two(&xs[0], start, end, None)?,
            last_two(&xs[1], 0, seen, None)?,
            last_two(&xs[2], 0, seen, None)?,
        ];
        if self.has_mask {
            block.push(last_two(&xs[3], start, end, Some(seen))?);
        }
        if self.has_sinks {
            block.push(xs[xs.len() - 1].clone());
        }
        Ok(block)
    }

    /// MLX's attention of one block.
    fn attend(self, xs: &[Array]) -> std::result::Result<Array, Exception> {
        let mask = if self.has_mask {
            Some(ScaledDotProductAttentionMask::Array(&xs[3]))
        } else if self.causal {
            Some(ScaledDotProductAttentionMask::Causal)
        } else {
            None
        };
        let sinks = self.has_sinks.then(|| &xs[xs.len() - 1]);
        fast::scaled_dot_product_attention(&xs[0], &xs[1], &xs[2], self.scale, mask, sinks)
    }

    /// The gradients of the whole row: each block's attention is recomputed and
    /// differentiated by MLX, one block after another (each block's inputs depend on the
    /// gradients so far, so no two blocks' scores are alive at once); key, value and sink
    /// gradients are summed over the blocks.
    fn backward(self, xs: &[Array], d_out: &Array) -> std::result::Result<Vec<Array>, Exception> {
        let mut d_q = Vec::new();
        let mut d_k = gmlx_mlx::ops::zeros_like(&xs[1])?;
        let mut d_v = gmlx_mlx::ops::zeros_like(&xs[2])?;
        let mut d_sinks = self
            .has_sinks
            .then(|| gmlx_mlx::ops::zeros_like(&xs[xs.len() - 1]))
            .transpose()?;
        for (start, end) in self.ranges() {
            let mut inputs = self.inputs(xs, start, end).map_err(exception)?;
            if start > 0 {
                let mut done: Vec<Array> = d_q.last().into_iter().cloned().collect();
                done.extend([d_k.clone(), d_v.clone()]);
                inputs = gmlx_mlx::custom_vjp::depends(&inputs, &done)
                    .map_err(gmlx_mlx::Error::into_exception)?;
            }
            let cotangent = last_two(d_out, start, end, None).map_err(exception)?;
            let (_, grads) = gmlx_mlx::mlx_rs::transforms::fallible_vjp(
                |b: &[Array]| Ok(vec![self.attend(b)?]),
                &inputs,
                &[cotangent],
            )?;
            let seen = self.seen(end);
            d_q.push(grads[0].clone());
            d_k = add_prefix(&d_k, &grads[1], seen)?;
            d_v = add_prefix(&d_v, &grads[2], seen)?;
            if let Some(d) = &mut d_sinks {
                *d = d.add(&grads[grads.len() - 1])?;
            }
        }
        let mut grads = vec![gmlx_mlx::ops::concatenate(&d_q, 2)?, d_k, d_v];
        if self.has_mask {
            grads.push(gmlx_mlx::ops::zeros_like(&xs[3])?);
        }
        grads.extend(d_sinks);
        Ok(grads)
    }
}

/// `total` with `part` added to its first `seen` positions (axis 2).
fn add_prefix(total: &Array, part: &Array, seen: i32) -> std::result::Result<Array, Exception> {
    let keys = total.shape()[2];
    if seen == keys {
        return total.add(part);
    }
    let head = last_two(total, 0, seen, None)
        .map_err(exception)?
        .add(part)?;
    let tail = last_two(total, seen, keys, None).map_err(exception)?;
    gmlx_mlx::ops::concatenate(&[head, tail], 2)
}

fn exception(e: crate::error::Error) -> Exception {
    Exception::custom(e.to_string())
}

/// `a[..., start..end, :keys]` (all of the last axis without `keys`).
fn last_two(a: &Array, start: i32, end: i32, keys: Option<i32>) -> Result<Array> {
    let rows = gmlx_mlx::slicing::slice_axis(a, -2, start, end)?;
    Ok(match keys {
        Some(keys) => gmlx_mlx::slicing::slice_axis(&rows, -1, 0, keys)?,
        None => rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmlx_mlx::mlx_rs::transforms::value_and_grad_with_argnums;

    fn normal(shape: &[i32], seed: u64) -> Array {
        gmlx_mlx::mlx_rs::random::normal::<f32>(
            shape,
            None,
            None,
            &gmlx_mlx::mlx_rs::random::key(seed).expect("key"),
        )
        .expect("normal")
    }

    /// Loss `sum(attention · w)` and its gradients with respect to q, k, v (and the sinks,
    /// when there are any: `inputs[3]`).
    fn loss_and_grads(
        blocked_by: Option<i32>,
        mask: &KeyMask,
        w: &Array,
        inputs: &[Array],
    ) -> (f32, Vec<Array>) {
        let mask = mask.clone();
        let w = w.clone();
        let argnums: Vec<i32> = (0..inputs.len() as i32).collect();
        let mut f = value_and_grad_with_argnums(
            move |xs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                let sinks = xs.get(3);
                let out = match blocked_by {
                    Some(b) => blocked(&xs[0], &xs[1], &xs[2], 0.125, &mask, sinks, b),
                    None => whole(&xs[0], &xs[1], &xs[2], 0.125, &mask, sinks),
                }
                .map_err(|e| Exception::custom(e.to_string()))?;
                Ok(vec![out.multiply(&w)?.sum(None)?])
            },
            &argnums[..],
        );
        let (loss, grads) = f(inputs).expect("value and grad");
        (loss[0].item_exact::<f32>(), grads)
    }

    fn max_rel(a: &Array, b: &Array) -> f32 {
        let largest = |x: Array| x.abs().and_then(|x| x.max(None)).expect("max");
        let diff = largest(a.subtract(b).expect("subtract"));
        let scale = largest(b.clone());
        diff.item_exact::<f32>() / scale.item_exact::<f32>().max(1e-12)
    }

    fn check(mask: KeyMask, sinks: Option<Array>, queries: i32, keys: i32, block: i32) {
        let (heads, kv_heads, dim) = (4, 2, 16);
        let mut inputs = vec![
            normal(&[1, heads, queries, dim], 1),
            normal(&[1, kv_heads, keys, dim], 2),
            normal(&[1, kv_heads, keys, dim], 3),
        ];
        inputs.extend(sinks);
        let w = normal(&[1, heads, queries, dim], 4);
        let (l1, g1) = loss_and_grads(None, &mask, &w, &inputs);
        let (l2, g2) = loss_and_grads(Some(block), &mask, &w, &inputs);
        assert!(
            (l1 - l2).abs() <= 1e-5 * l1.abs().max(1.0),
            "loss {l1} vs {l2}"
        );
        assert_eq!(g1.len(), inputs.len());
        for (name, (a, b)) in ["q", "k", "v", "sinks"].iter().zip(g2.iter().zip(&g1)) {
            let rel = max_rel(a, b);
            assert!(rel < 1e-5, "d{name}: relative difference {rel}");
        }
    }

    #[test]
    fn causal_blocks_give_the_whole_rows_loss_and_gradients() {
        // blocks of 16 over 70 queries: a partial last block
        check(KeyMask::Causal, None, 70, 70, 16);
    }

    #[test]
    fn queries_after_cached_keys_stay_aligned_to_the_last_key() {
        check(KeyMask::Causal, None, 40, 57, 16);
    }

    #[test]
    fn array_masks_and_sinks_are_cut_per_block() {
        let window = crate::blocks::mask::causal(0, 50, 0, 50, Some(9)).expect("mask");
        check(KeyMask::Array(window), Some(normal(&[4], 5)), 50, 50, 16);
        check(KeyMask::All, None, 33, 33, 8);
    }

    #[test]
    fn only_long_differentiated_rows_are_blocked() {
        assert!(
            !blocked_here(BLOCK * 8),
            "an inference pass is never blocked"
        );
        let _training = gmlx_mlx::quant::training_products();
        assert!(!blocked_here(BLOCK));
        assert!(blocked_here(BLOCK + 1));
    }
}
