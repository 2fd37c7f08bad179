//! Grouped-query softmax attention with rotary positions, optional per-head Q/K norms,
//! sinks, a sliding window, and QSA block-sparse selection (Qwen4 experimental, [`Qsa`]).
use gmlx_mlx::cuda_qmv::Rotation;
use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::{Array, Dtype};

use crate::blocks::blocked_attention;
use crate::blocks::context::ForwardCtx;
use crate::blocks::host;
use crate::blocks::linear::Linear;
use crate::blocks::mask;
use crate::blocks::norm::RmsNorm;
use crate::blocks::rope::Rope;
use crate::blocks::visit::{LinearVisitorMut, WeightVisitor};
use crate::cache::{Attended, KeyMask, LayerCache};
use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct Attention {
    pub qkv: QkvProjection,
    pub attn_output: Linear,
    /// Per-head RMSNorm of queries and keys before rotation (Qwen3).
    pub attn_q_norm: Option<RmsNorm>,
    pub attn_k_norm: Option<RmsNorm>,
    pub n_heads: i32,
    pub n_kv_heads: i32,
    pub head_dim: i32,
    pub rope: Rope,
    /// Per-head attention sink logits (gpt-oss): an extra softmax term with no value.
    pub sinks: Option<Array>,
    /// Sliding window: a query sees only the last `window` positions, itself included.
    pub window: Option<i32>,
    /// `attn_q` also yields per-head gate logits after each head's queries; the output is
    /// multiplied by their sigmoid (Qwen3.5, Qwen3-Next).
    pub output_gate: bool,
    /// Each query sees only the keys a QSA indexer selects.
    pub qsa: Option<Box<Qsa>>,
}

/// The query, key and value projections: three tensors, or one (`attn_qkv`, its rows the
/// queries, then the keys, then the values), as llama.cpp's converter writes with
/// `--fuse-qkv` and llama.cpp reads for the llama and Qwen families.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per attention layer, built once
pub enum QkvProjection {
    Separate {
        attn_q: Linear,
        attn_k: Linear,
        attn_v: Linear,
    },
    Fused {
        attn_qkv: Linear,
        /// Rows of queries (with their output gate, when there is one).
        q_rows: i32,
        /// Rows of keys, and of values.
        kv_rows: i32,
    },
}

impl QkvProjection {
    /// Whether [`QkvProjection::forward_host`] takes `rows` rows now.
    pub fn on_host(&self, rows: usize) -> bool {
        match self {
            QkvProjection::Separate {
                attn_q,
                attn_k,
                attn_v,
            } => attn_q.on_host(rows) && attn_k.on_host(rows) && attn_v.on_host(rows),
            QkvProjection::Fused { attn_qkv, .. } => attn_qkv.on_host(rows),
        }
    }

    /// [`QkvProjection::forward`] of `rows` row-major float32 rows on the host: each part
    /// row-major; `None` where [`QkvProjection::on_host`] says no.
    #[allow(clippy::type_complexity)]
    pub fn forward_host(
        &self,
        x: &[f32],
        rows: usize,
    ) -> Result<Option<(Vec<f32>, Vec<f32>, Vec<f32>)>> {
        match self {
            QkvProjection::Separate {
                attn_q,
                attn_k,
                attn_v,
            } => {
                let (Some(q), Some(k), Some(v)) = (
                    attn_q.forward_host(x, rows)?,
                    attn_k.forward_host(x, rows)?,
                    attn_v.forward_host(x, rows)?,
                ) else {
                    return Ok(None);
                };
                Ok(Some((q, k, v)))
            }
            QkvProjection::Fused {
                attn_qkv,
                q_rows,
                kv_rows,
            } => {
                let Some(all) = attn_qkv.forward_host(x, rows)? else {
                    return Ok(None);
                };
                let (qn, kvn) = (*q_rows as usize, *kv_rows as usize);
                let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
                for row in all.chunks_exact(qn + 2 * kvn) {
                    q.extend_from_slice(&row[..qn]);
                    k.extend_from_slice(&row[qn..qn + kvn]);
                    v.extend_from_slice(&row[qn + kvn..]);
                }
                Ok(Some((q, k, v)))
            }
        }
    }

