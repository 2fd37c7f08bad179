//! DeepSeek-V4 attention, computed as llama.cpp's `src/models/deepseek4.cpp` does. Queries
//! come from a low-rank projection (`attn_q_a`, norm, `attn_q_b`) with a weightless per-head
//! RMSNorm; each position keeps one key row (`attn_kv`, normed), which is also its value. The
//! trailing `rope_dim` dimensions of queries and keys rotate (NORM layout) and the attended
//! output is rotated back. A query sees the raw rows of its sliding window and, on compressed
//! layers, the pooled rows of every block of `ratio` positions completed up to it: all of them
//! (ratio 128, HCA) or those a lightning indexer ranks in its top k (ratio 4, CSA). Sinks; the
//! output goes through `attn_output_a` per group of heads, then `attn_output_b`.
use gmlx_mlx::slicing::slice;
use gmlx_mlx::{fast, ops, Array, Dtype, QuantWeight};

use crate::blocks::blocked_attention;
use crate::blocks::context::ForwardCtx;
use crate::blocks::latent::top_k_visible;
use crate::blocks::linear::Linear;
use crate::blocks::mask;
use crate::blocks::norm::RmsNorm;
use crate::blocks::rope::Rope;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};
use crate::cache::{Compressed, CompressorState, KeyMask, LayerCache};
use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct CompressedAttention {
    pub attn_q_a: Linear,
    pub attn_q_a_norm: RmsNorm,
    pub attn_q_b: Linear,
    pub attn_kv: Linear,
    pub attn_kv_norm: RmsNorm,
    /// `[groups, out_rank, heads / groups · head_dim]`: one low-rank output per group of heads.
    pub attn_output_a: QuantWeight,
    pub attn_output_b: Linear,
    /// `[heads]`, float32.
    pub sinks: Array,
    /// The pooling of compressed layers.
    pub compressor: Option<Compressor>,
    /// The choice of pooled rows on ratio-4 layers.
    pub indexer: Option<BlockIndexer>,
    pub n_heads: i32,
    pub head_dim: i32,
    pub rope_dim: i32,
    pub window: i32,
    pub out_groups: i32,
    pub eps: f32,
    pub rope: Rope,
}

/// Pools every `ratio` positions into one row: per dimension, a softmax over the block's
/// positions of `gate · x + ape[position % ratio]` weighs `kv · x`. The overlapped form (ratio
/// 4) has rows twice as wide and pools `2 · ratio` positions: the previous block's first
/// halves and this block's second halves. The pooled row is RMS-normed and its trailing
/// `rope_dim` dimensions rotated at the block's first position.
#[derive(Debug, Clone)]
pub struct Compressor {
    pub kv: Linear,
    pub gate: Linear,
    /// `[ratio, width]`, float32.
    pub ape: Array,
    pub norm: RmsNorm,
    pub ratio: i32,
    pub overlap: bool,
    /// Width of a pooled row.
    pub dim: i32,
    pub rope_dim: i32,
    /// The layer's compressed rope with positions scaled by `ratio` (row `j` sits at `j · ratio`).
    pub rope: Rope,
    /// `[dim, dim]`: the indexer's keys are rotated by a Walsh-Hadamard matrix.
    pub hadamard: Option<Array>,
}

/// A lightning indexer over the pooled rows: `score(t, j) = sum_h relu(q_th · k_j) · w_th`, its
/// queries from the attention's low-rank query, its keys pooled by their own compressor; both
/// rotate their trailing dimensions and are turned by a Walsh-Hadamard matrix (an orthonormal
/// change of basis: llama.cpp applies it so its caches quantize well; it leaves the scores as
/// they are up to rounding).
#[derive(Debug, Clone)]
pub struct BlockIndexer {
    pub attn_q_b: Linear,
    pub proj: Linear,
    pub compressor: Compressor,
    pub heads: i32,
    pub head_dim: i32,
    pub top_k: i32,
    pub hadamard: Array,
}

/// The per-position inputs of one chunk, before the caches.
struct Projected {
    /// `[batch, heads, tokens, head_dim]`, rotated.
    q: Array,
    /// `[batch, 1, tokens, head_dim]`, rotated.
    kv: Array,
    /// `[batch, tokens, q_rank]`: the normed low-rank query (the indexer's input).
    qr: Array,
}

