//! GGUF language models on MLX: load a file, generate text.
//!
//! ```
//! use gmlx_models::{default_model, load, GenerateOptions, Generation, LoadOptions};
//!
//! # fn main() -> gmlx_models::Result<()> {
//! // SmolLM2-135M-Instruct Q4_1, downloaded once into the cache; any GGUF path works
//! let path = default_model::fetch()?;
//! let loaded = load(&path, &LoadOptions::default())?;
//! let prompt = loaded.tokenizer.encode("The capital of France is", true, false)?;
//! let options = GenerateOptions { max_tokens: 16, ..Default::default() };
//! let mut text = String::new();
//! for piece in Generation::new(&loaded.model, &loaded.tokenizer, &prompt, options)? {
//!     text.push_str(&piece?.text);
//! }
//! assert!(text.starts_with(" Paris."), "{text}");
//! # Ok(())
//! # }
//! ```
pub mod adapter;
pub mod arch;
pub mod bench;
pub mod blocks;
pub mod cache;
pub mod chat;
pub mod config;
pub mod default_model;
mod error;
pub mod generate;
mod load;
mod model;
pub mod registry;
pub mod sample;
mod stop;
mod weights;

pub use blocks::decoder::Logits;
pub use config::ModelConfig;
pub use error::{Error, Result};
pub use generate::{FinishReason, GenerateOptions, Generation, GenerationStats, Piece};
pub use gmlx_tokenizer::{vocab_map_hash, whitespace_start_mask, TokenId, Tokenizer};
pub use load::{load, plan, CodecPlan, LoadOptions, LoadPlan, Loaded};
pub use model::Model;
pub use sample::{Sampler, SamplingParams};
pub use stop::StopFilter;
