//! The pre-norm decoder stack every architecture here shares: embedding, blocks of a mixer
//! and a feed-forward with residuals, final norm, output head; and the one forward pass that
//! runs it, for generation, batched serving, training and benchmarks alike.
use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::{Array, Dtype, QuantWeight};

use crate::blocks::attn_res::{self, BlockResidual, ResidualMix};
use crate::blocks::context::ForwardCtx;
use crate::blocks::hyper::{HyperConnection, StreamsHead};
use crate::blocks::linear::Linear;
use crate::blocks::low_rank_hyper::LowRankMix;
use crate::blocks::mixer::Mixer;
use crate::blocks::mlp::SwiGlu;
use crate::blocks::moe::MoeFfn;
use crate::blocks::norm::RmsNorm;
use crate::blocks::ple::Ple;
use crate::blocks::visit::{Arrays, LinearVisitorMut, Linears, LinearsMut, WeightVisitor};
use crate::cache::LayerCache;
use crate::error::Result;

/// The feed-forward half of a block.
// One value per layer, built once at load: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Ffn {
    Dense(SwiGlu),
    Moe(Box<MoeFfn>),
}

impl Ffn {
    /// `x [batch, tokens, hidden]` of layer `layer`, rows starting at `positions`, their token
    /// ids `tokens [batch, tokens]` (hash-routed experts read them).
    pub fn forward(
        &self,
        x: &Array,
        layer: usize,
        positions: &[i32],
        tokens: &Array,
    ) -> Result<Array> {
        match self {
            Ffn::Dense(mlp) => mlp.forward(x),
            Ffn::Moe(moe) => moe.forward(x, layer, positions, tokens),
        }
    }

    /// Its weights: a dense MLP's projections are adapter targets, an MoE's shared expert's
    /// too, its routed experts and router not.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        match self {
            Ffn::Dense(m) => m.visit(v),
            Ffn::Moe(moe) => moe.visit(v),
        }
    }

    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        match self {
            Ffn::Dense(m) => m.visit_mut(v),
            Ffn::Moe(moe) => {
                if let Some(l) = &mut moe.latent {
                    v.linear(&mut l.ffn_routed_down);
                    v.linear(&mut l.ffn_routed_up);
                }
                if let Some(shared) = &mut moe.shared {
                    shared.visit_mut(v);
                }
            }
        }
    }
}

/// One block: `h = x + mixer(norm(x)); out = h + ffn(norm(h))`; with hyper-connections the
/// residual is several streams, reduced before each sublayer and written back after it.
#[derive(Debug, Clone)]
pub struct DecoderLayer {
    /// `None` on blocks whose residual streams norm their own inputs (low-rank
    /// hyper-connections).
    pub attn_norm: Option<RmsNorm>,
    pub mixer: Mixer,
    pub ffn_norm: Option<RmsNorm>,
    pub ffn: Ffn,
    pub hyper: Option<BlockHyper>,
    /// Attention residuals across blocks (Kimi-K3).
    pub attn_res: Option<BlockResidual>,
    /// Low-rank hyper-connections, and the block's PLE module (Qwen4 experimental).
    pub low_rank: Option<LowRankBlock>,
}

/// A block's low-rank hyper-connections around the mixer and the feed-forward, and the PLE
/// module that runs on the streams first on the block that has one.
#[derive(Debug, Clone)]
pub struct LowRankBlock {
    pub attn: LowRankMix,
    pub ffn: LowRankMix,
    pub ple: Option<Ple>,
}

/// `norm(x)`, or `x` on a block without that norm.
fn normed(norm: &Option<RmsNorm>, x: &Array) -> Result<Array> {
    match norm {
        Some(n) => n.forward(x),
        None => Ok(x.clone()),
    }
}

/// A block's hyper-connections: around the mixer, and around the feed-forward.
#[derive(Debug, Clone)]
pub struct BlockHyper {
    pub attn: HyperConnection,
    pub ffn: HyperConnection,
}

