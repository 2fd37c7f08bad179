//! Multi-head latent attention (HY4), computed as llama.cpp does, MQA style over the latent:
//! queries come from a low-rank projection (`attn_q_a`, norm, `attn_q_b`); each position
//! keeps one compressed row, the normed latent `c` and a rotary key part `k_pe`
//! (`attn_kv_a_mqa`). A head's query is its non-rotary part absorbed into the latent space
//! through `attn_k_b`, followed by its rotary part; keys are `[c, k_pe]`, values are `c`; the
//! attended latent is decompressed per head by `attn_v_b`. Rotation is llama.cpp's NORM
//! layout (adjacent pairs). Optional: sinks, a sigmoid output gate, and a lightning indexer
//! that lets each query see only its `top_k` best-scored keys (shared by later layers).
//! Kimi-K3's variant: queries from one full projection (`attn_q`), and no rotation at all
//! (its "rotary" parts enter the scores as they are). GLM-5-Next's indexer scores pools of
//! `kpool` consecutive keys instead of single keys ([`PoolIndexer`]).
use gmlx_mlx::{fast, ops, Array};

use crate::blocks::blocked_attention;
use crate::blocks::context::ForwardCtx;
use crate::blocks::linear::Linear;
use crate::blocks::mask;
use crate::blocks::norm::RmsNorm;
use crate::blocks::rope::Rope;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};
use crate::cache::{KeyMask, Latent, LayerCache};
use crate::error::{Error, Result};
use gmlx_mlx::slicing::slice;

/// Where the queries come from.
#[derive(Debug, Clone)]
pub enum LatentQuery {
    /// `attn_q_b(norm(attn_q_a(x)))`: the low-rank query (an indexer reads its rank row).
    LowRank {
        attn_q_a: Linear,
        attn_q_a_norm: RmsNorm,
        attn_q_b: Linear,
    },
    /// `attn_q(x)`.
    Full { attn_q: Linear },
}

#[derive(Debug, Clone)]
pub struct LatentAttention {
    pub query: LatentQuery,
    pub attn_kv_a_mqa: Linear,
    pub attn_kv_a_norm: RmsNorm,
    /// `[heads, kv_rank, nope_dim]`: a head's non-rotary query into the latent space.
    pub attn_k_b: Array,
    /// `[heads, v_dim, kv_rank]`: the attended latent out to a head's values.
    pub attn_v_b: Array,
    pub attn_gate: Option<Linear>,
    pub attn_output: Linear,
    pub sinks: Option<Array>,
    /// This layer's own indexer; `None` with `shares_selection` reads the last one's choice.
    pub indexer: Option<LatentIndexer>,
    pub shares_selection: bool,
    pub n_heads: i32,
    pub nope_dim: i32,
    pub rope_dim: i32,
    pub kv_rank: i32,
    pub v_dim: i32,
    /// `None`: nothing rotates (Kimi-K3's nope-only attention).
    pub rope: Option<Rope>,
}

/// What chooses the keys a query sees.
#[derive(Debug, Clone)]
pub enum LatentIndexer {
    /// Scores every key (HY4).
    Keys(Indexer),
    /// Scores pools of consecutive keys (GLM-5-Next).
    Pools(PoolIndexer),
}

impl LatentIndexer {
    fn inputs(&self, x: &Array, q_rank: &Array) -> Result<IndexInputs> {
        match self {
            LatentIndexer::Keys(ix) => ix.inputs(x, q_rank),
            LatentIndexer::Pools(ix) => ix.inputs(x, q_rank),
        }
    }

    fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        match self {
            LatentIndexer::Keys(ix) => {
                v.linear(&ix.attn_q_b);
                v.linear(&ix.attn_k);
                v.array(&ix.k_norm_weight);
                v.array(&ix.k_norm_bias);
                v.linear(&ix.proj);
            }
            LatentIndexer::Pools(ix) => {
                v.linear(&ix.attn_q_b);
                v.linear(&ix.attn_k);
                v.array(&ix.k_norm_weight);
                v.array(&ix.k_norm_bias);
                v.linear(&ix.kpool_gate);
                v.array(&ix.kpool_ape);
                v.linear(&ix.proj);
            }
        }
    }

    fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        match self {
            LatentIndexer::Keys(ix) => {
                v.linear(&mut ix.attn_q_b);
                v.linear(&mut ix.attn_k);
                v.linear(&mut ix.proj);
            }
            LatentIndexer::Pools(ix) => {
                v.linear(&mut ix.attn_q_b);
                v.linear(&mut ix.attn_k);
                v.linear(&mut ix.kpool_gate);
                v.linear(&mut ix.proj);
            }
        }
    }
}

/// GLM-5-Next's k-pool indexer. Each key position keeps `k = LayerNorm(attn_k · x)` and gate
/// logits `g = kpool_gate · x`; every `kpool` consecutive positions (a pool, once complete)
/// pool into one key, `sum_j softmax_j(g_j + ape_j) · k_j` per channel. A query scores the
/// complete pools that end at or before it, `sum_h relu(q_h · pooled) · w_h`, and sees the
/// keys of its `top_k / kpool` best pools, plus (with `select_tail`) the positions of its own
/// pool not yet complete. Nothing rotates.
#[derive(Debug, Clone)]
pub struct PoolIndexer {
    pub attn_q_b: Linear,
    pub attn_k: Linear,
    pub k_norm_weight: Array,
    pub k_norm_bias: Array,
    pub kpool_gate: Linear,
    /// `[kpool, head_dim]` float32: added to the gate logits by place in the pool.
    pub kpool_ape: Array,
    pub proj: Linear,
    pub heads: i32,
    pub head_dim: i32,
    pub top_k: i32,
    pub kpool: i32,
    pub select_tail: bool,
    /// The epsilon of the keys' LayerNorm.
    pub eps: f32,
}

