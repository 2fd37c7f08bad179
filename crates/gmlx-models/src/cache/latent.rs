//! The cache of a latent (MLA) attention layer: one compressed row per position, the latent
//! followed by its rotary key part (attention reads it MQA style, the values being the
//! latent), and the lightning indexer's keys when the layer owns an indexer.
use gmlx_mlx::Array;

use super::full::Buffer;
use crate::error::Result;

#[derive(Debug, Clone, Default)]
pub struct Latent {
    rows: Buffer,
    indexer_keys: Option<Buffer>,
}

impl Latent {
    pub fn new(indexer: bool) -> Latent {
        Latent {
            rows: Buffer::default(),
            indexer_keys: indexer.then(Buffer::default),
        }
    }

    /// Positions held.
    pub fn len(&self) -> i32 {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn nbytes(&self) -> usize {
        self.rows.nbytes() + self.indexer_keys.as_ref().map_or(0, Buffer::nbytes)
    }

    /// Appends `rows [batch, 1, n, width]` and returns every row held.
    pub fn append_rows(&mut self, rows: &Array) -> Result<Array> {
        self.rows.append(rows)
    }

    /// Appends the indexer's keys `[batch, 1, n, width]` and returns every key held; `None`
    /// when the layer has no indexer of its own.
    pub fn append_indexer_keys(&mut self, keys: &Array) -> Option<Result<Array>> {
        self.indexer_keys.as_mut().map(|b| b.append(keys))
    }
}