impl DecoderLayer {
    /// Its weights, in GGUF tensor order: the norms, the mixer, the feed-forward.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        if let Some(n) = &self.attn_norm {
            v.array(&n.weight);
        }
        if let Some(lr) = &self.low_rank {
            if let Some(ple) = &lr.ple {
                v.linear(&ple.ple_key);
                v.linear(&ple.ple_value);
                for a in [&ple.norm_key, &ple.norm_query, &ple.norm_conv, &ple.conv] {
                    v.array(a);
                }
            }
            for mix in [&lr.attn, &lr.ffn] {
                v.array(&mix.norm);
                v.linear(&mix.down);
                v.linear(&mix.up);
                if let Some(inject) = &mix.inject {
                    v.linear(inject);
                }
            }
        }
        self.mixer.visit(v);
        if let Some(r) = &self.attn_res {
            v.array(&r.attn.score);
            v.array(&r.ffn.score);
        }
        if let Some(h) = &self.hyper {
            for c in [&h.attn, &h.ffn] {
                v.array(&c.mix);
                v.array(&c.base);
                v.array(&c.scale);
            }
        }
        if let Some(n) = &self.ffn_norm {
            v.array(&n.weight);
        }
        self.ffn.visit(v);
    }

    /// The linear layers adapters can target, mutably (installing adapters).
    pub fn visit_mut<'m>(&'m mut self, v: &mut dyn LinearVisitorMut<'m>) {
        if let Some(lr) = &mut self.low_rank {
            if let Some(ple) = &mut lr.ple {
                v.linear(&mut ple.ple_key);
                v.linear(&mut ple.ple_value);
            }
            for mix in [&mut lr.attn, &mut lr.ffn] {
                v.linear(&mut mix.down);
                v.linear(&mut mix.up);
                if let Some(inject) = &mut mix.inject {
                    v.linear(inject);
                }
            }
        }
        self.mixer.visit_mut(v);
        self.ffn.visit_mut(v);
    }

    /// The linear layers adapters can target, in GGUF tensor order.
    pub fn linears(&self) -> Vec<&Linear> {
        let mut out = Linears::default();
        self.visit(&mut out);
        out.0
    }

    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut out = LinearsMut::default();
        self.visit_mut(&mut out);
        out.0
    }

    /// The linear layer whose base weight is the GGUF tensor `name`.
    pub fn linear_mut(&mut self, name: &str) -> Option<&mut Linear> {
        self.linears_mut().into_iter().find(|l| l.name() == name)
    }

    /// The first matrices this block multiplies (a plain attention's q k v), for the block
    /// before it to pull into L2 ([`ForwardCtx::next_block`]).
    fn warm_set(&self) -> Option<WarmSet> {
        match &self.mixer {
            Mixer::Attention(attention) => attention.qkv.warm_set(),
            _ => None,
        }
    }

    /// Block `layer` on `x [batch, tokens, hidden]`.
    pub fn forward(&self, x: &Array, layer: usize, ctx: &mut ForwardCtx<'_, '_>) -> Result<Array> {
        if let Some(hyper) = &self.hyper {
            return self.forward_streams(x, layer, ctx, hyper);
        }
        if let Some(residual) = &self.attn_res {
            return self.forward_attn_res(x, layer, ctx, residual);
        }
        if let Some(low_rank) = &self.low_rank {
            return self.forward_low_rank(x, layer, ctx, low_rank);
        }
        if let Some(out) = self.forward_host(x, layer, ctx)? {
            return Ok(out);
        }
        if let (Mixer::Attention(attention), Some(norm), Ffn::Dense(mlp), Some(ffn_norm)) =
            (&self.mixer, &self.attn_norm, &self.ffn, &self.ffn_norm)
        {
            if let Some(layers) = mlp.plain_layers() {
                if let Some(out) = attention.decode_block(x, norm, layers, ffn_norm, layer, ctx)? {
                    return Ok(out);
                }
            }
        }
        // each half's norm and residual add go with its attention or dense MLP, which can take
        // them into their CUDA launches
        let h = match (&self.mixer, &self.attn_norm) {
            (Mixer::Attention(attention), Some(norm)) => {
                attention.forward_residual(x, norm, layer, ctx)?
            }
            _ => {
                let mixed = self
                    .mixer
                    .forward(&normed(&self.attn_norm, x)?, layer, ctx)?;
                x.add(&mixed)?
            }
        };
        match (&self.ffn, &self.ffn_norm) {
            (Ffn::Dense(mlp), Some(norm)) => {
                mlp.forward_residual(&h, norm, ctx.next_block.as_ref())
            }
            _ => self.feed_forward(&h, layer, ctx),
        }
    }

    /// The block with its norms, residual adds and dense feed-forward on the host
    /// ([`crate::blocks::host`]), where every product of the feed-forward runs there now (a
    /// few float32 rows on the CPU, no adapter); `None` otherwise, before any work.
    fn forward_host(
        &self,
        x: &Array,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Option<Array>> {
        use crate::blocks::host;
        let (Ffn::Dense(mlp), Some(attn_norm), Some(ffn_norm)) =
            (&self.ffn, &self.attn_norm, &self.ffn_norm)
        else {
            return Ok(None);
        };
        let shape = x.shape().to_vec();
        let hidden = shape.last().copied().unwrap_or(0) as usize;
        let rows = shape[..shape.len().saturating_sub(1)]
            .iter()
            .map(|&d| d.max(0) as usize)
            .product::<usize>();
        if x.dtype() != Dtype::Float32 || !mlp.on_host(rows) {
            return Ok(None);
        }
        // the norm weights are resident: read in place
        let (Ok(attn_w), Ok(ffn_w)) = (
            attn_norm.weight.try_as_slice::<f32>(),
            ffn_norm.weight.try_as_slice::<f32>(),
        ) else {
            return Ok(None);
        };
        if attn_w.len() != hidden || ffn_w.len() != hidden {
            return Ok(None);
        }
        let Some(mut h) = host::rows_of(x)? else {
            return Ok(None);
        };
        let normed = host::rms_norm(&h, attn_w, attn_norm.eps);
        let one_token_per_row = shape.len() == 3 && shape[1] == 1;
        let on_host = match one_token_per_row {
            true => self.mixer.forward_host(&normed, rows, layer, ctx)?,
            false => None,
        };
        // once the mixer has run (its cache holds these rows), the block always finishes
        let mixed_rows = match on_host {
            Some(m) => m,
            None => {
                let mixed = self
                    .mixer
                    .forward(&Array::from_slice(&normed, &shape), layer, ctx)?;
                match host::rows_of(&mixed)? {
                    Some(m) => m,
                    None => return Ok(Some(self.feed_forward(&x.add(&mixed)?, layer, ctx)?)),
                }
            }
        };
        host::add_into(&mut h, &mixed_rows);
        let normed = host::rms_norm(&h, ffn_w, ffn_norm.eps);
        match mlp.forward_host(&normed, rows)? {
            Some(ffn) => {
                host::add_into(&mut h, &ffn);
                Ok(Some(Array::from_slice(&h, &shape)))
            }
            None => Ok(Some(self.feed_forward(
                &Array::from_slice(&h, &shape),
                layer,
                ctx,
            )?)),
        }
    }

    /// `h + ffn(ffn_norm(h))` with MLX.
    fn feed_forward(&self, h: &Array, layer: usize, ctx: &ForwardCtx<'_, '_>) -> Result<Array> {
        let ffn = self.ffn.forward(
            &normed(&self.ffn_norm, h)?,
            layer,
            &ctx.positions,
            ctx.tokens,
        )?;
        Ok(h.add(&ffn)?)
    }

    /// The block with attention residuals: `x [batch, tokens, streams, hidden]` holds the
    /// banked checkpoints, then the running residual ([`crate::blocks::attn_res`]).
    fn forward_attn_res(
        &self,
        x: &Array,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
        residual: &BlockResidual,
    ) -> Result<Array> {
        let input = residual.attn.mix(x)?;
        let mixed = self
            .mixer
            .forward(&normed(&self.attn_norm, &input)?, layer, ctx)?;
        // a checkpoint banks the raw running residual and restarts it from the mixer's output
        let (banked, running) = if residual.banks {
            (Some(x.clone()), mixed)
        } else {
            (attn_res::banked(x)?, attn_res::running(x)?.add(&mixed)?)
        };
        let joined = attn_res::join(banked.as_ref(), &running)?;
        let ffn = self.ffn.forward(
            &normed(&self.ffn_norm, &residual.ffn.mix(&joined)?)?,
            layer,
            &ctx.positions,
            ctx.tokens,
        )?;
        attn_res::join(banked.as_ref(), &running.add(&ffn)?)
    }

    /// The block on low-rank hyper-connected streams `x [batch, tokens, streams, hidden]`.
    fn forward_low_rank(
        &self,
        x: &Array,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
        low_rank: &LowRankBlock,
    ) -> Result<Array> {
        let x = match &low_rank.ple {
            Some(ple) => self.apply_ple(ple, x, layer, ctx)?,
            None => x.clone(),
        };
        let inject = |m: &crate::blocks::low_rank_hyper::Mixed| -> Result<Array> {
            m.inject
                .clone()
                .ok_or_else(|| crate::error::Error::BadConfig {
                    key: format!("blk.{layer}.hc_*_inject"),
                    reason: "a block's hyper-connection mix has no write-back".into(),
                })
        };
        let m = low_rank.attn.mix(&x)?;
        let mixed = self.mixer.forward(&m.input, layer, ctx)?;
        let x = low_rank.attn.combine(&x, &mixed, &inject(&m)?)?;
        let m = low_rank.ffn.mix(&x)?;
        let ffn = self
            .ffn
            .forward(&m.input, layer, &ctx.positions, ctx.tokens)?;
        low_rank.ffn.combine(&x, &ffn, &inject(&m)?)
    }

    /// The PLE module on the streams: each row's tokens hashed after the tokens its sequence
    /// saw before (kept in the block's recurrent cache, with the convolution's history).
    fn apply_ple(
        &self,
        ple: &Ple,
        x: &Array,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Array> {
        let s = x.shape().to_vec();
        let (batch, tokens) = (s[0] as usize, s[1] as usize);
        let ids = crate::blocks::moe::host_ids(ctx.tokens)?;
        let keep = ple.hash.ngram - 1;
        let channels = s[2] * s[3];
        let mut rows = Vec::with_capacity(batch * tokens * ple.hash.heads());
        let mut histories = Vec::with_capacity(batch);
        let mut kept = Vec::with_capacity(batch);
        for b in 0..batch {
            let own = &ids[b * tokens..(b + 1) * tokens];
            let (before, history) = match ctx.layer_cache(b, layer) {
                Some(LayerCache::Recurrent(r)) => (r.ple_tokens.clone(), r.ple_history.clone()),
                Some(_) => return Err(crate::error::Error::CacheMismatch { layer }),
                None => (Vec::new(), None),
            };
            let mut all = before.clone();
            all.extend_from_slice(own);
            rows.extend(ple.hash.rows(&all, before.len()));
            histories.push(match history {
                Some(h) => h,
                None => {
                    gmlx_mlx::ops::zeros_dtype(&[1, ple.history_len(), channels], Dtype::Float32)?
                }
            });
            kept.push(all[all.len().saturating_sub(keep)..].to_vec());
        }
        let e = ple.embed(&rows)?.reshape(&[s[0], s[1], s[3]])?;
        let history = if histories.len() == 1 {
            histories.remove(0)
        } else {
            gmlx_mlx::ops::concatenate(&histories, 0)?
        };
        let (out, history) = ple.forward(x, &e, &history)?;
        // the pass has run: each row's hash and convolution histories move on together
        for (b, tokens) in kept.into_iter().enumerate() {
            if let Some(LayerCache::Recurrent(r)) = ctx.layer_cache(b, layer) {
                r.ple_tokens = tokens;
                r.ple_history = Some(if batch == 1 {
                    history.clone()
                } else {
                    gmlx_mlx::slicing::slice(
                        &history,
                        &[b as i32, 0, 0],
                        &[b as i32 + 1, ple.history_len(), channels],
                    )?
                });
            }
        }
        Ok(out)
    }

    /// The block on residual streams `x [batch, tokens, streams, hidden]`.
    fn forward_streams(
        &self,
        x: &Array,
        layer: usize,
        ctx: &mut ForwardCtx<'_, '_>,
        hyper: &BlockHyper,
    ) -> Result<Array> {
        let r = hyper.attn.reduce(x)?;
        let mixed = self
            .mixer
            .forward(&normed(&self.attn_norm, &r.input)?, layer, ctx)?;
        let h = hyper.attn.write_back(&mixed, x, &r)?;
        let r = hyper.ffn.reduce(&h)?;
        let ffn = self.ffn.forward(
            &normed(&self.ffn_norm, &r.input)?,
            layer,
            &ctx.positions,
            ctx.tokens,
        )?;
        hyper.ffn.write_back(&ffn, &h, &r)
    }
}

/// Which positions' logits a forward pass computes.
#[derive(Debug, Clone)]
pub enum Logits {
    /// Every position (teacher forcing, parity checks): `[batch, n, vocab]`.
    All,
    /// The last position of each row (prefill and decoding): `[batch, 1, vocab]`.
    Last,
    /// These positions of the flattened `[batch × n]` grid (training's targets):
    /// `[positions, vocab]`.
    Positions(Array),
}

/// What one pass computes, beyond the context.
#[derive(Debug, Clone)]
pub struct Pass {
    /// Start from these hidden states entering block `.0` instead of the embedding.
    pub from: Option<(usize, Array)>,
    /// Stop before block `until` and return the hidden states entering it (no logits, and no
    /// cache moves on: only for passes without a cache).
    pub until: Option<usize>,
    pub logits: Logits,
}

impl Pass {
    /// Every block, then these logits.
    pub fn logits(logits: Logits) -> Pass {
        Pass {
            from: None,
            until: None,
            logits,
        }
    }
}

/// Runs one block of a pass. The default runs it directly; training runs adapted blocks with
/// their parameters passed in (and under checkpointing).
pub trait BlockRunner {
    fn run(
        &mut self,
        layer: usize,
        block: &DecoderLayer,
        x: Array,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Array>;
}

/// Runs every block as it is.
pub struct Direct;

impl BlockRunner for Direct {
    fn run(
        &mut self,
        layer: usize,
        block: &DecoderLayer,
        x: Array,
        ctx: &mut ForwardCtx<'_, '_>,
    ) -> Result<Array> {
        block.forward(&x, layer, ctx)
    }
}

/// The token embedding: resident when the output head is tied to it or the model runs on a
/// GPU, else rows read from the file's memory map as tokens ask for them (no copy of the table
/// in memory).
#[derive(Debug, Clone)]
pub enum Embedding {
    Resident(QuantWeight),
    Mapped(gmlx_gguf::MappedRows),
}

impl Embedding {
    /// Rows `ids [batch, n]`: `[batch, n, hidden]`, float32 or the table's dtype.
    fn rows(&self, ids: &Array) -> Result<Array> {
        match self {
            Embedding::Resident(w) => Ok(w.rows(ids)?),
            Embedding::Mapped(table) => {
                let values = table.dequantize_rows(&crate::blocks::moe::host_ids(ids)?)?;
                let mut shape = ids.shape().to_vec();
                shape.push(table.row_len() as i32);
                Ok(Array::from_slice(&values, &shape))
            }
        }
    }
}

/// Embedding, blocks, final norm and output head.
#[derive(Debug, Clone)]
pub struct Decoder {
    pub token_embd: Embedding,
    pub layers: Vec<DecoderLayer>,
    /// `None` where the streams' final mix norms (low-rank hyper-connections).
    pub output_norm: Option<RmsNorm>,
    /// `None` when the output head is tied to the token embedding (then resident).
    pub output: Option<QuantWeight>,
    /// With hyper-connections: the streams' count and their final reduction.
    pub hyper_head: Option<(i32, StreamsHead)>,
    /// With attention residuals: the final mix of the banked checkpoints and the residual.
    pub res_head: Option<ResidualMix>,
    pub dtype: Dtype,
}

impl Decoder {
    /// The forward pass: `ctx.tokens [batch, n]` through the blocks `pass` selects; float32
    /// logits (or hidden states, with `pass.until`). A cached pass moves every row's cache on
    /// by `n` positions.
    pub fn run(
        &self,
        ctx: &mut ForwardCtx<'_, '_>,
        pass: Pass,
        runner: &mut dyn BlockRunner,
    ) -> Result<Array> {
        let (start, mut x) = match pass.from {
            Some((start, hidden)) => (start, hidden),
            None => (0, self.embed(ctx.tokens)?),
        };
        let end = pass
            .until
            .unwrap_or(self.layers.len())
            .min(self.layers.len());
        let warming = gmlx_mlx::cuda_qmv::warming() && ctx.is_cached();
        for (layer, block) in self.layers.iter().enumerate().take(end).skip(start) {
            ctx.next_block = match self.layers.get(layer + 1) {
                Some(next) if warming && layer + 1 < end => next.warm_set(),
                _ => None,
            };
            x = runner.run(layer, block, x, ctx)?;
        }
        ctx.next_block = None;
        if pass.until.is_some() {
            return Ok(x);
        }
        ctx.advance(ctx.tokens.shape()[1]);
        self.head(x, &pass.logits)
    }

    /// Token ids `[batch, n]` to hidden states `[batch, n, hidden]` (with hyper-connections,
    /// that many copies: `[batch, n, streams, hidden]`).
    pub fn embed(&self, tokens: &Array) -> Result<Array> {
        let x = self.token_embd.rows(tokens)?.as_dtype(self.dtype)?;
        if self.res_head.is_some() {
            // the running residual alone: nothing banked yet
            return Ok(x.expand_dims(2)?);
        }
        match &self.hyper_head {
            None => Ok(x),
            Some((streams, _)) => {
                let s = x.shape().to_vec();
                Ok(gmlx_mlx::ops::broadcast_to(
                    x.expand_dims_axes(&[-2])?,
                    &[s[0], s[1], *streams, s[2]],
                )?)
            }
        }
    }

    /// Final norm and output head on the positions `logits` selects, in float32.
    fn head(&self, x: Array, logits: &Logits) -> Result<Array> {
        // the streams mix within each position: narrow to the last one first
        let x = match logits {
            Logits::Last => {
                let s = x.shape().to_vec();
                let mut start = vec![0; s.len()];
                start[1] = s[1] - 1;
                gmlx_mlx::slicing::slice(&x, &start, &s)?
            }
            Logits::All | Logits::Positions(_) => x,
        };
        let x = match (&self.hyper_head, &self.res_head) {
            (Some((_, head)), _) => head.reduce(&x)?,
            (None, Some(mix)) => mix.mix(&x)?,
            (None, None) => x,
        };
        let s = x.shape().to_vec();
        let x = match logits {
            Logits::All | Logits::Last => x,
            Logits::Positions(at) => x.reshape(&[-1, s[2]])?.take_axis(at, 0)?,
        };
        let x = normed(&self.output_norm, &x)?;
        let head = match (&self.output, &self.token_embd) {
            (Some(head), _) | (None, Embedding::Resident(head)) => head,
            (None, Embedding::Mapped(_)) => {
                unreachable!("a tied output head keeps the embedding resident")
            }
        };
        Ok(head.matmul(&x)?.as_dtype(Dtype::Float32)?)
    }

    /// Its weights: embedding, blocks, final norm, head.
    pub fn visit<'m>(&'m self, v: &mut dyn WeightVisitor<'m>) {
        if let Embedding::Resident(w) = &self.token_embd {
            v.quant(w);
        }
        for layer in &self.layers {
            layer.visit(v);
        }
        if let Some((_, StreamsHead::Weighted(head))) = &self.hyper_head {
            v.array(&head.mix);
            v.array(&head.base);
            v.array(&head.scale);
        }
        if let Some(mix) = &self.res_head {
            v.array(&mix.score);
        }
        if let Some((_, StreamsHead::LowRank(mix))) = &self.hyper_head {
            v.array(&mix.norm);
            crate::blocks::visit::Frozen(v).linear(&mix.down);
            crate::blocks::visit::Frozen(v).linear(&mix.up);
        }
        if let Some(n) = &self.output_norm {
            v.array(&n.weight);
        }
        if let Some(o) = &self.output {
            v.quant(o);
        }
    }

    /// Weights that must be evaluated to be resident.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut out = Arrays::default();
        self.visit(&mut out);
        out.0
    }
}