impl CompressedAttention {
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let out = if ctx.is_cached() {
            let mut outs = Vec::with_capacity(batch as usize);
            for b in 0..batch {
                let position = ctx.positions[b as usize];
                let row = if batch == 1 {
                    x.clone()
                } else {
                    slice(x, &[b, 0, 0], &[b + 1, tokens, shape[2]])?
                };
                let cache = match ctx.layer_cache(b as usize, layer) {
                    Some(LayerCache::Compressed(c)) => c,
                    _ => return Err(Error::CacheMismatch { layer }),
                };
                outs.push(self.attend(&row, position, layer, Some(cache))?);
            }
            if outs.len() == 1 {
                outs.remove(0)
            } else {
                ops::concatenate(&outs, 0)?
            }
        } else {
            self.attend(x, 0, layer, None)?
        };
        self.output(&out, batch)
    }

    /// `x [batch, tokens, hidden]` whose first token sits at `position`, against the layer's
    /// cache (or, without one, as a whole sequence from position 0): `[batch, heads, tokens,
    /// head_dim]`, already rotated back.
    fn attend(
        &self,
        x: &Array,
        position: i32,
        layer: usize,
        cache: Option<&mut Compressed>,
    ) -> Result<Array> {
        let p = self.project(x, position)?;
        let tokens = x.shape()[1];
        let mut cache = cache;
        let (raw, before) = match cache.as_deref_mut() {
            Some(c) => c.raw_rows(&p.kv)?,
            None => (p.kv.clone(), 0),
        };
        let mut keys = raw;
        let mut visible = mask::causal(
            position,
            tokens,
            position - before,
            keys.shape()[2],
            Some(self.window),
        )?;
        if let Some(compressor) = &self.compressor {
            let state = cache.as_deref_mut().map(|c| &mut c.state);
            let new = compressor.step(x, position, state)?;
            let pooled = match cache.as_deref_mut() {
                Some(c) => c.pooled_rows(new.as_ref())?,
                None => new,
            };
            // the indexer's compressor keeps its state whether or not a block completes
            let indexer_keys = match &self.indexer {
                Some(ix) => {
                    let state = cache.as_deref_mut().map(|c| &mut c.indexer_state);
                    let new = ix.compressor.step(x, position, state)?;
                    match cache {
                        Some(c) => c.indexer_rows(new.as_ref())?,
                        None => new,
                    }
                }
                None => None,
            };
            if let Some(pooled) = pooled {
                let rows = pooled.shape()[2];
                let mut seen = block_visibility(position, tokens, rows, compressor.ratio)?;
                if let Some(ix) = &self.indexer {
                    let ix_keys = indexer_keys.ok_or(Error::CacheMismatch { layer })?;
                    seen = ix.select(x, &p.qr, &ix_keys, position, &seen, self)?;
                }
                let b = keys.shape()[0];
                let raw_mask = ops::broadcast_to(
                    &visible.reshape(&[1, 1, tokens, keys.shape()[2]])?,
                    &[b, 1, tokens, keys.shape()[2]],
                )?;
                let seen = ops::broadcast_to(
                    &seen.reshape(&[-1, 1, tokens, rows])?,
                    &[b, 1, tokens, rows],
                )?;
                visible = ops::concatenate(&[raw_mask, seen], -1)?;
                let pooled = pooled.as_dtype(keys.dtype())?;
                keys = ops::concatenate(&[keys, pooled], 2)?;
            }
        }
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let out = blocked_attention::attention(
            &p.q,
            &keys,
            &keys,
            scale,
            &KeyMask::Array(visible),
            Some(&self.sinks),
        )?;
        self.rotate_trailing_back(&out, position)
    }

    fn project(&self, x: &Array, position: i32) -> Result<Projected> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let qr = self.attn_q_a_norm.forward(&self.attn_q_a.forward(x)?)?;
        let q = self
            .attn_q_b
            .forward(&qr)?
            .reshape(&[batch, tokens, self.n_heads, self.head_dim])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let q = fast::rms_norm(&q, None, self.eps)?;
        let kv = self
            .attn_kv_norm
            .forward(&self.attn_kv.forward(x)?)?
            .expand_dims_axes(&[1])?;
        Ok(Projected {
            q: rotate_trailing(&q, &self.rope, self.rope_dim, position)?,
            kv: rotate_trailing(&kv, &self.rope, self.rope_dim, position)?,
            qr,
        })
    }

    /// The inverse rotation of the trailing dimensions (llama.cpp's `rope_ext_back`): a
    /// rotation by `-θ` is the rotation by `θ` of the input with its pairs' second halves
    /// negated, negated again.
    fn rotate_trailing_back(&self, x: &Array, position: i32) -> Result<Array> {
        let flip = pair_flip(self.rope_dim, self.head_dim, x.dtype())?;
        let y = rotate_trailing(&x.multiply(&flip)?, &self.rope, self.rope_dim, position)?;
        Ok(y.multiply(&flip)?)
    }

    /// `out [batch, heads, tokens, head_dim]` through the grouped low-rank output.
    fn output(&self, out: &Array, batch: i32) -> Result<Array> {
        let tokens = out.shape()[2];
        let groups = self.out_groups;
        let per_group = self.n_heads / groups * self.head_dim;
        let grouped =
            out.transpose_axes(&[0, 2, 1, 3])?
                .reshape(&[batch * tokens, groups, 1, per_group])?;
        let ids = ops::broadcast_to(
            &Array::arange::<_, u32>(0, groups as u32, None)?.reshape(&[1, groups])?,
            &[batch * tokens, groups],
        )?;
        let low = self.attn_output_a.gather_matmul(&grouped, &ids)?; // [n, groups, 1, rank]
        let low = low.reshape(&[batch, tokens, -1])?;
        self.attn_output_b.forward(&low)
    }

    /// Its weights: the projections (adaptable) with the norms, the grouped output, the
    /// sinks, the compressors' and the indexer's.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        v.linear(&self.attn_q_a);
        v.array(&self.attn_q_a_norm.weight);
        v.linear(&self.attn_q_b);
        v.linear(&self.attn_kv);
        v.array(&self.attn_kv_norm.weight);
        v.quant(&self.attn_output_a);
        v.linear(&self.attn_output_b);
        v.array(&self.sinks);
        if let Some(c) = &self.compressor {
            c.visit(v);
        }
        if let Some(ix) = &self.indexer {
            v.linear(&ix.proj);
            v.linear(&ix.attn_q_b);
            ix.compressor.visit(v);
        }
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        v.linear(&mut self.attn_q_a);
        v.linear(&mut self.attn_q_b);
        v.linear(&mut self.attn_kv);
        v.linear(&mut self.attn_output_b);
        if let Some(c) = &mut self.compressor {
            v.linear(&mut c.kv);
            v.linear(&mut c.gate);
        }
        if let Some(ix) = &mut self.indexer {
            v.linear(&mut ix.proj);
            v.linear(&mut ix.attn_q_b);
            v.linear(&mut ix.compressor.kv);
            v.linear(&mut ix.compressor.gate);
        }
    }
}