    /// The separate form's three matrices for a launch before theirs to pull into L2
    /// ([`gmlx_mlx::cuda_warm`]); `None` for the fused form or a weight the kernels do not take.
    pub fn warm_set(&self) -> Option<WarmSet> {
        let [q, k, v] = self.separate()?;
        WarmSet::of(&[
            q.weight.decode_view()?,
            k.weight.decode_view()?,
            v.weight.decode_view()?,
        ])
    }

    /// The three projections of the separate form (queries, keys, values); `None` for the
    /// fused one.
    fn separate(&self) -> Option<[&Linear; 3]> {
        match self {
            QkvProjection::Separate {
                attn_q,
                attn_k,
                attn_v,
            } => Some([attn_q, attn_k, attn_v]),
            QkvProjection::Fused { .. } => None,
        }
    }

    /// [`QkvProjection::forward`] of `norm(x)`: three separate plain projections take the norm
    /// into their fused CUDA launch ([`Linear::forward_three_normed`]).
    pub fn forward_normed(&self, x: &Array, norm: &RmsNorm) -> Result<(Array, Array, Array)> {
        match self.separate() {
            Some(layers) => {
                let [q, k, v] = Linear::forward_three_normed(x, norm, layers)?;
                Ok((q, k, v))
            }
            None => self.forward(&norm.forward(x)?),
        }
    }

    /// [`QkvProjection::forward_normed`] with the queries and keys rotated by `rope` in the
    /// same CUDA launch, or `None` (nothing done) where gmlx's kernel does not take it all.
    pub fn forward_normed_rotated(
        &self,
        x: &Array,
        norm: &RmsNorm,
        rope: Rotation<'_>,
    ) -> Result<Option<(Array, Array, Array)>> {
        let Some(layers) = self.separate() else {
            return Ok(None);
        };
        let rotated = Linear::forward_three_normed_rotated(x, norm, rope, layers)?;
        Ok(rotated.map(|[q, k, v]| (q, k, v)))
    }

    /// Queries `[.., q_rows]`, keys and values `[.., kv_rows]` of `x [.., hidden]`.
    pub fn forward(&self, x: &Array) -> Result<(Array, Array, Array)> {
        match self {
            QkvProjection::Separate {
                attn_q,
                attn_k,
                attn_v,
            } => {
                let [q, k, v] = Linear::forward_three(x, [attn_q, attn_k, attn_v])?;
                Ok((q, k, v))
            }
            QkvProjection::Fused {
                attn_qkv,
                q_rows,
                kv_rows,
            } => {
                let all = attn_qkv.forward(x)?;
                let part = |from: i32, rows: i32| {
                    gmlx_mlx::slicing::slice_axis(&all, -1, from, from + rows)
                };
                Ok((
                    part(0, *q_rows)?,
                    part(*q_rows, *kv_rows)?,
                    part(q_rows + kv_rows, *kv_rows)?,
                ))
            }
        }
    }

    /// The projections, in file order.
    pub fn linears(&self) -> Vec<&Linear> {
        match self {
            QkvProjection::Separate {
                attn_q,
                attn_k,
                attn_v,
            } => vec![attn_q, attn_k, attn_v],
            QkvProjection::Fused { attn_qkv, .. } => vec![attn_qkv],
        }
    }

    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            QkvProjection::Separate {
                attn_q,
                attn_k,
                attn_v,
            } => vec![attn_q, attn_k, attn_v],
            QkvProjection::Fused { attn_qkv, .. } => vec![attn_qkv],
        }
    }
}

/// QSA (Qwen4 experimental), as llama.cpp selects: every complete block of `ratio` positions
/// is one key, the mean of its raw indexer keys, normed and rotated at the block's start; a
/// query (normed, rotated at its position) scores a block by `sum_h relu(q_h · k_block)`, and
/// sees the `top_k + ratio - 1` best positions, each position scoring as its block and the
/// positions after its last complete block (its incomplete block) first. Which positions of a
/// tied block fill the leftover places is what llama.cpp's CPU `top_k` (libstdc++'s
/// `std::partial_sort`) keeps: [`heap_select`] does the same.
#[derive(Debug, Clone)]
pub struct Qsa {
    /// `[heads · head_dim, hidden]`.
    pub q_proj: Linear,
    /// `[head_dim, hidden]`.
    pub k_proj: Linear,
    pub q_norm: RmsNorm,
    pub k_norm: RmsNorm,
    pub heads: i32,
    pub head_dim: i32,
    pub top_k: i32,
    pub ratio: i32,
    /// The rotation of queries at their positions.
    pub rope: Rope,
    /// The same rotation at block starts (positions scaled by `ratio`).
    pub block_rope: Rope,
}

