//! Per-sequence state between forward passes: one cache per layer, chosen by the layer's kind
//! in the model's plan, and the sequence's position (how many tokens it has seen).
mod compressed;
mod full;
mod latent;
mod recurrent;
mod rotating;

pub use compressed::{Compressed, CompressorState};
pub use full::FullKv;
pub use latent::Latent;
pub use recurrent::Recurrent;
pub use rotating::RotatingKv;

use gmlx_mlx::cuda_warm::WarmSet;
use gmlx_mlx::Array;

use crate::error::Result;

/// Which cache a layer needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// Every key and value of the sequence.
    FullKv,
    /// Every key and value, and a QSA indexer's raw keys (Qwen4 experimental).
    IndexedKv,
    /// The last `window` keys and values (sliding-window attention): memory bounded by the
    /// window whatever the sequence's length.
    RotatingKv { window: i32 },
    /// A recurrent layer's fixed-size state (convolution history and delta-rule state).
    Recurrent,
    /// A latent attention layer's compressed rows, and its indexer's keys when it owns one.
    Latent { indexer: bool },
    /// A DeepSeek-V4 attention layer's raw window, pooled rows every `ratio` positions (0:
    /// none), the indexer's pooled keys, and the compressors' partial blocks.
    Compressed {
        window: i32,
        ratio: i32,
        indexer: bool,
    },
}

impl std::fmt::Display for CacheKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheKind::FullKv => write!(f, "full kv"),
            CacheKind::IndexedKv => write!(f, "full kv + indexer keys"),
            CacheKind::RotatingKv { window } => write!(f, "rotating kv ({window})"),
            CacheKind::Recurrent => write!(f, "recurrent state"),
            CacheKind::Latent { indexer: false } => write!(f, "latent kv"),
            CacheKind::Latent { indexer: true } => write!(f, "latent kv + indexer keys"),
            CacheKind::Compressed {
                window, ratio: 0, ..
            } => write!(f, "window kv ({window})"),
            CacheKind::Compressed {
                window,
                ratio,
                indexer,
            } => write!(
                f,
                "window kv ({window}) + 1:{ratio} pooled{}",
                if *indexer { " + indexer keys" } else { "" }
            ),
        }
    }
}

/// The keys and values attention reads after an append, and which of them each new query
/// may see.
#[derive(Debug)]
pub struct Attended {
    pub keys: Array,
    pub values: Array,
    pub mask: KeyMask,
}

/// Visibility of the attended keys for the new queries.
#[derive(Debug, Clone)]
pub enum KeyMask {
    /// Every key is visible to every query (one query token).
    All,
    /// Causal, aligned to the last key (a chunk after everything cached).
    Causal,
    /// `[queries, keys]` booleans, built on the device.
    Array(Array),
}

/// Bytes of a key and a value buffer, either of which may not exist yet.
fn buffer_bytes(keys: &Option<Array>, values: &Option<Array>) -> usize {
    [keys, values]
        .into_iter()
        .flatten()
        .map(Array::nbytes)
        .sum()
}

/// One layer's cache for one sequence.
#[derive(Debug, Clone)]
pub enum LayerCache {
    FullKv(FullKv),
    RotatingKv(RotatingKv),
    Recurrent(Recurrent),
    Latent(Latent),
    Compressed(Compressed),
}

impl LayerCache {
    pub fn new(kind: CacheKind) -> LayerCache {
        match kind {
            CacheKind::FullKv => LayerCache::FullKv(FullKv::new()),
            CacheKind::IndexedKv => LayerCache::FullKv(FullKv::with_indexer()),
            CacheKind::RotatingKv { window } => LayerCache::RotatingKv(RotatingKv::new(window)),
            CacheKind::Recurrent => LayerCache::Recurrent(Recurrent::default()),
            CacheKind::Latent { indexer } => LayerCache::Latent(Latent::new(indexer)),
            CacheKind::Compressed { window, .. } => LayerCache::Compressed(Compressed::new(window)),
        }
    }

    /// Appends the keys and values of `k.shape()[2]` tokens whose first sits at `position`;
    /// returns what attention reads; `None` for a cache that holds no keys and values.
    pub fn attend(&mut self, k: &Array, v: &Array, position: i32) -> Option<Result<Attended>> {
        match self {
            LayerCache::FullKv(c) => Some(c.attend(k, v, position)),
            LayerCache::RotatingKv(c) => Some(c.attend(k, v, position)),
            LayerCache::Recurrent(_) | LayerCache::Latent(_) | LayerCache::Compressed(_) => None,
        }
    }

    /// One token's attention by gmlx's CUDA kernel, its key and value appended in the same
    /// launch ([`FullKv::attend_decode`]); `None` where the kernel does not take it (a cache
    /// other than a full one, or operands it does not read).
    pub fn attend_decode(
        &mut self,
        q: &Array,
        k: &Array,
        v: &Array,
        position: (i32, &Array),
        scale: f32,
        next: Option<&WarmSet>,
    ) -> Option<Result<Array>> {
        match self {
            LayerCache::FullKv(c) => c.attend_decode(q, k, v, position, scale, next),
            _ => None,
        }
    }

    /// Bytes of device memory the cache holds.
    pub fn nbytes(&self) -> usize {
        match self {
            LayerCache::FullKv(c) => c.nbytes(),
            LayerCache::RotatingKv(c) => c.nbytes(),
            LayerCache::Recurrent(c) => c.nbytes(),
            LayerCache::Latent(c) => c.nbytes(),
            LayerCache::Compressed(c) => c.nbytes(),
        }
    }
}

/// One sequence's caches, a layer each, and its position. A clone shares the MLX arrays it
/// holds (appends make new ones; a full cache that gmlx's CUDA attention writes in place is
/// copied first where a clone shares it: `Buffer::reserve_in_place` in `full.rs`) and copies keys
/// and values a CPU decode moved into host memory, so it forks the sequence: several
/// continuations of one prefilled prompt.
#[derive(Debug, Clone)]
pub struct SequenceCache {
    layers: Vec<LayerCache>,
    position: i32,
}

impl SequenceCache {
    /// Empty caches of the given kinds (one per layer).
    pub fn new(kinds: impl IntoIterator<Item = CacheKind>) -> SequenceCache {
        SequenceCache {
            layers: kinds.into_iter().map(LayerCache::new).collect(),
            position: 0,
        }
    }

    /// Tokens the sequence has seen: the position of the next one.
    pub fn position(&self) -> i32 {
        self.position
    }

    pub fn layer_mut(&mut self, layer: usize) -> &mut LayerCache {
        &mut self.layers[layer]
    }

    pub fn layers(&self) -> &[LayerCache] {
        &self.layers
    }

    /// Records that `tokens` more tokens went through every layer.
    pub(crate) fn advance(&mut self, tokens: i32) {
        self.position += tokens;
    }

    /// Bytes of device memory all layers hold.
    pub fn nbytes(&self) -> usize {
        self.layers.iter().map(LayerCache::nbytes).sum()
    }
}
