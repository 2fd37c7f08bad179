use gmlx_mlx::Array;

use crate::blocks::context::ForwardCtx;
use crate::blocks::decoder::{BlockRunner, Decoder, DecoderLayer, Direct, Logits, Pass};
use crate::cache::SequenceCache;
use crate::config::ModelConfig;
use crate::error::Result;

/// A loaded model: its config and its weights, resident on the device.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    decoder: Decoder,
}

impl Model {
    pub(crate) fn new(config: ModelConfig, decoder: Decoder) -> Model {
        Model { config, decoder }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The decoder blocks (their linear layers carry the adapters).
    pub fn layers(&self) -> &[DecoderLayer] {
        &self.decoder.layers
    }

    /// Adds `hook` to every MoE layer's routing (after those already added); the number of
    /// MoE layers it reached (0: the model has none).
    pub fn add_route_hook(
        &mut self,
        hook: std::rc::Rc<dyn crate::blocks::moe::RouteHook>,
    ) -> usize {
        let mut reached = 0;
        for layer in &mut self.decoder.layers {
            if let crate::blocks::decoder::Ffn::Moe(moe) = &mut layer.ffn {
                moe.hooks.push(hook.clone());
                reached += 1;
            }
        }
        reached
    }

    pub fn layers_mut(&mut self) -> &mut [DecoderLayer] {
        &mut self.decoder.layers
    }

    /// The decoder (embedding, blocks, final norm, head).
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// Empty caches for one sequence: a cache per layer, of the kind the layer's plan asks
    /// for (full or rotating KV).
    pub fn new_cache(&self) -> SequenceCache {
        SequenceCache::new(self.config.layers.iter().map(|l| l.cache_kind()))
    }

    /// The forward pass (see [`Decoder::run`]), for callers that pick the blocks' runner
    /// (training). Products run as MLX's differentiable ops.
    pub fn run(
        &self,
        ctx: &mut ForwardCtx<'_, '_>,
        pass: Pass,
        runner: &mut dyn BlockRunner,
    ) -> Result<Array> {
        self.decoder.run(ctx, pass, runner)
    }

    /// Inference: runs `tokens` (`[1, n]`, u32) after what `cache` holds; float32 logits
    /// `[1, n, vocab]` for [`Logits::All`], `[1, 1, vocab]` for [`Logits::Last`]. On the CPU its
    /// few-row products may run on the host kernel, so do not differentiate through it.
    pub fn forward(
        &self,
        tokens: &Array,
        cache: &mut SequenceCache,
        logits: Logits,
    ) -> Result<Array> {
        let _host = gmlx_mlx::quant::host_products();
        let mut rows = [cache];
        let mut ctx = ForwardCtx::cached(tokens, &mut rows);
        self.decoder
            .run(&mut ctx, Pass::logits(logits), &mut Direct)
    }

    /// One decode step for `B` independent sequences: `tokens[b]` continues the sequence whose
    /// caches are `caches[b]`; float32 logits `[B, vocab]` (continuous batching). Every matmul
    /// runs once over the rows; rotation, caches and attention run per row.
    pub fn forward_rows(&self, tokens: &[u32], caches: &mut [&mut SequenceCache]) -> Result<Array> {
        let ids = Array::from_slice(tokens, &[tokens.len() as i32, 1]);
        self.forward_row_ids(&ids, caches)
    }

    /// [`Model::forward_rows`] of token ids `[B, 1]` (uint32) that may still be on the device,
    /// not yet computed (drawn there by the step before, which is then read back after this
    /// one is submitted).
    pub fn forward_row_ids(&self, ids: &Array, caches: &mut [&mut SequenceCache]) -> Result<Array> {
        let _host = gmlx_mlx::quant::host_products();
        let batch = ids.shape()[0];
        let mut ctx = ForwardCtx::cached(ids, caches);
        let logits = self
            .decoder
            .run(&mut ctx, Pass::logits(Logits::Last), &mut Direct)?;
        let vocab = logits.shape()[2];
        Ok(logits.reshape(&[batch, vocab])?)
    }

    /// Evaluates every weight so the model is resident; returns the bytes the weights hold.
    pub fn materialize(&self) -> Result<usize> {
        let arrays = self.decoder.arrays();
        gmlx_mlx::mlx_rs::transforms::eval(arrays.iter().copied())?;
        Ok(arrays.iter().map(|a| a.nbytes()).sum())
    }
}
