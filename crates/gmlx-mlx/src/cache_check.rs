//! MLX's cache-thrashing abort, off by default.
//!
//! MLX's CUDA backend keeps least-recently-used caches (captured CUDA graphs, attention and
//! convolution plans) and, unless `MLX_ENABLE_CACHE_THRASHING_CHECK=0`, throws once a cache
//! has missed more than twice its capacity over the life of the process: a counter that never
//! resets, so a long training run or server dies at an evaluation however well the cache hits.
//! The caches stay bounded without the check; only the abort goes. Training a
//! Qwen3.5-9B-shaped model on the GPU with gradient checkpointing and the chunked gated-delta
//! scan stopped at its second step with "Cache thrashing is happening"
//! (`bench/runs/2026-12-06-h100-2/train-qwen35-9b-chunk-checkpoint.txt`). [`apply`] turns the
//! check off before any MLX work unless the user set the variable.

/// The environment variable MLX reads, once per cache, when the cache is made.
pub const THRASHING_CHECK_VAR: &str = "MLX_ENABLE_CACHE_THRASHING_CHECK";

/// Applies the default (idempotent; called by [`crate::init`]). True when the check is on.
pub(crate) fn apply() -> bool {
    match std::env::var(THRASHING_CHECK_VAR) {
        Ok(value) => value.trim() != "0",
        Err(_) => {
            // Runs once, from init(), before any MLX call and before gmlx starts threads.
            std::env::set_var(THRASHING_CHECK_VAR, "0");
            false
        }
    }
}
