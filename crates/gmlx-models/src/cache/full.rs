//! The full KV cache of one attention layer: key and value buffers that grow in chunks.
use std::sync::Arc;

use gmlx_mlx::cuda_attention::{self, Decode};
use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::slicing::{slice, slice_update};
use gmlx_mlx::{ops, Array, Dtype};

use super::{Attended, KeyMask};
use crate::error::Result;

/// Tokens of room added each time a cache grows.
pub const CHUNK_TOKENS: i32 = 256;

/// Keys and values of one attention layer, `[batch, kv_heads, capacity, head_dim]`, of which
/// the first `len` positions are filled; or, while a CPU decode attends on the host
/// ([`FullKv::move_to_host`]), in host memory.
#[derive(Debug, Clone, Default)]
pub struct FullKv {
    keys: Buffer,
    values: Buffer,
    /// A QSA indexer's raw keys, one row per position, when the layer has one.
    indexer_keys: Option<Buffer>,
    /// The keys and values in host memory (the buffers are then empty).
    host: Option<HostKv>,
}

/// Keys and values in host memory, token-major: `[len, kv_heads * head_dim]` each.
#[derive(Debug, Clone)]
pub struct HostKv {
    pub keys: Vec<f32>,
    pub values: Vec<f32>,
    /// `kv_heads * head_dim`.
    pub width: usize,
    kv_heads: i32,
}

