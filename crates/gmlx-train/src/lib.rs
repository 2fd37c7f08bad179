//! LoRA fine-tuning of GGUF models on MLX. The base model stays in its quantized form
//! ([`gmlx_mlx::QuantWeight`]) and frozen: gradients flow through the quantized matmuls to
//! the activations, and only the low-rank adapters get gradients and optimizer state. The
//! result is a LoRA adapter in llama.cpp's GGUF format ([`gmlx_models::adapter`]).
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use gmlx_models::{load, LoadOptions};
//! use gmlx_train::{data, OutputPlan, TrainConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = TrainConfig { iters: 50, learning_rate: 1e-3, ..Default::default() }.validate()?;
//! let dataset = data::read_dir("data".as_ref())?;
//! let out = OutputPlan::resolve("adapters/".as_ref())?;
//! let mut loaded = load("SmolLM2-135M-Instruct.Q4_1.gguf", &LoadOptions::default())?;
//! let trained = gmlx_train::train(
//!     &mut loaded.model,
//!     &loaded.tokenizer,
//!     &dataset,
//!     &config,
//!     &mut |p| eprintln!("{p}"),
//!     &AtomicBool::new(false),
//! )?;
//! out.write(&trained.adapter)?;
//! println!("{}", trained.summary);
//! # Ok(())
//! # }
//! ```
pub mod config;
pub mod data;
pub mod distill;
mod error;
pub mod lora;
pub mod optim;
pub mod output;
pub mod step;
mod train;

pub use config::{LoraConfig, TrainConfig};
pub use error::{Error, Result};
pub use output::OutputPlan;
pub use train::{loss_and_grads, train, train_examples, Progress, Summary, Trained};
