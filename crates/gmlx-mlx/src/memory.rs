//! MLX memory statistics, in bytes.
use crate::error::Result;

/// A snapshot of MLX's allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes held by live arrays.
    pub active_bytes: usize,
    /// The most `active_bytes` has been since start or the last [`reset_peak`].
    pub peak_bytes: usize,
    /// Bytes freed by arrays but kept by MLX's buffer cache.
    pub cache_bytes: usize,
    /// The allocator's limit.
    pub limit_bytes: usize,
}

/// Reads the allocator's figures.
pub fn stats() -> Result<MemoryStats> {
    crate::init();
    Ok(MemoryStats {
        active_bytes: mlx_rs::memory::active_memory()?,
        peak_bytes: mlx_rs::memory::peak_memory()?,
        cache_bytes: mlx_rs::memory::cache_memory()?,
        limit_bytes: mlx_rs::memory::memory_limit()?,
    })
}

/// Starts a new peak measurement.
pub fn reset_peak() -> Result<()> {
    crate::init();
    Ok(mlx_rs::memory::reset_peak_memory()?)
}

/// Returns cached buffers to the system.
pub fn clear_cache() -> Result<()> {
    Ok(mlx_rs::memory::clear_cache()?)
}
