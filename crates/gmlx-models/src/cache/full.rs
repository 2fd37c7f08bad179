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
    keys: Option<Array>,
    values: Option<Array>,
    len: i32,
}

impl FullKv {
    pub fn new() -> FullKv {
        FullKv::default()
    }

    /// Tokens held.
    pub fn len(&self) -> i32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions allocated.
    pub fn capacity(&self) -> i32 {
        self.keys.as_ref().map_or(0, |k| k.shape()[2])
    }

    /// Bytes of the buffers (capacity, not just the filled part).
    pub fn nbytes(&self) -> usize {
        super::buffer_bytes(&self.keys, &self.values)
    }

    /// Appends the tokens starting at `position` (which must be the number held) and returns
    /// every key and value, causal for a chunk of several queries.
    pub fn attend(&mut self, k: &Array, v: &Array, position: i32) -> Result<Attended> {
        debug_assert_eq!(position, self.len, "a full cache is appended in order");
        let queries = k.shape()[2];
        let (keys, values) = self.append(k, v)?;
        let mask = if queries > 1 {
            KeyMask::Causal
        } else {
            KeyMask::All
        };
        Ok(Attended { keys, values, mask })
    }

    /// Appends `k`, `v` (`[batch, kv_heads, n, head_dim]`) and returns the filled part of the
    /// buffers, which now ends with them.
    fn append(&mut self, k: &Array, v: &Array) -> Result<(Array, Array)> {
        let shape = k.shape().to_vec();
        let n = shape[2];
        let needed = self.len + n;
        if needed > self.capacity() {
            let capacity = (needed + CHUNK_TOKENS - 1) / CHUNK_TOKENS * CHUNK_TOKENS;
            self.keys = Some(grow(self.keys.take(), &shape, capacity, self.len, k)?);
            self.values = Some(grow(self.values.take(), v.shape(), capacity, self.len, v)?);
        }
        let (Some(keys), Some(values)) = (self.keys.take(), self.values.take()) else {
            unreachable!("buffers exist after growing");
        };
        let at = |a: &Array, src: &Array| -> Result<Array> {
            let s = a.shape();
            Ok(slice_update(
                src,
                a,
                &[0, 0, self.len, 0],
                &[s[0], s[1], self.len + n, s[3]],
            )?)
        };
        let keys = at(k, &keys)?;
        let values = at(v, &values)?;
        self.len = needed;
        let filled = |a: &Array| -> Result<Array> {
            let s = a.shape();
            Ok(slice(a, &[0, 0, 0, 0], &[s[0], s[1], self.len, s[3]])?)
        };
        let out = (filled(&keys)?, filled(&values)?);
        self.keys = Some(keys);
        self.values = Some(values);
        Ok(out)
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