impl HostKv {
    /// Tokens held.
    pub fn len(&self) -> usize {
        self.keys.len() / self.width.max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
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
        match &self.host {
            Some(h) => h.len() as i32,
            None => self.keys.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the keys and values are in host memory ([`FullKv::move_to_host`]).
    pub fn on_host(&self) -> bool {
        self.host.is_some()
    }

    /// Positions allocated.
    pub fn capacity(&self) -> i32 {
        match &self.host {
            Some(h) => (h.keys.capacity() / h.width.max(1)) as i32,
            None => self.keys.capacity(),
        }
    }

    /// Bytes of the buffers (capacity, not just the filled part).
    pub fn nbytes(&self) -> usize {
        let host = self.host.as_ref().map_or(0, |h| {
            (h.keys.capacity() + h.values.capacity()) * std::mem::size_of::<f32>()
        });
        host + self.keys.nbytes()
            + self.values.nbytes()
            + self.indexer_keys.as_ref().map_or(0, Buffer::nbytes)
    }

    /// Moves what the buffers hold into host memory (once, after a prefill), for keys and
    /// values of `kv_heads` vectors making `width` values per token. False, with nothing
    /// changed, for a cache that stays with MLX: an indexer's keys, another width, keys or
    /// values not float32 of one sequence.
    pub fn move_to_host(&mut self, width: usize, kv_heads: i32) -> Result<bool> {
        if self.indexer_keys.is_some() {
            return Ok(false);
        }
        if let Some(h) = &self.host {
            return Ok(h.width == width);
        }
        let one_sequence_f32 = |b: &Buffer| {
            b.data.as_ref().is_none_or(|a| {
                a.dtype() == gmlx_mlx::Dtype::Float32
                    && a.shape()[0] == 1
                    && (a.shape()[1] * a.shape()[3]) as usize == width
            })
        };
        if !one_sequence_f32(&self.keys) || !one_sequence_f32(&self.values) {
            return Ok(false);
        }
        let (Some(keys), Some(values)) = (self.keys.read_tokens()?, self.values.read_tokens()?)
        else {
            return Ok(false);
        };
        self.keys = Buffer::default();
        self.values = Buffer::default();
        self.host = Some(HostKv {
            keys,
            values,
            width,
            kv_heads,
        });
        Ok(true)
    }

    /// Appends one token's keys and values (`width` values each) at `position` (the number
    /// held) to a cache [`FullKv::move_to_host`] moved, and returns every key and value held;
    /// `None` for a cache not on the host or keys of another width.
    pub fn append_host(&mut self, k: &[f32], v: &[f32], position: i32) -> Option<&HostKv> {
        debug_assert_eq!(position, self.len(), "a full cache is appended in order");
        let host = self.host.as_mut()?;
        if host.width != k.len() || v.len() != k.len() {
            return None;
        }
        if host.keys.capacity() == host.keys.len() {
            let room = CHUNK_TOKENS as usize * host.width;
            host.keys.reserve_exact(room);
            host.values.reserve_exact(room);
        }
        host.keys.extend_from_slice(k);
        host.values.extend_from_slice(v);
        Some(host)
    }

    /// Moves keys and values held on the host back into MLX buffers (on failure they stay on
    /// the host).
    fn leave_host(&mut self) -> Result<()> {
        let Some(host) = &self.host else {
            return Ok(());
        };
        let tokens = host.len() as i32;
        let d = host.width as i32 / host.kv_heads.max(1);
        let to_buffer = |values: &[f32]| -> Result<Buffer> {
            if tokens == 0 {
                return Ok(Buffer::default());
            }
            let a = Array::from_slice(values, &[1, tokens, host.kv_heads, d])
                .transpose_axes(&[0, 2, 1, 3])?;
            Ok(Buffer {
                data: Some(a.contiguous()?),
                len: tokens,
                owner: Arc::default(),
            })
        };
        let (keys, values) = (to_buffer(&host.keys)?, to_buffer(&host.values)?);
        self.keys = keys;
        self.values = values;
        self.host = None;
        Ok(())
    }

    /// Appends the tokens starting at `position` (which must be the number held) and returns
    /// every key and value, causal for a chunk of several queries.
    pub fn attend(&mut self, k: &Array, v: &Array, position: i32) -> Result<Attended> {
        self.leave_host()?;
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

impl FullKv {
    /// One token's attention by gmlx's CUDA kernel ([`cuda_attention::decode`]): the query `q
    /// [1, heads, 1, head_dim]` against the keys held and the token's own `k`, `v` (at
    /// `position`: the number held, and an int32 array of one value holding it), which the
    /// launch writes into the buffers; `[1, 1, heads * head_dim]`. `None` where the kernel does
    /// not take them (the cache then holds what it held, perhaps in larger or unshared
    /// buffers). `next`: the matrix the step multiplies next ([`Decode::next`]).
    pub fn attend_decode(
        &mut self,
        q: &Array,
        k: &Array,
        v: &Array,
        position: (i32, &Array),
        scale: f32,
        next: Option<&WarmSet>,
    ) -> Option<Result<Array>> {
        if !cuda_attention::enabled() {
            return None;
        }
        let (at, position) = position;
        let shape = k.shape();
        if shape.len() != 4 || shape[2] != 1 || v.shape() != shape || v.dtype() != k.dtype() {
            return None;
        }
        let (keys, values) = match self.room_for_one(at, shape[1], shape[3], k.dtype())? {
            Ok(buffers) => buffers,
            Err(e) => return Some(Err(e)),
        };
        let decode = Decode {
            q,
            k,
            v,
            keys: &keys,
            values: &values,
            position,
            len: at,
            scale,
            next,
        };
        if !cuda_attention::fits(&decode) {
            return None;
        }
        let out = cuda_attention::decode(decode).map_err(Into::into);
        if out.is_ok() {
            self.wrote_one();
        }
        Some(out)
    }

    /// The key and value buffers with room for one more position at `at`, held by this cache
    /// alone, for a kernel that writes the token's key and value there in place (gmlx's CUDA
    /// attention and decode-layer kernels; [`FullKv::wrote_one`] then counts them): rows of
    /// `kv_heads` heads of `head_dim` values in `dtype`. `None`, before any work, where the
    /// cache is on the host, keeps an indexer's keys, or does not end at `at` (the kernels write
    /// at the token's position: it must be the one the buffers end at).
    pub fn room_for_one(
        &mut self,
        at: i32,
        kv_heads: i32,
        head_dim: i32,
        dtype: Dtype,
    ) -> Option<Result<(Array, Array)>> {
        if self.host.is_some() || self.indexer_keys.is_some() {
            return None;
        }
        if at != self.len() || self.values.len() != at {
            return None;
        }
        let shape = [1, kv_heads, 1, head_dim];
        let reserved = (
            self.keys.reserve_in_place(&shape, dtype),
            self.values.reserve_in_place(&shape, dtype),
        );
        Some(match reserved {
            (Ok(keys), Ok(values)) => Ok((keys.clone(), values.clone())),
            (Err(e), _) | (_, Err(e)) => Err(e),
        })
    }

    /// Counts the position a kernel wrote into both buffers after the filled part
    /// ([`FullKv::room_for_one`]).
    pub fn wrote_one(&mut self) {
        self.keys.advance(1);
        self.values.advance(1);
    }
}

/// One growing `[batch, heads, capacity, width]` buffer whose first `len` positions are
/// filled: the keys or the values of a full cache, or any other per-position array a layer
/// keeps (a latent cache, an indexer's keys).
#[derive(Debug, Clone, Default)]
pub struct Buffer {
    data: Option<Array>,
    len: i32,
    /// Shared by this buffer's clones (a forked sequence holds the same array): a kernel that
    /// writes in place ([`Buffer::reserve_in_place`]) gets a copy of a shared array first.
    owner: Arc<()>,
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

    /// The filled part of a one-sequence float32 buffer (the caller checks both), token-major
    /// (`[len, heads * width]` row-major); `None` if it cannot be read as float32.
    fn read_tokens(&self) -> Result<Option<Vec<f32>>> {
        if self.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let tokens = self.read()?.transpose_axes(&[0, 2, 1, 3])?.contiguous()?;
        tokens.eval()?;
        Ok(tokens.try_as_slice::<f32>().ok().map(<[f32]>::to_vec))
    }

    /// The array, with room for rows of `shape` (`[batch, heads, n, width]`) and `dtype` after
    /// the filled part and held by this buffer alone (a shared one is copied), for a kernel that
    /// writes them there in place; [`Buffer::advance`] then counts them.
    pub fn reserve_in_place(&mut self, shape: &[i32], dtype: Dtype) -> Result<&Array> {
        let needed = self.len + shape[2];
        let shared = Arc::strong_count(&self.owner) > 1;
        if self.data.is_none() || needed > self.capacity() || shared {
            let capacity = room_for(needed).max(self.capacity());
            self.data = Some(grow(self.data.take(), shape, capacity, self.len, dtype)?);
            self.owner = Arc::default();
        }
        match &self.data {
            Some(data) => Ok(data),
            None => unreachable!("the buffer exists after growing"),
        }
    }

    /// Counts `n` positions a kernel wrote after the filled part ([`Buffer::reserve_in_place`]).
    pub fn advance(&mut self, n: i32) {
        self.len += n;
    }

    /// Appends `x [batch, heads, n, width]` and returns the filled part, which now ends
    /// with it.
    pub fn append(&mut self, x: &Array) -> Result<Array> {
        let shape = x.shape().to_vec();
        let n = shape[2];
        let needed = self.len + n;
        if needed > self.capacity() {
            let capacity = room_for(needed);
            self.data = Some(grow(
                self.data.take(),
                &shape,
                capacity,
                self.len,
                x.dtype(),
            )?);
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
        self.data = Some(data);
        // MLX's update writes in place only into an array nothing else holds, else into a copy
        self.owner = Arc::default();
        self.read()
    }
}

/// Positions a buffer holding `needed` allocates: whole chunks of [`CHUNK_TOKENS`].
fn room_for(needed: i32) -> i32 {
    (needed + CHUNK_TOKENS - 1) / CHUNK_TOKENS * CHUNK_TOKENS
}

/// A buffer of `capacity` positions holding the first `len` positions of `old`.
fn grow(old: Option<Array>, shape: &[i32], capacity: i32, len: i32, dtype: Dtype) -> Result<Array> {
    let fresh = ops::zeros_dtype(&[shape[0], shape[1], capacity, shape[3]], dtype)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: i32, from: f32) -> Array {
        let values: Vec<f32> = (0..2 * n * 4).map(|i| from + i as f32).collect();
        Array::from_slice(&values, &[1, 2, n, 4])
    }

    /// The shape of one token's rows in [`tokens`].
    const ONE_TOKEN: [i32; 4] = [1, 2, 1, 4];

    /// Where the array's values live (the arrays are evaluated on the CPU).
    fn storage(a: &Array) -> *const f32 {
        a.eval().expect("eval");
        a.as_slice::<f32>().as_ptr()
    }

    #[test]
    fn a_buffer_reserved_for_writing_in_place_is_its_own() {
        let mut buffer = Buffer::default();
        buffer.append(&tokens(3, 0.0)).expect("append");
        let filled = buffer.read().expect("read");
        let data = buffer
            .reserve_in_place(&ONE_TOKEN, Dtype::Float32)
            .expect("reserve")
            .clone();
        // room already, held alone: the same array
        assert_eq!(data.shape(), [1, 2, CHUNK_TOKENS, 4]);
        let here = storage(&data);
        assert_eq!(storage(buffer.data.as_ref().expect("data")), here);
        // a fork shares it until one of the two writes in place
        let fork = buffer.clone();
        let mine = buffer
            .reserve_in_place(&ONE_TOKEN, Dtype::Float32)
            .expect("reserve")
            .clone();
        assert_ne!(storage(&mine), here);
        assert_eq!(storage(fork.data.as_ref().expect("data")), here);
        assert_eq!(Arc::strong_count(&buffer.owner), 1);
        // the copy holds the filled part
        let s = [1, 2, buffer.len(), 4];
        let copied = slice(&mine, &[0, 0, 0, 0], &s).expect("slice");
        let (copied, filled) = (
            copied.contiguous().expect("copy"),
            filled.contiguous().expect("copy"),
        );
        copied.eval().expect("eval");
        filled.eval().expect("eval");
        assert_eq!(
            copied.as_slice::<f32>(),
            filled.as_slice::<f32>(),
            "the filled part, copied"
        );
        // a full buffer grows, keeping what it held
        let mut full = Buffer::default();
        full.append(&tokens(CHUNK_TOKENS, 0.0)).expect("append");
        let grown = full
            .reserve_in_place(&ONE_TOKEN, Dtype::Float32)
            .expect("reserve");
        assert_eq!(grown.shape(), [1, 2, 2 * CHUNK_TOKENS, 4]);
        full.advance(1);
        assert_eq!(full.len(), CHUNK_TOKENS + 1);
    }
}