impl Compressor {
    /// The pooled rows `[batch, 1, n, dim]` of the blocks `x [batch, tokens, hidden]` (first
    /// token at `position`) completes, or `None`. `state` holds the rows of earlier calls not
    /// yet pooled for good and is updated; without one the chunk starts a sequence.
    fn step(
        &self,
        x: &Array,
        position: i32,
        state: Option<&mut CompressorState>,
    ) -> Result<Option<Array>> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let r = self.ratio;
        let kv = self.kv.forward(x)?.as_dtype(Dtype::Float32)?;
        let slots: Vec<u32> = (0..tokens).map(|i| ((position + i) % r) as u32).collect();
        let ape = self
            .ape
            .take_axis(Array::from_slice(&slots, &[tokens]), 0)?;
        let score = self.gate.forward(x)?.as_dtype(Dtype::Float32)?.add(&ape)?;
        let (first_block, end) = (position / r, position + tokens);
        let done = end / r;
        // the rows held start where the state of `position` starts
        let start = self.state_start(first_block);
        let (kv, score, held_state) = match state {
            Some(s) => {
                let held = |a: Option<Array>, new: Array| -> Result<Array> {
                    Ok(match a {
                        Some(h) => ops::concatenate(&[h, new], 1)?,
                        None => new,
                    })
                };
                let kv = held(s.kv.take(), kv)?;
                let score = held(s.score.take(), score)?;
                (kv, score, Some(s))
            }
            None => (kv, score, None),
        };
        let width = kv.shape()[2];
        if let Some(s) = held_state {
            let keep_from = self.state_start(done) - start;
            let n = kv.shape()[1];
            s.kv = Some(slice(&kv, &[0, keep_from, 0], &[batch, n, width])?);
            s.score = Some(slice(&score, &[0, keep_from, 0], &[batch, n, width])?);
        }
        let blocks = done - first_block;
        if blocks == 0 {
            return Ok(None);
        }
        let d = self.dim;
        let (values, scores) = if self.overlap {
            // the previous block's first halves, then this block's second halves; before
            // block 0 there is nothing (values 0, scores -inf)
            let (kv, score) = if first_block == 0 {
                let zeros = ops::zeros_dtype(&[batch, r, width], Dtype::Float32)?;
                let none =
                    ops::full::<f32>(&[batch, r, width], Array::from_f32(f32::NEG_INFINITY))?;
                (
                    ops::concatenate(&[zeros, kv], 1)?,
                    ops::concatenate(&[none, score], 1)?,
                )
            } else {
                (kv, score)
            };
            let part = |a: &Array, from_row: i32, from_dim: i32| -> Result<Array> {
                Ok(slice(
                    a,
                    &[0, from_row, from_dim],
                    &[batch, from_row + blocks * r, from_dim + d],
                )?
                .reshape(&[batch, blocks, r, d])?)
            };
            (
                ops::concatenate(&[part(&kv, 0, 0)?, part(&kv, r, d)?], 2)?,
                ops::concatenate(&[part(&score, 0, 0)?, part(&score, r, d)?], 2)?,
            )
        } else {
            let part = |a: &Array| -> Result<Array> {
                Ok(slice(a, &[0, 0, 0], &[batch, blocks * r, d])?
                    .reshape(&[batch, blocks, r, d])?)
            };
            (part(&kv)?, part(&score)?)
        };
        let weights = ops::softmax_axis(&scores, 2, true)?;
        let pooled = values.multiply(&weights)?.sum_axis(2, false)?; // [b, blocks, d]
        let pooled = self
            .norm
            .forward(&pooled.as_dtype(x.dtype())?)?
            .expand_dims_axes(&[1])?;
        let mut pooled = rotate_trailing(&pooled, &self.rope, self.rope_dim, first_block)?;
        if let Some(h) = &self.hadamard {
            pooled = pooled.matmul(h)?;
        }
        Ok(Some(pooled))
    }

    /// The first position a state must keep once `blocks` blocks are pooled: the block still
    /// filling, and for the overlapped form the one before it.
    fn state_start(&self, blocks: i32) -> i32 {
        if self.overlap {
            (blocks - 1).max(0) * self.ratio
        } else {
            blocks * self.ratio
        }
    }

    fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        v.linear(&self.kv);
        v.linear(&self.gate);
        v.array(&self.ape);
        v.array(&self.norm.weight);
    }
}