impl PoolIndexer {
    /// Queries `[b, t, heads, dim]`, the rows the cache keeps `[b, 1, t, 2 · dim]` (keys, then
    /// gate logits), weights `[b, t, heads]`.
    fn inputs(&self, x: &Array, q_rank: &Array) -> Result<IndexInputs> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let q =
            self.attn_q_b
                .forward(q_rank)?
                .reshape(&[batch, tokens, self.heads, self.head_dim])?;
        let k = fast::layer_norm(
            &self.attn_k.forward(x)?,
            Some(&self.k_norm_weight),
            Some(&self.k_norm_bias),
            self.eps,
        )?;
        let rows = ops::concatenate(&[k, self.kpool_gate.forward(x)?], -1)?;
        let scale = 1.0 / ((self.head_dim * self.heads) as f32).sqrt();
        let w = self.proj.forward(x)?.multiply(Array::from_f32(scale))?;
        Ok(IndexInputs {
            q,
            k: rows.expand_dims_axes(&[1])?,
            w,
        })
    }

    /// The keys each query sees, `[b, 1, t, s]` booleans: `q [b, t, heads, dim]` of the
    /// queries at `position..`, `rows [b, 1, s, 2 · dim]` of every position from 0,
    /// `w [b, t, heads]`, `visible [t, s]` the causal mask.
    fn select(
        &self,
        q: &Array,
        rows: &Array,
        w: &Array,
        position: i32,
        visible: &Array,
    ) -> Result<Array> {
        let (batch, tokens, keys) = (q.shape()[0], q.shape()[1], rows.shape()[2]);
        let (kpool, dim) = (self.kpool, self.head_dim);
        let pools = keys / kpool;
        let queries = Array::arange::<_, i32>(position, position + tokens, None)?;
        // a query's own pool, not complete yet: the positions after its last complete pool
        let pool_start = queries
            .add(Array::from_int(1))?
            .floor_divide(Array::from_int(kpool))?
            .multiply(Array::from_int(kpool))?
            .reshape(&[tokens, 1])?;
        let key_pos = Array::arange::<_, i32>(0, keys, None)?.reshape(&[1, keys])?;
        let tail = if self.select_tail {
            key_pos.ge(&pool_start)?.logical_and(visible)?
        } else {
            ops::zeros_dtype(&[tokens, keys], gmlx_mlx::Dtype::Bool)?
        };
        if pools == 0 {
            // before the first complete pool: the incomplete one, or (without the tail) itself
            let seen = if self.select_tail {
                tail
            } else {
                key_pos.eq(&queries.reshape(&[tokens, 1])?)?
            };
            return Ok(ops::broadcast_to(
                seen.reshape(&[1, 1, tokens, keys])?,
                &[batch, 1, tokens, keys],
            )?);
        }
        // pool the complete pools: [b, pools, kpool, dim] keys and gates
        let members = slice(rows, &[0, 0, 0, 0], &[batch, 1, pools * kpool, 2 * dim])?
            .reshape(&[batch, pools, kpool, 2 * dim])?
            .as_dtype(gmlx_mlx::Dtype::Float32)?;
        let k = slice(&members, &[0, 0, 0, 0], &[batch, pools, kpool, dim])?;
        let g = slice(&members, &[0, 0, 0, dim], &[batch, pools, kpool, 2 * dim])?;
        let probs = ops::softmax_axis(&g.add(&self.kpool_ape)?, 2, true)?;
        let pooled = probs.multiply(&k)?.sum_axis(2, false)?; // [b, pools, dim]
        let q = q
            .as_dtype(gmlx_mlx::Dtype::Float32)?
            .transpose_axes(&[0, 2, 1, 3])?; // [b, h, t, d]
        let dots = ops::maximum(
            &q.matmul(pooled.expand_dims(1)?.transpose_axes(&[0, 1, 3, 2])?)?,
            Array::from_f32(0.0),
        )?; // [b, h, t, pools]
        let w = w
            .as_dtype(gmlx_mlx::Dtype::Float32)?
            .transpose_axes(&[0, 2, 1])?
            .expand_dims(-1)?;
        let scores = dots.multiply(&w)?.sum_axis(1, false)?; // [b, t, pools]
                                                             // a pool is a candidate once complete at or before the query
        let pool_end = Array::arange::<_, i32>(0, pools, None)?
            .add(Array::from_int(1))?
            .multiply(Array::from_int(kpool))?
            .subtract(Array::from_int(1))?
            .reshape(&[1, pools])?;
        let candidate = pool_end.le(&queries.reshape(&[tokens, 1])?)?; // [t, pools]
        let chosen = best_visible(&scores, &candidate, self.top_k / kpool)?; // [b, t, pools]
                                                                             // pools to their keys; positions past the last complete pool belong to none
        let mut chosen_keys =
            ops::broadcast_to(chosen.expand_dims(-1)?, &[batch, tokens, pools, kpool])?
                .reshape(&[batch, tokens, pools * kpool])?;
        if pools * kpool < keys {
            let rest = ops::zeros_dtype(
                &[batch, tokens, keys - pools * kpool],
                gmlx_mlx::Dtype::Bool,
            )?;
            chosen_keys = ops::concatenate(&[chosen_keys, rest], -1)?;
        }
        let seen = chosen_keys.logical_and(visible)?.logical_or(&tail)?;
        // without `select_tail`, a query before its first complete pool has nothing to see
        // (llama.cpp's softmax then has no finite term): it sees itself
        let own = key_pos.eq(&queries.reshape(&[tokens, 1])?)?;
        let empty = seen.any_axis(-1, true)?.logical_not()?;
        let seen = seen.logical_or(&empty.logical_and(&own)?)?;
        Ok(seen.expand_dims(1)?)
    }
}

/// `[b, t, n]` booleans: for each query, its `k` best-scored candidates (all of them when
/// fewer); `candidate [t, n]`.
fn best_visible(scores: &Array, candidate: &Array, k: i32) -> Result<Array> {
    let n = scores.shape()[2];
    let candidate = ops::broadcast_to(candidate.expand_dims(0)?, scores.shape())?;
    if k >= n {
        return Ok(candidate);
    }
    let masked = ops::select(&candidate, scores, Array::from_f32(f32::NEG_INFINITY))?;
    let order = ops::partition_axis(&masked.negative()?, k - 1, -1)?;
    let s = order.shape().to_vec();
    let kth = slice(&order, &[0, 0, k - 1], &[s[0], s[1], k])?.negative()?;
    Ok(masked.ge(&kth)?.logical_and(&candidate)?)
}

