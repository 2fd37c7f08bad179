//! The cache of a DeepSeek-V4 attention layer (llama.cpp's `llama-kv-cache-dsv4.cpp`, for one
//! sequence): the raw key rows of the sliding window, the pooled rows of every completed
//! block, the lightning indexer's pooled keys (ratio-4 layers), and each compressor's state,
//! the per-position rows of the block still filling (and, for the overlapped compressor, of
//! the block before it, whose first half the next pooled row reads).
use gmlx_mlx::slicing::slice;
use gmlx_mlx::{ops, Array};

use super::full::Buffer;
use crate::error::Result;

/// A compressor's per-position rows not yet pooled for good: `[batch, n, width]` values and
/// scores of the positions from `start` on.
#[derive(Debug, Clone, Default)]
pub struct CompressorState {
    pub kv: Option<Array>,
    pub score: Option<Array>,
}

impl CompressorState {
    pub fn nbytes(&self) -> usize {
        [&self.kv, &self.score]
            .into_iter()
            .flatten()
            .map(Array::nbytes)
            .sum()
    }
}

#[derive(Debug, Clone)]
pub struct Compressed {
    window: i32,
    /// `[batch, 1, n, head_dim]`: the last `window - 1` raw rows (a new query sees them and
    /// itself).
    raw: Option<Array>,
    pooled: Buffer,
    pub state: CompressorState,
    indexer_keys: Buffer,
    pub indexer_state: CompressorState,
}

impl Compressed {
    pub fn new(window: i32) -> Compressed {
        Compressed {
            window,
            raw: None,
            pooled: Buffer::default(),
            state: CompressorState::default(),
            indexer_keys: Buffer::default(),
            indexer_state: CompressorState::default(),
        }
    }

    /// Bytes of device memory held.
    pub fn nbytes(&self) -> usize {
        self.raw.as_ref().map_or(0, Array::nbytes)
            + self.pooled.nbytes()
            + self.indexer_keys.nbytes()
            + self.state.nbytes()
            + self.indexer_state.nbytes()
    }

    /// Raw rows held before `new [batch, 1, n, d]`, then `new`; keeps the window's last rows.
    /// Returns the rows a chunk attends and how many of them precede it.
    pub fn raw_rows(&mut self, new: &Array) -> Result<(Array, i32)> {
        let rows = match self.raw.take() {
            Some(held) => ops::concatenate(&[held, new.clone()], 2)?,
            None => new.clone(),
        };
        let s = rows.shape().to_vec();
        let before = s[2] - new.shape()[2];
        let keep = (self.window - 1).min(s[2]).max(0);
        self.raw = Some(slice(
            &rows,
            &[0, 0, s[2] - keep, 0],
            &[s[0], s[1], s[2], s[3]],
        )?);
        Ok((rows, before))
    }

    /// Appends pooled rows `[batch, 1, n, d]` (if any) and returns every one held.
    pub fn pooled_rows(&mut self, new: Option<&Array>) -> Result<Option<Array>> {
        append_or_read(&mut self.pooled, new)
    }

    /// The same for the indexer's pooled keys.
    pub fn indexer_rows(&mut self, new: Option<&Array>) -> Result<Option<Array>> {
        append_or_read(&mut self.indexer_keys, new)
    }

    /// Pooled rows held.
    pub fn pooled_len(&self) -> i32 {
        self.pooled.len()
    }

    /// Raw rows held (at most `window - 1`).
    pub fn raw_len(&self) -> i32 {
        self.raw.as_ref().map_or(0, |r| r.shape()[2])
    }

    /// Positions the compressors hold unpooled, `[attention, indexer]` (at most two blocks).
    pub fn unpooled_len(&self) -> [i32; 2] {
        [&self.state, &self.indexer_state].map(|s| s.kv.as_ref().map_or(0, |a| a.shape()[1]))
    }
}

fn append_or_read(buffer: &mut Buffer, new: Option<&Array>) -> Result<Option<Array>> {
    match new {
        Some(rows) => Ok(Some(buffer.append(rows)?)),
        None if buffer.is_empty() => Ok(None),
        None => Ok(Some(buffer.read()?)),
    }
}
