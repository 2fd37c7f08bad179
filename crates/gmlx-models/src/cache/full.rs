//! The full KV cache of one attention layer: key and value buffers that grow in chunks.
use gmlx_mlx::slicing::{slice, slice_update};
use gmlx_mlx::{ops, Array};

use super::{Attended, KeyMask};
use crate::error::Result;

/// Tokens of room added each time a cache grows.
pub const CHUNK_TOKENS: i32 = 256;

/// Keys and values of one attention layer, `[batch, kv_heads, capacity, head_dim]`, of which
/// the first `len` positions are filled.
#[derive(Debug, Clone, Default)]
pub struct FullKv {
    keys: Buffer,
    values: Buffer,
    /// A QSA indexer's raw keys, one row per position, when the layer has one.
    indexer_keys: Option<Buffer>,
}

impl FullKv {
    pub fn new() -> FullKv {
        FullKv::default()
    }

    /// With room for a QSA indexer's keys.
    pub fn with_indexer() -> FullKv {
        FullKv {
            indexer_keys: Some(Buffer::default()),
            ..FullKv::default()
        }
    }

    /// Appends the indexer's keys `[batch, 1, n, width]` and returns every key held; `None`
    /// when the cache keeps none.
    pub fn append_indexer_keys(&mut self, keys: &Array) -> Option<Result<Array>> {
        self.indexer_keys.as_mut().map(|b| b.append(keys))
    }

    /// Tokens held.
    pub fn len(&self) -> i32 {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.len() == 0
    }

    /// Positions allocated.
    pub fn capacity(&self) -> i32 {
        self.keys.capacity()
    }

    /// Bytes of the buffers (capacity, not just the filled part).
    pub fn nbytes(&self) -> usize {
        self.keys.nbytes()
            + self.values.nbytes()
            + self.indexer_keys.as_ref().map_or(0, Buffer::nbytes)
    }

    /// Appends the tokens starting at `position` (which must be the number held) and returns
    /// every key and value, causal for a chunk of several queries.
    pub fn attend(&mut self, k: &Array, v: &Array, position: i32) -> Result<Attended> {
        debug_assert_eq!(position, self.len(), "a full cache is appended in order");
        let queries = k.shape()[2];
        let keys = self.keys.append(k)?;
        let values = self.values.append(v)?;
        let mask = if queries > 1 {
            KeyMask::Causal
        } else {
            KeyMask::All
        };
        Ok(Attended { keys, values, mask })
    }
}

/// One growing `[batch, heads, capacity, width]` buffer whose first `len` positions are
/// filled: the keys or the values of a full cache, or any other per-position array a layer
/// keeps (a latent cache, an indexer's keys).
#[derive(Debug, Clone, Default)]
pub struct Buffer {
    data: Option<Array>,
    len: i32,
}

impl Buffer {
    /// Positions held.
    pub fn len(&self) -> i32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions allocated.
    pub fn capacity(&self) -> i32 {
        self.data.as_ref().map_or(0, |d| d.shape()[2])
    }

    /// Bytes allocated.
    pub fn nbytes(&self) -> usize {
        self.data.as_ref().map_or(0, Array::nbytes)
    }

    /// The filled part (an empty buffer has none: check [`Buffer::is_empty`] first).
    pub fn read(&self) -> Result<Array> {
        let Some(data) = &self.data else {
            unreachable!("read() on a buffer that was never appended to");
        };
        let s = data.shape().to_vec();
        Ok(slice(data, &[0, 0, 0, 0], &[s[0], s[1], self.len, s[3]])?)
    }

    /// Appends `x [batch, heads, n, width]` and returns the filled part, which now ends
    /// with it.
    pub fn append(&mut self, x: &Array) -> Result<Array> {
        let shape = x.shape().to_vec();
        let n = shape[2];
        let needed = self.len + n;
        if needed > self.capacity() {
            let capacity = (needed + CHUNK_TOKENS - 1) / CHUNK_TOKENS * CHUNK_TOKENS;
            self.data = Some(grow(self.data.take(), &shape, capacity, self.len, x)?);
        }
        let Some(data) = self.data.take() else {
            unreachable!("the buffer exists after growing");
        };
        let data = slice_update(
            &data,
            x,
            &[0, 0, self.len, 0],
            &[shape[0], shape[1], needed, shape[3]],
        )?;
        self.len = needed;
        let s = data.shape().to_vec();
        let filled = slice(&data, &[0, 0, 0, 0], &[s[0], s[1], self.len, s[3]])?;
        self.data = Some(data);
        Ok(filled)
    }
}

/// A buffer of `capacity` positions holding the first `len` positions of `old`.
fn grow(old: Option<Array>, shape: &[i32], capacity: i32, len: i32, like: &Array) -> Result<Array> {
    let fresh = ops::zeros_dtype(&[shape[0], shape[1], capacity, shape[3]], like.dtype())?;
    match old {
        Some(old) if len > 0 => {
            let s = old.shape().to_vec();
            let kept = slice(&old, &[0, 0, 0, 0], &[s[0], s[1], len, s[3]])?;
            Ok(slice_update(
                &fresh,
                &kept,
                &[0, 0, 0, 0],
                &[s[0], s[1], len, s[3]],
            )?)
        }
        _ => Ok(fresh),
    }
}