/// A lightning indexer: `score(t, s) = sum_h relu(q_th · k_s) · w_th`, the keys with the
/// `top_k` highest scores visible to query `t`. Its queries come from the attention's
/// low-rank query, its keys (LayerNorm with bias) from the layer input; both rotate their
/// trailing `rope_dim` dimensions.
#[derive(Debug, Clone)]
pub struct Indexer {
    pub attn_q_b: Linear,
    pub attn_k: Linear,
    pub k_norm_weight: Array,
    pub k_norm_bias: Array,
    pub proj: Linear,
    pub heads: i32,
    pub head_dim: i32,
    pub top_k: i32,
    pub eps: f32,
}

/// A layer's per-row inputs to attention, before rotation.
struct Projected {
    /// `[batch, heads, tokens, kv_rank]`: non-rotary queries in the latent space.
    q_latent: Array,
    /// `[batch, heads, tokens, rope_dim]`.
    q_pe: Array,
    /// `[batch, 1, tokens, kv_rank]`.
    latent: Array,
    /// `[batch, 1, tokens, rope_dim]`.
    k_pe: Array,
    /// The indexer's inputs, when the layer owns one.
    index: Option<IndexInputs>,
}

struct IndexInputs {
    /// `[batch, tokens, heads, head_dim]`, not yet rotated.
    q: Array,
    /// `[batch, 1, tokens, head_dim]`, normed, not yet rotated.
    k: Array,
    /// `[batch, tokens, heads]`, scaled.
    w: Array,
}