impl Qsa {
    /// Queries `[batch, heads, tokens, head_dim]` (normed, rotated at `position..`) and raw
    /// keys `[batch, 1, tokens, head_dim]`.
    fn project(&self, x: &Array, position: i32) -> Result<(Array, Array)> {
        let s = x.shape();
        let (batch, tokens) = (s[0], s[1]);
        let q = self
            .q_norm
            .forward(&self.q_proj.forward(x)?.reshape(&[
                batch,
                tokens,
                self.heads,
                self.head_dim,
            ])?)?
            .transpose_axes(&[0, 2, 1, 3])?;
        let q = self.rope.forward(&q, position)?;
        let k = self.k_proj.forward(x)?.expand_dims(1)?;
        Ok((q, k))
    }

    /// `[batch, 1, tokens, keys]` booleans: which of the `keys` positions held (raw indexer
    /// keys `[batch, 1, keys, head_dim]`) the queries at `position..` see.
    fn select(&self, q: &Array, keys: &Array, position: i32) -> Result<Array> {
        let s = keys.shape().to_vec();
        let (batch, held) = (s[0], s[2]);
        let tokens = q.shape()[2];
        let width = (self.top_k + self.ratio - 1) as usize;
        let blocks = held / self.ratio;
        let scores = if blocks > 0 {
            let members = gmlx_mlx::slicing::slice(
                keys,
                &[0, 0, 0, 0],
                &[batch, 1, blocks * self.ratio, self.head_dim],
            )?
            .reshape(&[batch, 1, blocks, self.ratio, self.head_dim])?
            .as_dtype(Dtype::Float32)?
            .mean_axis(3, false)?; // [b, 1, blocks, d]
            let pooled = self
                .block_rope
                .forward(&self.k_norm.forward(&members)?, 0)?;
            let dots = q
                .as_dtype(Dtype::Float32)?
                .matmul(pooled.transpose_axes(&[0, 1, 3, 2])?)?; // [b, h, t, blocks]
            let scores = gmlx_mlx::ops::maximum(&dots, Array::from_f32(0.0))?.sum_axis(1, false)?;
            scores.eval()?;
            scores.as_slice::<f32>().to_vec()
        } else {
            Vec::new()
        };
        let r = self.ratio as usize;
        let (held, blocks) = (held as usize, blocks as usize);
        let mut visible = vec![false; batch as usize * tokens as usize * held];
        for b in 0..batch as usize {
            for i in 0..tokens as usize {
                let p = position as usize + i;
                let row = &mut visible[(b * tokens as usize + i) * held..][..held];
                if p < width {
                    row[..=p].iter_mut().for_each(|v| *v = true);
                    continue;
                }
                let tail = (p + 1) / r * r;
                let score = &scores[(b * tokens as usize + i) * blocks..][..blocks];
                let values: Vec<f32> = (0..=p)
                    .map(|j| {
                        if j < tail {
                            score[j / r]
                        } else {
                            f32::INFINITY
                        }
                    })
                    .collect();
                for j in heap_select(&values, width) {
                    row[j] = true;
                }
            }
        }
        Ok(Array::from_slice(
            &visible,
            &[batch, 1, tokens, held as i32],
        ))
    }
}

