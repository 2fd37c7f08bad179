use gmlx_mlx::Array;

use crate::blocks::decoder::{Decoder, DecoderLayer, Logits};
use crate::cache::KvCache;
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

    pub fn layers_mut(&mut self) -> &mut [DecoderLayer] {
        &mut self.decoder.layers
    }

    /// The decoder (embedding, blocks, final norm, head): training runs its own forward
    /// over these parts.
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// One empty KV cache per layer.
    pub fn new_caches(&self) -> Vec<KvCache> {
        (0..self.config.n_layers).map(|_| KvCache::new()).collect()
    }

    /// Runs `tokens` (`[batch, n]`, u32) after what `caches` hold; float32 logits
    /// `[batch, n, vocab]` for [`Logits::All`], `[batch, 1, vocab]` for [`Logits::Last`].
    pub fn forward(&self, tokens: &Array, caches: &mut [KvCache], logits: Logits) -> Result<Array> {
        self.decoder.forward(tokens, caches, logits)
    }

    /// One decode step for `B` independent sequences: `tokens[b]` continues the sequence whose
    /// per-layer caches are `caches[b]`; float32 logits `[B, vocab]` (continuous batching).
    pub fn forward_rows(&self, tokens: &[u32], caches: &mut [&mut [KvCache]]) -> Result<Array> {
        self.decoder.forward_rows(tokens, caches)
    }

    /// Evaluates every weight so the model is resident; returns the bytes the weights hold.
    pub fn materialize(&self) -> Result<usize> {
        let arrays = self.decoder.arrays();
        gmlx_mlx::mlx_rs::transforms::eval(arrays.iter().copied())?;
        Ok(arrays.iter().map(|a| a.nbytes()).sum())
    }
}