impl LatentAttention {
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let p = self.project(x)?;
        let out = if ctx.is_cached() {
            let mut outs = Vec::with_capacity(batch as usize);
            for b in 0..batch {
                let position = ctx.positions[b as usize];
                let row = p.row(b, batch)?;
                let shared = ctx.selection[b as usize].clone();
                let cache = match ctx.layer_cache(b as usize, layer) {
                    Some(LayerCache::Latent(c)) => c,
                    _ => return Err(Error::CacheMismatch { layer }),
                };
                let (out, selection) = self.attend_cached(row, position, shared, cache, layer)?;
                if let Some(selection) = selection {
                    ctx.selection[b as usize] = Some(selection);
                }
                outs.push(out);
            }
            if outs.len() == 1 {
                outs.remove(0)
            } else {
                ops::concatenate(&outs, 0)?
            }
        } else {
            let shared = ctx.selection[0].clone();
            let (out, selection) = self.attend_whole(p, tokens, shared, layer)?;
            if let Some(selection) = selection {
                ctx.selection[0] = Some(selection);
            }
            out
        };
        // [b, heads, t, kv_rank] -> per-head values [b, heads, t, v_dim] -> [b, t, heads · v]
        let values = out.matmul(self.attn_v_b.transpose_axes(&[0, 2, 1])?)?;
        let mut out = values.transpose_axes(&[0, 2, 1, 3])?.reshape(&[
            batch,
            tokens,
            self.n_heads * self.v_dim,
        ])?;
        if let Some(gate) = &self.attn_gate {
            out = out.multiply(ops::sigmoid(&gate.forward(x)?)?)?;
        }
        self.attn_output.forward(&out)
    }

    fn project(&self, x: &Array) -> Result<Projected> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let (q, q_rank) = match &self.query {
            LatentQuery::LowRank {
                attn_q_a,
                attn_q_a_norm,
                attn_q_b,
            } => {
                let rank = attn_q_a_norm.forward(&attn_q_a.forward(x)?)?;
                (attn_q_b.forward(&rank)?, Some(rank))
            }
            LatentQuery::Full { attn_q } => (attn_q.forward(x)?, None),
        };
        let head = self.nope_dim + self.rope_dim;
        let q = q
            .reshape(&[batch, tokens, self.n_heads, head])?
            .transpose_axes(&[0, 2, 1, 3])?;
        let q_nope = slice(
            &q,
            &[0, 0, 0, 0],
            &[batch, self.n_heads, tokens, self.nope_dim],
        )?;
        let q_pe = slice(
            &q,
            &[0, 0, 0, self.nope_dim],
            &[batch, self.n_heads, tokens, head],
        )?;
        let q_latent = q_nope.matmul(self.attn_k_b.transpose_axes(&[0, 2, 1])?)?;
        let kv = self.attn_kv_a_mqa.forward(x)?;
        let width = self.kv_rank + self.rope_dim;
        let latent = self.attn_kv_a_norm.forward(&slice(
            &kv,
            &[0, 0, 0],
            &[batch, tokens, self.kv_rank],
        )?)?;
        let k_pe = slice(&kv, &[0, 0, self.kv_rank], &[batch, tokens, width])?;
        let index = match (&self.indexer, &q_rank) {
            (Some(ix), Some(rank)) => Some(ix.inputs(x, rank)?),
            (Some(_), None) => {
                return Err(Error::BadConfig {
                    key: "attn_q_a".into(),
                    reason: "a lightning indexer reads the low-rank query".into(),
                })
            }
            (None, _) => None,
        };
        Ok(Projected {
            q_latent,
            q_pe,
            latent: latent.expand_dims_axes(&[1])?,
            k_pe: k_pe.expand_dims_axes(&[1])?,
            index,
        })
    }

    /// A pass over whole sequences from position 0.
    fn attend_whole(
        &self,
        p: Projected,
        tokens: i32,
        shared: Option<Array>,
        layer: usize,
    ) -> Result<(Array, Option<Array>)> {
        let q = ops::concatenate(&[p.q_latent, self.rotate(&p.q_pe, 0)?], -1)?;
        let keys = ops::concatenate(&[p.latent.clone(), self.rotate(&p.k_pe, 0)?], -1)?;
        let visible = mask::causal(0, tokens, 0, tokens, None)?;
        let (mask, selection) =
            self.visibility(p.index, 0, &visible, shared, layer, |k| Ok(k.clone()))?;
        Ok((self.sdpa(&q, &keys, &p.latent, mask.as_ref())?, selection))
    }

    /// One row of a cached pass: rotate at the row's position, append to its cache, attend.
    fn attend_cached(
        &self,
        p: Projected,
        position: i32,
        shared: Option<Array>,
        cache: &mut Latent,
        layer: usize,
    ) -> Result<(Array, Option<Array>)> {
        let q = ops::concatenate(&[p.q_latent, self.rotate(&p.q_pe, position)?], -1)?;
        let row = ops::concatenate(&[p.latent, self.rotate(&p.k_pe, position)?], -1)?;
        let rows = cache.append_rows(&row)?;
        let s = rows.shape().to_vec();
        let latent = slice(&rows, &[0, 0, 0, 0], &[s[0], s[1], s[2], self.kv_rank])?;
        let tokens = q.shape()[2];
        let visible = mask::causal(position, tokens, 0, s[2], None)?;
        let (mask, selection) =
            self.visibility(p.index, position, &visible, shared, layer, |k| {
                cache
                    .append_indexer_keys(k)
                    .ok_or(Error::CacheMismatch { layer })?
            })?;
        let mask = match mask {
            Some(m) => Some(m),
            // one query sees every key held; a chunk is causal
            None if tokens > 1 => Some(visible),
            None => None,
        };
        Ok((self.sdpa(&q, &rows, &latent, mask.as_ref())?, selection))
    }

    /// Which keys the queries see: this layer's indexer choice (also returned, for the
    /// layers that share it), the shared choice, or `None` for plain causal attention.
    /// `keys_held` turns this step's rotated indexer keys into every key of the sequence.
    fn visibility(
        &self,
        index: Option<IndexInputs>,
        position: i32,
        visible: &Array,
        shared: Option<Array>,
        layer: usize,
        keys_held: impl FnOnce(&Array) -> Result<Array>,
    ) -> Result<(Option<Array>, Option<Array>)> {
        match (&self.indexer, index) {
            (Some(LatentIndexer::Keys(ix)), Some(inputs)) => {
                let q =
                    self.rotate_trailing(&inputs.q.transpose_axes(&[0, 2, 1, 3])?, ix, position)?;
                let k = keys_held(&self.rotate_trailing(&inputs.k, ix, position)?)?;
                let selected = ix.select(&q, &k, &inputs.w, visible)?;
                Ok((Some(selected.clone()), Some(selected)))
            }
            (Some(LatentIndexer::Pools(ix)), Some(inputs)) => {
                let rows = keys_held(&inputs.k)?;
                let selected = ix.select(&inputs.q, &rows, &inputs.w, position, visible)?;
                Ok((Some(selected.clone()), Some(selected)))
            }
            _ if self.shares_selection => match shared {
                Some(s) => Ok((Some(s), None)),
                None => Err(Error::CacheMismatch { layer }),
            },
            _ => Ok((
                if position == 0 && visible.shape()[0] > 1 {
                    Some(visible.clone())
                } else {
                    None
                },
                None,
            )),
        }
    }

    /// Rotates the trailing `rope_dim` dimensions of `x [batch, heads, tokens, head_dim]`.
    fn rotate_trailing(&self, x: &Array, ix: &Indexer, position: i32) -> Result<Array> {
        let s = x.shape().to_vec();
        let nope = ix.head_dim - self.rope_dim;
        let head = slice(x, &[0, 0, 0, 0], &[s[0], s[1], s[2], nope])?;
        let tail = slice(x, &[0, 0, 0, nope], &[s[0], s[1], s[2], ix.head_dim])?;
        Ok(ops::concatenate(
            &[head, self.rotate(&tail, position)?],
            -1,
        )?)
    }

    /// `x` rotated at `position` onwards, or as it is without rotation.
    fn rotate(&self, x: &Array, position: i32) -> Result<Array> {
        match &self.rope {
            Some(rope) => rope.forward(x, position),
            None => Ok(x.clone()),
        }
    }

    fn sdpa(&self, q: &Array, k: &Array, v: &Array, mask: Option<&Array>) -> Result<Array> {
        let scale = 1.0 / ((self.nope_dim + self.rope_dim) as f32).sqrt();
        let mask = mask.map_or(KeyMask::All, |m| KeyMask::Array(m.clone()));
        blocked_attention::attention(q, k, v, scale, &mask, self.sinks.as_ref())
    }

    /// Its weights: the projections (adaptable) with the norms, the absorbed matrices, the
    /// sinks and the indexer's.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        match &self.query {
            LatentQuery::LowRank {
                attn_q_a,
                attn_q_a_norm,
                attn_q_b,
            } => {
                v.linear(attn_q_a);
                v.array(&attn_q_a_norm.weight);
                v.linear(attn_q_b);
            }
            LatentQuery::Full { attn_q } => v.linear(attn_q),
        }
        v.linear(&self.attn_kv_a_mqa);
        v.array(&self.attn_kv_a_norm.weight);
        v.array(&self.attn_k_b);
        v.array(&self.attn_v_b);
        if let Some(g) = &self.attn_gate {
            v.linear(g);
        }
        v.linear(&self.attn_output);
        if let Some(s) = &self.sinks {
            v.array(s);
        }
        if let Some(ix) = &self.indexer {
            ix.visit(v);
        }
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        match &mut self.query {
            LatentQuery::LowRank {
                attn_q_a, attn_q_b, ..
            } => {
                v.linear(attn_q_a);
                v.linear(attn_q_b);
            }
            LatentQuery::Full { attn_q } => v.linear(attn_q),
        }
        v.linear(&mut self.attn_kv_a_mqa);
        if let Some(g) = &mut self.attn_gate {
            v.linear(g);
        }
        v.linear(&mut self.attn_output);
        if let Some(ix) = &mut self.indexer {
            ix.visit_mut(v);
        }
    }
}