impl BlockIndexer {
    /// Which pooled rows `keys [batch, 1, n, dim]` the queries of `x` (first at `position`)
    /// see: `[batch, 1, tokens, n]`, the `top_k` best of the `visible [tokens, n]` ones.
    fn select(
        &self,
        x: &Array,
        qr: &Array,
        keys: &Array,
        position: i32,
        visible: &Array,
        attn: &CompressedAttention,
    ) -> Result<Array> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let q = self
            .attn_q_b
            .forward(qr)?
            .reshape(&[batch, tokens, self.heads, self.head_dim])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let q = rotate_trailing(&q, &attn.rope, attn.rope_dim, position)?.matmul(&self.hadamard)?;
        let scale = 1.0 / ((self.head_dim * self.heads) as f32).sqrt();
        let w = self.proj.forward(x)?.multiply(Array::from_f32(scale))?;
        top_k_visible(&q, &keys.as_dtype(q.dtype())?, &w, visible, self.top_k)
    }
}

/// `[tokens, rows]`: the query at `position + t` sees pooled row `j` once block `j` is complete
/// (`(j + 1) · ratio <= position + t + 1`).
fn block_visibility(position: i32, tokens: i32, rows: i32, ratio: i32) -> Result<Array> {
    let q = Array::arange::<_, i32>(position + 1, position + tokens + 1, None)?
        .reshape(&[tokens, 1])?;
    let ends = Array::arange::<_, i32>(1, rows + 1, None)?
        .multiply(Array::from_int(ratio))?
        .reshape(&[1, rows])?;
    Ok(ends.le(&q)?)
}

/// Rotates the trailing `rope_dim` dimensions of `x [batch, heads, tokens, dim]`, its first
/// token at `position`.
fn rotate_trailing(x: &Array, rope: &Rope, rope_dim: i32, position: i32) -> Result<Array> {
    let s = x.shape().to_vec();
    let nope = s[3] - rope_dim;
    let head = slice(x, &[0, 0, 0, 0], &[s[0], s[1], s[2], nope])?;
    let tail = slice(x, &[0, 0, 0, nope], &[s[0], s[1], s[2], s[3]])?;
    Ok(ops::concatenate(
        &[head, rope.forward(&tail, position)?],
        -1,
    )?)
}

/// `[dim]` of ones with -1 on the second element of every rotating pair (adjacent pairs, in
/// the trailing `rope_dim` dimensions).
fn pair_flip(rope_dim: i32, dim: i32, dtype: Dtype) -> Result<Array> {
    let nope = dim - rope_dim;
    let values: Vec<f32> = (0..dim)
        .map(|i| {
            if i >= nope && (i - nope) % 2 == 1 {
                -1.0
            } else {
                1.0
            }
        })
        .collect();
    Ok(Array::from_slice(&values, &[dim]).as_dtype(dtype)?)
}

/// The orthonormal Walsh-Hadamard matrix of order `n` (a power of two), as llama.cpp builds it.
pub fn hadamard(n: i32) -> Array {
    let n = n as usize;
    let scale = 1.0 / (n as f32).sqrt();
    let values: Vec<f32> = (0..n * n)
        .map(|k| {
            let (i, j) = (k / n, k % n);
            if (i & j).count_ones() % 2 == 0 {
                scale
            } else {
                -scale
            }
        })
        .collect();
    Array::from_slice(&values, &[n as i32, n as i32])
}
