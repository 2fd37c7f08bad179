//! What a forward pass tells every block: the token ids, where each row of the batch stands,
//! and (when the pass continues sequences) each row's caches.
use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::Array;

use crate::cache::{LayerCache, SequenceCache};

/// The context of one forward pass over `[batch, n]` tokens.
pub struct ForwardCtx<'a, 's> {
    /// `[batch, n]` u32 token ids (blocks that route by token read them).
    pub tokens: &'a Array,
    /// The position of each row's first token.
    pub positions: Vec<i32>,
    /// One sequence's caches per row, or `None` for a pass over whole sequences from
    /// position 0 that keeps nothing (training, teacher forcing without a cache).
    caches: Option<&'a mut [&'s mut SequenceCache]>,
    /// The keys each query may see as chosen by the last lightning indexer of this pass, per
    /// row of a cached pass (one entry for the whole batch otherwise): the layers that share
    /// that indexer read it here.
    pub selection: Vec<Option<Array>>,
    /// The first row's position as an int32 array, made once per pass when a block asks
    /// ([`ForwardCtx::first_position`]).
    first_position: Option<Array>,
    /// The next block's first matrices, which the running block's last launch pulls into the
    /// GPU's L2 cache (set by the decoder's loop where [`gmlx_mlx::cuda_qmv::warming`]).
    pub next_block: Option<WarmSet>,
}

impl<'a, 's> ForwardCtx<'a, 's> {
    /// A pass that continues the sequences in `caches`, one per row of `tokens`.
    pub fn cached(tokens: &'a Array, caches: &'a mut [&'s mut SequenceCache]) -> Self {
        let positions: Vec<i32> = caches.iter().map(|c| c.position()).collect();
        ForwardCtx {
            tokens,
            selection: vec![None; positions.len()],
            positions,
            caches: Some(caches),
            first_position: None,
            next_block: None,
        }
    }

    /// A pass over whole sequences from position 0, keeping nothing.
    pub fn uncached(tokens: &'a Array) -> Self {
        ForwardCtx {
            tokens,
            positions: vec![0; tokens.shape()[0] as usize],
            caches: None,
            selection: vec![None],
            first_position: None,
            next_block: None,
        }
    }

    /// The first row's position, int32, its first value (what a fused CUDA kernel reads it
    /// from: [`gmlx_mlx::cuda_attention::position_array`]; one array for every block of the
    /// pass); `None` without rows.
    pub fn first_position(&mut self) -> Option<Array> {
        let first = *self.positions.first()?;
        Some(
            self.first_position
                .get_or_insert_with(|| gmlx_mlx::cuda_attention::position_array(first))
                .clone(),
        )
    }

    pub fn is_cached(&self) -> bool {
        self.caches.is_some()
    }

    /// Row `row`'s cache of `layer`, in a cached pass.
    pub fn layer_cache(&mut self, row: usize, layer: usize) -> Option<&mut LayerCache> {
        self.caches
            .as_deref_mut()
            .map(|rows| rows[row].layer_mut(layer))
    }

    /// After the last block: every row has moved on by `tokens` positions.
    pub(crate) fn advance(&mut self, tokens: i32) {
        if let Some(rows) = self.caches.as_deref_mut() {
            for row in rows {
                row.advance(tokens);
            }
        }
    }
}