impl Indexer {
    fn inputs(&self, x: &Array, q_rank: &Array) -> Result<IndexInputs> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let q =
            self.attn_q_b
                .forward(q_rank)?
                .reshape(&[batch, tokens, self.heads, self.head_dim])?;
        let k = fast::layer_norm(
            &self.attn_k.forward(x)?,
            Some(&self.k_norm_weight),
            Some(&self.k_norm_bias),
            self.eps,
        )?;
        let scale = 1.0 / ((self.head_dim * self.heads) as f32).sqrt();
        let w = self.proj.forward(x)?.multiply(Array::from_f32(scale))?;
        Ok(IndexInputs {
            q,
            k: k.expand_dims_axes(&[1])?,
            w,
        })
    }

    fn select(&self, q: &Array, k: &Array, w: &Array, visible: &Array) -> Result<Array> {
        top_k_visible(q, k, w, visible, self.top_k)
    }
}

/// A lightning indexer's choice. `q [b, heads, t, d]` (rotated), `k [b, 1, s, d]` (every key
/// held, rotated), `w [b, t, heads]`, `visible [t, s]`: `[b, 1, t, s]` booleans, the `top_k`
/// visible keys with the highest `sum_h relu(q_h · k) · w_h`.
pub(crate) fn top_k_visible(
    q: &Array,
    k: &Array,
    w: &Array,
    visible: &Array,
    top_k: i32,
) -> Result<Array> {
    let dots = ops::maximum(
        &q.matmul(k.transpose_axes(&[0, 1, 3, 2])?)?,
        Array::from_f32(0.0),
    )?; // [b, h, t, s]
    let w = w.transpose_axes(&[0, 2, 1])?.expand_dims_axes(&[-1])?; // [b, h, t, 1]
    let scores = dots.multiply(&w)?.sum_axis(1, true)?; // [b, 1, t, s]
    let keys = scores.shape()[3];
    let visible = visible.reshape(&[1, 1, visible.shape()[0], keys])?;
    if top_k >= keys {
        return Ok(ops::broadcast_to(&visible, scores.shape())?);
    }
    let masked = ops::select(&visible, &scores, Array::from_f32(f32::NEG_INFINITY))?;
    // the top_k-th largest visible score of each query; fewer visible keys make it -inf
    let order = ops::partition_axis(&masked.negative()?, top_k - 1, -1)?;
    let s = order.shape().to_vec();
    let kth = slice(&order, &[0, 0, 0, top_k - 1], &[s[0], s[1], s[2], top_k])?.negative()?;
    Ok(masked.ge(&kth)?.logical_and(&visible)?)
}

impl Projected {
    /// Row `b` of a batch (itself when there is one row).
    fn row(&self, b: i32, batch: i32) -> Result<Projected> {
        if batch == 1 {
            return Ok(Projected {
                q_latent: self.q_latent.clone(),
                q_pe: self.q_pe.clone(),
                latent: self.latent.clone(),
                k_pe: self.k_pe.clone(),
                index: self.index.as_ref().map(|i| IndexInputs {
                    q: i.q.clone(),
                    k: i.k.clone(),
                    w: i.w.clone(),
                }),
            });
        }
        let of = |a: &Array| -> Result<Array> {
            let s = a.shape().to_vec();
            let mut start = vec![0; s.len()];
            let mut stop = s.clone();
            start[0] = b;
            stop[0] = b + 1;
            Ok(slice(a, &start, &stop)?)
        };
        Ok(Projected {
            q_latent: of(&self.q_latent)?,
            q_pe: of(&self.q_pe)?,
            latent: of(&self.latent)?,
            k_pe: of(&self.k_pe)?,
            index: match &self.index {
                Some(i) => Some(IndexInputs {
                    q: of(&i.q)?,
                    k: of(&i.k)?,
                    w: of(&i.w)?,
                }),
                None => None,
            },
        })
    }
}