/// The `k` indices `std::partial_sort(idx, idx + k, idx + n, values[a] > values[b])` keeps
/// with libstdc++ (a heap of the first `k`, then each later index strictly above the heap's
/// least replaces it): the same choice among ties as llama.cpp's CPU `top_k`.
pub fn heap_select(values: &[f32], k: usize) -> Vec<usize> {
    let mut a: Vec<usize> = (0..values.len()).collect();
    if k >= a.len() {
        return a;
    }
    let comp = |x: usize, y: usize| values[x] > values[y];
    fn push_heap(
        a: &mut [usize],
        mut hole: usize,
        top: usize,
        value: usize,
        comp: &dyn Fn(usize, usize) -> bool,
    ) {
        while hole > top {
            let parent = (hole - 1) / 2;
            if !comp(a[parent], value) {
                break;
            }
            a[hole] = a[parent];
            hole = parent;
        }
        a[hole] = value;
    }
    fn adjust_heap(
        a: &mut [usize],
        mut hole: usize,
        len: usize,
        value: usize,
        comp: &dyn Fn(usize, usize) -> bool,
    ) {
        let top = hole;
        let mut second = hole;
        while len >= 2 && second < (len - 1) / 2 {
            second = 2 * (second + 1);
            if comp(a[second], a[second - 1]) {
                second -= 1;
            }
            a[hole] = a[second];
            hole = second;
        }
        if len.is_multiple_of(2) && len >= 2 && second == (len - 2) / 2 {
            second = 2 * (second + 1);
            a[hole] = a[second - 1];
            hole = second - 1;
        }
        push_heap(a, hole, top, value, comp);
    }
    if k >= 2 {
        for parent in (0..=(k - 2) / 2).rev() {
            let value = a[parent];
            adjust_heap(&mut a, parent, k, value, &comp);
        }
    }
    for i in k..values.len() {
        if k > 0 && comp(a[i], a[0]) {
            let value = a[i];
            a[i] = a[0];
            adjust_heap(&mut a, 0, k, value, &comp);
        }
    }
    a.truncate(k);
    a
}

