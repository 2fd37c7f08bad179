//! `load`: the entry point for applications. Opens and validates the file, picks the
//! architecture, builds the tokenizer and the weights, and makes them resident.
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gmlx_gguf::{GgmlType, GgufFile};
use gmlx_mlx::device::{self, DeviceChoice, DeviceKind};
use gmlx_mlx::Dtype;
use gmlx_tokenizer::Tokenizer;

use crate::config::ModelConfig;
use crate::error::Result;
use crate::model::Model;
use crate::registry;

/// How to load.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    pub device: DeviceChoice,
    /// Activation dtype; dense weights are stored in it.
    pub dtype: Dtype,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            device: DeviceChoice::Auto,
            dtype: Dtype::Float32,
        }
    }
}

/// A model ready to generate.
#[derive(Debug)]
pub struct Loaded {
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub path: PathBuf,
    pub device: DeviceKind,
    /// Bytes the weights occupy in memory.
    pub weight_bytes: usize,
    pub load_time: Duration,
}

impl Loaded {
    pub fn config(&self) -> &ModelConfig {
        self.model.config()
    }
}

/// Loads the model at `path` (any shard of a split model).
pub fn load(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Loaded> {
    let start = Instant::now();
    let path = path.as_ref();
    let device = device::use_device(options.device)?;
    let file = GgufFile::open(path)?;
    let spec = registry::lookup(file.architecture()?)?;
    file.check_codecs()?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let model = (spec.build)(&file, options.dtype)?;
    let weight_bytes = model.materialize()?;
    Ok(Loaded {
        model,
        tokenizer,
        path: path.to_owned(),
        device,
        weight_bytes,
        load_time: start.elapsed(),
    })
}

/// How one codec of the file would be held in memory.
#[derive(Debug, Clone)]
pub struct CodecPlan {
    pub codec: GgmlType,
    pub tensors: usize,
    pub file_bytes: u64,
    /// `affine` (kept quantized) or `dense` (dequantized at load).
    pub stored_as: &'static str,
}

/// What `load` would do, read from the header alone (`gmlx run --report-only`).
#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub path: PathBuf,
    pub config: ModelConfig,
    pub codecs: Vec<CodecPlan>,
    pub tokenizer: String,
}

/// Validates the file, the architecture, its config and codecs without loading weights.
pub fn plan(path: impl AsRef<Path>) -> Result<LoadPlan> {
    let path = path.as_ref();
    let file = GgufFile::open(path)?;
    let spec = registry::lookup(file.architecture()?)?;
    file.check_codecs()?;
    let config = (spec.synth)(&file)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let codecs = file
        .type_counts()
        .into_iter()
        .map(|(codec, tensors)| CodecPlan {
            codec,
            tensors,
            file_bytes: file
                .tensors()
                .iter()
                .filter(|t| t.ggml_type == codec)
                .map(|t| t.n_bytes)
                .sum(),
            stored_as: if gmlx_gguf::repack::affine_layout(codec).is_ok() {
                "affine (quantized)"
            } else {
                "dense"
            },
        })
        .collect();
    Ok(LoadPlan {
        path: path.to_owned(),
        config,
        codecs,
        tokenizer: format!(
            "{:?}{}, {} tokens",
            tokenizer.kind(),
            tokenizer
                .pre_tokenizer()
                .map(|p| format!(" (pre: {p})"))
                .unwrap_or_default(),
            tokenizer.vocab_size()
        ),
    })
}

impl fmt::Display for LoadPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(f, "file         {}", self.path.display())?;
        writeln!(f, "architecture {}", c.arch)?;
        writeln!(
            f,
            "shape        {} layers, hidden {}, heads {} (kv {}, dim {}), ffn {}, vocab {}",
            c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_hidden, c.vocab
        )?;
        writeln!(
            f,
            "rope         dims {}, base {}, {} layout, position scale {}{}",
            c.rope.dims,
            c.rope.base,
            if c.rope.traditional {
                "adjacent-pair"
            } else {
                "half-split"
            },
            c.rope.position_scale,
            if c.rope.freq_factors.is_some() {
                ", frequency factors"
            } else {
                ""
            }
        )?;
        writeln!(f, "context      {} tokens", c.context_length)?;
        writeln!(f, "tokenizer    {}", self.tokenizer)?;
        writeln!(f, "weights")?;
        for p in &self.codecs {
            writeln!(
                f,
                "  {:<8} {:>4} tensors {:>10.2} MiB  -> {}",
                p.codec.name(),
                p.tensors,
                p.file_bytes as f64 / (1024.0 * 1024.0),
                p.stored_as
            )?;
        }
        Ok(())
    }
}
