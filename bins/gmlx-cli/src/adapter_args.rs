//! The `--adapter FILE [--adapter-scale S]` flags `run` and `perplexity` share: the adapter is
//! read and checked against the base's header before any weight loads, then applied live.
use std::path::PathBuf;

use clap::Args;
use gmlx_models::adapter::Adapter;
use gmlx_models::{Loaded, Opened};

use crate::{usage, Failure};

#[derive(Args)]
pub struct AdapterArgs {
    /// A LoRA adapter in llama.cpp's GGUF format (as `gmlx train` writes), applied live on
    /// the quantized base: each adapted layer adds `scale·(x·Aᵀ)·Bᵀ`.
    #[arg(long, value_name = "FILE")]
    adapter: Option<PathBuf>,
    /// Multiplies the adapter's `alpha / rank` scale (llama.cpp's `--lora-scaled`).
    #[arg(long, default_value_t = 1.0, requires = "adapter")]
    adapter_scale: f32,
}

/// An adapter read and checked against its base, waiting for the base's weights.
pub struct CheckedAdapter {
    file: PathBuf,
    adapter: Adapter,
    scale: f32,
}

impl AdapterArgs {
    /// Reads the adapter (if one was given) and checks it against the base's architecture,
    /// targets and shapes: a mismatch is a usage error, before any weight loads.
    pub fn check(&self, opened: &Opened) -> Result<Option<CheckedAdapter>, Failure> {
        let Some(file) = &self.adapter else {
            return Ok(None);
        };
        let refused = |e| usage(anyhow::anyhow!("adapter {}: {e}", file.display()));
        let adapter = Adapter::read(file).map_err(refused)?;
        adapter.check_base(opened.file()).map_err(refused)?;
        Ok(Some(CheckedAdapter {
            file: file.clone(),
            adapter,
            scale: self.adapter_scale,
        }))
    }
}

impl CheckedAdapter {
    /// Applies the adapter live on the loaded base and says so on stderr.
    pub fn apply(&self, loaded: &mut Loaded) -> Result<(), Failure> {
        gmlx_models::adapter::apply(&mut loaded.model, &self.adapter, self.scale)?;
        eprintln!(
            "gmlx: adapter {} applied live ({} layers, alpha {})",
            self.file.display(),
            self.adapter.pairs.len(),
            self.adapter.alpha
        );
        Ok(())
    }
}