impl Attention {
    /// `x [batch, tokens, hidden]` of block `layer`. In a cached pass each row continues its
    /// own sequence (projections run batched; rotation, the cache and attention per row).
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        let (q, k, v) = self.qkv.forward(x)?;
        let out = self.attend(x, q, k, v, false, layer, ctx)?;
        self.attn_output.forward(&out)
    }

    /// `x + self.forward(norm(x))` (a block's attention half): where gmlx's CUDA kernels take
    /// them, the norm and the three projections in one launch, the output projection and the
    /// add in another.
    pub fn forward_residual(
        &self,
        x: &Array,
        norm: &RmsNorm,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Array> {
        if self.qsa.is_some() {
            // the indexer reads the normed rows too
            return Ok(x.add(&self.forward(&norm.forward(x)?, layer, ctx)?)?);
        }
        // one token of one sequence: the rotation can go into the projections' launch
        let one_token = x.shape()[..2] == [1, 1] && ctx.is_cached() && self.rotates_plainly();
        let position = one_token.then(|| ctx.first_position()).flatten();
        let rotated = match position
            .as_ref()
            .and_then(|p| self.rope.fused(p, self.head_dim))
        {
            Some(rope) => self.qkv.forward_normed_rotated(x, norm, rope)?,
            None => None,
        };
        let Some((q, k, v)) = rotated else {
            return self.forward_residual_unrotated(x, norm, layer, ctx);
        };
        let out = self.attend(x, q, k, v, true, layer, ctx)?;
        self.attn_output.forward_residual(&out, x, None)
    }

    /// The whole block of one token of one sequence in gmlx's decode-layer CUDA kernel
    /// ([`gmlx_mlx::cuda_layer`]): `h = x + attention(norm(x))`, then `h + mlp(ffn_norm(h))`
    /// for the feed-forward's plain SwiGLU layers `mlp` (gate, up, down); `None` (nothing done)
    /// where the kernel does not take the block: plain grouped-query attention of three plain
    /// projections, rotated as the fused kernels rotate, over a full cache on the GPU.
    pub fn decode_block(
        &self,
        x: &Array,
        norm: &RmsNorm,
        mlp: [&Linear; 3],
        ffn_norm: &RmsNorm,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Option<Array>> {
        let one_token = x.ndim() == 3 && x.shape()[..2] == [1, 1] && ctx.positions.len() == 1;
        if !gmlx_mlx::cuda_layer::enabled()
            || !one_token
            || !ctx.is_cached()
            || !self.rotates_plainly()
            || self.sinks.is_some()
            || self.window.is_some()
            || x.shape()[2] > gmlx_mlx::cuda_layer::MAX_HIDDEN
        {
            return Ok(None);
        }
        let Some([q, k, v]) = self.qkv.separate() else {
            return Ok(None);
        };
        if ![q, k, v, &self.attn_output].iter().all(|l| l.is_plain()) {
            return Ok(None);
        }
        let Some(position) = ctx.first_position() else {
            return Ok(None);
        };
        let Some(rope) = self.rope.fused(&position, self.head_dim) else {
            return Ok(None);
        };
        let at = ctx.positions[0];
        let Some(LayerCache::FullKv(cache)) = ctx.layer_cache(0, layer) else {
            return Ok(None);
        };
        let Some(room) = cache.room_for_one(at, self.n_kv_heads, self.head_dim, x.dtype()) else {
            return Ok(None);
        };
        let (keys, values) = room?;
        let [gate, up, down] = mlp;
        let block = gmlx_mlx::cuda_layer::Block {
            x,
            attn_norm: norm.fused(),
            q: &q.weight,
            k: &k.weight,
            v: &v.weight,
            rope,
            keys: &keys,
            values: &values,
            len: at,
            scale: self.scale(),
            output: &self.attn_output.weight,
            ffn_norm: ffn_norm.fused(),
            gate: &gate.weight,
            up: &up.weight,
            down: &down.weight,
        };
        let out = gmlx_mlx::cuda_layer::decode(block)?;
        if out.is_some() {
            cache.wrote_one();
        }
        Ok(out)
    }

    /// [`Attention::forward_residual`] with the rotation on its own.
    fn forward_residual_unrotated(
        &self,
        x: &Array,
        norm: &RmsNorm,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Array> {
        let (q, k, v) = self.qkv.forward_normed(x, norm)?;
        let out = self.attend(x, q, k, v, false, layer, ctx)?;
        self.attn_output.forward_residual(&out, x, None)
    }

    /// Whether queries and keys go from their projections straight to the rotation (no
    /// per-head norms, output gate or QSA indexer between).
    fn rotates_plainly(&self) -> bool {
        self.attn_q_norm.is_none()
            && self.attn_k_norm.is_none()
            && !self.output_gate
            && self.qsa.is_none()
    }

    /// Attention of the projected rows `q_rows`, `k_rows`, `v_rows` of `x`: `[batch, tokens,
    /// heads * head_dim]`, before the output projection. `x` is the block's normed input where
    /// a QSA indexer reads it; otherwise only its shape is read. `rotated`: the queries and
    /// keys come rotated at their positions (a cached pass only).
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        x: &Array,
        q_rows: Array,
        k_rows: Array,
        v_rows: Array,
        rotated: bool,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Array> {
        let shape = x.shape();
        let (batch, tokens) = (shape[0], shape[1]);
        let d = self.head_dim;
        // One token per row (decoding): `[batch, 1, n * width]` already holds `[batch, n, 1,
        // width]` in order, so one reshape gives the heads' layout where a reshape and a
        // transposition would (on a GPU a decode step is bound by its operations' count).
        let one_token = tokens == 1 && !self.output_gate;
        let heads = |h: Array, norm: Option<&RmsNorm>| -> Result<Array> {
            let h = match norm {
                Some(norm) => norm.forward(&h)?,
                None => h,
            };
            if one_token {
                return Ok(h);
            }
            Ok(h.transpose_axes(&[0, 2, 1, 3])?)
        };
        let split = |h: Array, n: i32, width: i32| -> Result<Array> {
            if one_token {
                // rotated in the projections' launch, the rows come in heads already
                if h.shape() == [batch, n, 1, width] {
                    return Ok(h);
                }
                return Ok(h.reshape(&[batch, n, 1, width])?);
            }
            Ok(h.reshape(&[batch, tokens, n, width])?)
        };
        let (q, gate) = if self.output_gate {
            let both = split(q_rows, self.n_heads, 2 * d)?;
            let part = |from: i32| {
                gmlx_mlx::slicing::slice(
                    &both,
                    &[0, 0, 0, from],
                    &[batch, tokens, self.n_heads, from + d],
                )
            };
            (
                part(0)?,
                Some(part(d)?.reshape(&[batch, tokens, self.n_heads * d])?),
            )
        } else {
            (split(q_rows, self.n_heads, d)?, None)
        };
        let q = heads(q, self.attn_q_norm.as_ref())?;
        let k = heads(
            split(k_rows, self.n_kv_heads, d)?,
            self.attn_k_norm.as_ref(),
        )?;
        let v = heads(split(v_rows, self.n_kv_heads, d)?, None)?;
        let out = if ctx.is_cached() {
            // one rotated token of one sequence: gmlx's CUDA attention may take it
            let decoded = (rotated && batch == 1 && self.qsa.is_none() && self.sinks.is_none())
                .then(|| ctx.first_position())
                .flatten();
            let mut outs = Vec::with_capacity(batch as usize);
            for b in 0..batch {
                let of_row = |a: &Array| row(a, b, batch);
                let position = ctx.positions[b as usize];
                let cache = ctx
                    .layer_cache(b as usize, layer)
                    .ok_or(Error::CacheMismatch { layer })?;
                let visible = match &self.qsa {
                    Some(qsa) => {
                        // the queries rotate at this row's position
                        let (iq, ik) = qsa.project(&row3(x, b, batch)?, position)?;
                        let LayerCache::FullKv(full) = &mut *cache else {
                            return Err(Error::CacheMismatch { layer });
                        };
                        let keys = full
                            .append_indexer_keys(&ik)
                            .ok_or(Error::CacheMismatch { layer })??;
                        Some(qsa.select(&iq, &keys, position)?)
                    }
                    None => None,
                };
                if let Some(p) = &decoded {
                    let at = (position, p);
                    let next = self.output_warm_set();
                    let next = next.as_ref();
                    if let Some(out) = cache.attend_decode(&q, &k, &v, at, self.scale(), next) {
                        outs.push(out?);
                        continue;
                    }
                }
                outs.push(self.attend_cached(
                    &of_row(&q)?,
                    &of_row(&k)?,
                    &of_row(&v)?,
                    rotated,
                    position,
                    layer,
                    cache,
                    visible,
                )?);
            }
            if outs.len() == 1 {
                outs.remove(0)
            } else {
                gmlx_mlx::ops::concatenate(&outs, 0)?
            }
        } else {
            let (q, k) = match rotated {
                true => (q, k),
                false => (self.rope.forward(&q, 0)?, self.rope.forward(&k, 0)?),
            };
            let mask = match &self.qsa {
                Some(qsa) => {
                    let (iq, ik) = qsa.project(x, 0)?;
                    KeyMask::Array(qsa.select(&iq, &ik, 0)?)
                }
                None => match self.window.filter(|&w| tokens > w) {
                    Some(w) => KeyMask::Array(mask::causal(0, tokens, 0, tokens, Some(w))?),
                    None if tokens > 1 => KeyMask::Causal,
                    None => KeyMask::All,
                },
            };
            self.sdpa(&q, &k, &v, &mask)?
        };
        let width = self.n_heads * self.head_dim;
        let mut out = if tokens == 1 {
            match out.shape() == [batch, 1, width] {
                true => out,
                false => out.reshape(&[batch, 1, width])?,
            }
        } else {
            out.transpose_axes(&[0, 2, 1, 3])?
                .reshape(&[batch, tokens, width])?
        };
        if let Some(gate) = gate {
            out = out.multiply(gmlx_mlx::ops::sigmoid(&gate)?)?;
        }
        Ok(out)
    }

    /// [`Attention::forward`] on the host for a cached pass of one token per row: `x` holds
    /// the `rows` normed hidden vectors, row-major; the result, `rows` output vectors. `None`,
    /// before any work, unless every part runs there: float32 host products without adapters
    /// ([`Linear::on_host`]), plain grouped-query attention (no QSA, sinks, window or output
    /// gate) and full caches that move to the host ([`crate::cache::FullKv::move_to_host`]:
    /// every row's, before any row appends). One token per row is what decoding feeds a CPU
    /// model, and this way a block needs no MLX evaluation at all.
    pub fn forward_host(
        &self,
        x: &[f32],
        rows: usize,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Option<Vec<f32>>> {
        let (heads, kv_heads, d) = (
            self.n_heads as usize,
            self.n_kv_heads as usize,
            self.head_dim as usize,
        );
        let (Some(q_norm), Some(k_norm)) = (
            host_norm(self.attn_q_norm.as_ref(), d),
            host_norm(self.attn_k_norm.as_ref(), d),
        ) else {
            return Ok(None);
        };
        let plain = super::cpu_attention::enabled()
            && self.qsa.is_none()
            && self.sinks.is_none()
            && self.window.is_none()
            && !self.output_gate
            && ctx.is_cached()
            && ctx.positions.len() == rows
            && self.attn_output.on_host(rows)
            && self.qkv.on_host(rows);
        if !plain {
            return Ok(None);
        }
        // moving a cache to the host can fail or decline; appending to one there cannot
        for b in 0..rows {
            let moved = match ctx.layer_cache(b, layer) {
                Some(LayerCache::FullKv(full)) => {
                    full.move_to_host(kv_heads * d, self.n_kv_heads)?
                }
                _ => false,
            };
            if !moved {
                return Ok(None);
            }
        }
        let Some((mut q, mut k, v)) = self.qkv.forward_host(x, rows)? else {
            return Ok(None);
        };
        let scale = 1.0 / (d as f32).sqrt();
        let mut out = Vec::with_capacity(rows * heads * d);
        for b in 0..rows {
            let position = ctx.positions[b];
            let qb = &mut q[b * heads * d..(b + 1) * heads * d];
            let kb = &mut k[b * kv_heads * d..(b + 1) * kv_heads * d];
            let vb = &v[b * kv_heads * d..(b + 1) * kv_heads * d];
            if let Some((w, eps)) = q_norm {
                qb.copy_from_slice(&host::rms_norm(qb, w, eps));
            }
            if let Some((w, eps)) = k_norm {
                kb.copy_from_slice(&host::rms_norm(kb, w, eps));
            }
            let angles = self.rope.angles(position);
            self.rope.rotate_host(qb, d, &angles);
            self.rope.rotate_host(kb, d, &angles);
            let Some(LayerCache::FullKv(full)) = ctx.layer_cache(b, layer) else {
                return Err(Error::CacheMismatch { layer });
            };
            let held = full
                .append_host(kb, vb, position)
                .ok_or(Error::CacheMismatch { layer })?;
            out.extend(host::attend_one(
                qb,
                &held.keys,
                &held.values,
                kv_heads,
                d,
                scale,
            ));
        }
        // the caches have moved on: from here the output is always produced
        if let Some(y) = self.attn_output.forward_host(&out, rows)? {
            return Ok(Some(y));
        }
        let out = Array::from_slice(&out, &[rows as i32, 1, (heads * d) as i32]);
        let y = self.attn_output.forward(&out)?;
        Ok(Some(
            host::rows_of(&y.as_dtype(Dtype::Float32)?)?.unwrap_or_default(),
        ))
    }

    /// One row: rotate at the row's position, append to its cache, attend (to the keys
    /// `visible [1, 1, tokens, keys]` says, when a QSA indexer chose them).
    #[allow(clippy::too_many_arguments)]
    fn attend_cached(
        &self,
        q: &Array,
        k: &Array,
        v: &Array,
        rotated: bool,
        position: i32,
        layer: usize,
        cache: &mut LayerCache,
        visible: Option<Array>,
    ) -> Result<Array> {
        let (q, k) = match rotated {
            true => (q.clone(), k.clone()),
            false => (
                self.rope.forward(q, position)?,
                self.rope.forward(k, position)?,
            ),
        };
        let Attended { keys, values, mask } = cache
            .attend(&k, v, position)
            .ok_or(Error::CacheMismatch { layer })??;
        let mask = visible.map_or(mask, KeyMask::Array);
        self.sdpa(&q, &keys, &values, &mask)
    }

    fn sdpa(&self, q: &Array, k: &Array, v: &Array, mask: &KeyMask) -> Result<Array> {
        blocked_attention::attention(q, k, v, self.scale(), mask, self.sinks.as_ref())
    }

    /// The output projection's arrays for the attention launch to pull into L2 before its
    /// product, where that launch does ([`gmlx_mlx::cuda_attention::warming`]).
    fn output_warm_set(&self) -> Option<WarmSet> {
        if !gmlx_mlx::cuda_attention::warming() {
            return None;
        }
        WarmSet::of(&[self.attn_output.weight.decode_view()?])
    }

    fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// Its weights: the projections (adaptable), then the norms and sinks.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        for l in self.qkv.linears() {
            v.linear(l);
        }
        v.linear(&self.attn_output);
        for norm in [&self.attn_q_norm, &self.attn_k_norm].into_iter().flatten() {
            v.array(&norm.weight);
        }
        if let Some(sinks) = &self.sinks {
            v.array(sinks);
        }
        if let Some(qsa) = &self.qsa {
            v.linear(&qsa.q_proj);
            v.linear(&qsa.k_proj);
            v.array(&qsa.q_norm.weight);
            v.array(&qsa.k_norm.weight);
        }
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        for l in self.qkv.linears_mut() {
            v.linear(l);
        }
        v.linear(&mut self.attn_output);
        if let Some(qsa) = &mut self.qsa {
            v.linear(&mut qsa.q_proj);
            v.linear(&mut qsa.k_proj);
        }
    }
}

/// A per-head norm's float32 weight of `d` values and its epsilon, read in place: `Some(None)`
/// without a norm, `None` when its weight is not such a slice.
fn host_norm(norm: Option<&RmsNorm>, d: usize) -> Option<Option<(&[f32], f32)>> {
    match norm {
        None => Some(None),
        Some(n) => n
            .weight
            .try_as_slice::<f32>()
            .ok()
            .filter(|w| w.len() == d)
            .map(|w| Some((w, n.eps))),
    }
}

/// Row `b` of a `[batch, tokens, width]` array.
fn row3(a: &Array, b: i32, batch: i32) -> Result<Array> {
    if batch == 1 {
        return Ok(a.clone());
    }
    let s = a.shape();
    Ok(gmlx_mlx::slicing::slice(
        a,
        &[b, 0, 0],
        &[b + 1, s[1], s[2]],
    )?)
}

/// Row `b` of a `[batch, ...]` array (the array itself when there is one row).
fn row(a: &Array, b: i32, batch: i32) -> Result<Array> {
    if batch == 1 {
        return Ok(a.clone());
    }
    let s = a.shape();
    Ok(gmlx_mlx::slicing::slice(
        a,
        &[b, 0, 0, 0],
        &[b + 1, s[1], s[2], s[3]],
    )?)
}

#[cfg(test)]
mod tests {
    use super::heap_select;

    #[test]
    fn heap_select_keeps_the_k_largest() {
        let values = [0.5f32, 3.0, -1.0, 2.0, 7.0, 1.0];
        let mut got = heap_select(&values, 3);
        got.sort_unstable();
        assert_eq!(got, [1, 3, 4]);
        assert_eq!(heap_select(&values, 6).len(), 6);
    }

    /// Ties resolved as libstdc++'s `std::partial_sort` resolves them: the expected sets are
    /// what g++ 12's `std::partial_sort` kept on these rows (a QSA-like row: six blocks of
    /// four tied positions and an incomplete block).
    #[test]
    fn heap_select_breaks_ties_like_libstdcpp() {
        let values = [
            1.0f32,
            1.0,
            1.0,
            1.0,
            5.0,
            5.0,
            5.0,
            5.0,
            f32::INFINITY,
            f32::INFINITY,
        ];
        let mut got = heap_select(&values, 7);
        got.sort_unstable();
        assert_eq!(got, [1, 4, 5, 6, 7, 8, 9]);
        let blocks = [0.3f32, 0.9, 0.1, 0.9, 0.5, 0.2];
        let mut row: Vec<f32> = blocks.iter().flat_map(|&s| [s; 4]).collect();
        row.push(f32::INFINITY);
        let mut got = heap_select(&row, 11);
        got.sort_unstable();
        assert_eq!(got, [4, 5, 6, 7, 12, 13, 14, 15, 17, 18, 24]);
    }
}
