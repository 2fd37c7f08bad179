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
mod build;
pub mod cache;
pub mod chat;
pub mod config;
pub mod default_model;
mod error;
pub mod generate;
pub mod invariance;
mod load;
mod model;
pub mod perplexity;
pub mod registry;
pub mod sample;
pub mod sequence;
mod stop;
mod weights;

pub use blocks::context::ForwardCtx;
pub use blocks::decoder::{BlockRunner, Direct, Logits, Pass};
pub use cache::SequenceCache;
pub use config::{LayerSpec, ModelConfig};
pub use error::{Error, Result, TensorProblem};
pub use generate::{GenerateOptions, Generation, GenerationStats, Piece};
pub use gmlx_constrain as constrain;
pub use gmlx_tokenizer::{vocab_map_hash, whitespace_start_mask, TokenId, Tokenizer};
pub use load::{load, open, plan, CodecPlan, LoadOptions, LoadPlan, Loaded, Opened};
pub use model::Model;
pub use sample::{Sampler, SamplingParams};
pub use sequence::{FinishReason, Sequence, SequenceOptions, Step, TokenLogprob};
pub use stop::StopFilter;
