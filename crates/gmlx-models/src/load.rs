//! `load`: the entry point for applications. Opens and validates the file, picks the
//! architecture, builds the tokenizer and the weights, and makes them resident.
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gmlx_gguf::{GgmlType, GgufFile};
use gmlx_mlx::device::{self, DeviceChoice, DeviceKind};
use gmlx_mlx::Dtype;
use gmlx_tokenizer::Tokenizer;

use crate::blocks::moe::ExpertPlacement;
use crate::config::ModelConfig;
use crate::error::Result;
use crate::model::Model;
use crate::registry;

/// How to load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub device: DeviceChoice,
    /// Activation dtype; dense weights are stored in it.
    pub dtype: Dtype,
    /// Where routed MoE experts live (`gmlx_stream` reads them on demand); resident when
    /// `None`.
    pub experts: Option<Arc<dyn ExpertPlacement>>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            device: DeviceChoice::Auto,
            dtype: Dtype::Float32,
            experts: None,
        }
    }
}

/// A model ready to generate.
#[derive(Debug)]
pub struct Loaded {
    pub model: Model,
    /// Shared, so a server's request handlers tokenize with the same one (`Send + Sync`).
    pub tokenizer: Arc<Tokenizer>,
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

/// A model file opened once and checked from its header alone: architecture, codecs, config
/// with its per-layer plan, tokenizer. Planning, an adapter's check and the load itself all
/// read this one handle.
#[derive(Debug)]
pub struct Opened {
    file: GgufFile,
    path: PathBuf,
    spec: &'static registry::ArchSpec,
    config: ModelConfig,
    tokenizer: Tokenizer,
}

/// Opens the model at `path` (any shard of a split model) and checks it without loading
/// weights.
pub fn open(path: impl AsRef<Path>) -> Result<Opened> {
    let path = path.as_ref();
    Opened::new(GgufFile::open(path)?, path)
}

impl Opened {
    /// Checks an already opened file (`path` is what reports show).
    pub fn new(file: GgufFile, path: impl Into<PathBuf>) -> Result<Opened> {
        let spec = registry::lookup(file.architecture()?)?;
        file.check_codecs()?;
        let config = (spec.synth)(&file)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        Ok(Opened {
            file,
            path: path.into(),
            spec,
            config,
            tokenizer,
        })
    }

    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// What [`Opened::load`] would do.
    pub fn plan(&self) -> LoadPlan {
        let file = &self.file;
        let codecs = file
            .type_counts()
            .into_iter()
            .map(|(codec, tensors)| CodecPlan {
                codec,
                tensors,
                file_bytes: file.codec_bytes(codec),
                stored_as: if gmlx_gguf::repack::affine_layout(codec).is_ok() {
                    "affine (quantized)"
                } else {
                    "dense"
                },
            })
            .collect();
        let t = &self.tokenizer;
        LoadPlan {
            path: self.path.clone(),
            config: self.config.clone(),
            codecs,
            tokenizer: format!(
                "{:?}{}, {} tokens",
                t.kind(),
                t.pre_tokenizer()
                    .map(|p| format!(" (pre: {p})"))
                    .unwrap_or_default(),
                t.vocab_size()
            ),
        }
    }

    /// Reads the weights onto the device and makes them resident.
    pub fn load(self, options: &LoadOptions) -> Result<Loaded> {
        let start = Instant::now();
        let device = device::use_device(options.device)?;
        let model = (self.spec.build)(&self.file, &self.config, options)?;
        let weight_bytes = model.materialize()?;
        Ok(Loaded {
            model,
            tokenizer: Arc::new(self.tokenizer),
            path: self.path,
            device,
            weight_bytes,
            load_time: start.elapsed(),
        })
    }
}

/// Loads the model at `path` (any shard of a split model): [`open`], then [`Opened::load`].
pub fn load(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Loaded> {
    open(path)?.load(options)
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
    Ok(open(path)?.plan())
}

impl fmt::Display for LoadPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(f, "file         {}", self.path.display())?;
        writeln!(f, "architecture {}", c.arch)?;
        writeln!(
            f,
            "shape        {} layers, hidden {}, vocab {}, rms eps {}",
            c.n_layers, c.hidden, c.vocab, c.rms_eps
        )?;
        writeln!(f, "context      {} tokens", c.context_length)?;
        writeln!(f, "tokenizer    {}", self.tokenizer)?;
        writeln!(f, "layers")?;
        for (l, group) in layer_groups(c) {
            writeln!(f, "  {l:<10} {group}")?;
        }
        if let Some(crate::config::MixerSpec::Attention(a)) = c.layers.first().map(|l| &l.mixer) {
            let r = &a.rope;
            writeln!(
                f,
                "rope         dims {}, base {}, {} layout, position scale {}{}{}",
                r.dims,
                r.base,
                if r.traditional {
                    "adjacent-pair"
                } else {
                    "half-split"
                },
                r.position_scale,
                if r.freq_factors.is_some() {
                    ", frequency factors"
                } else {
                    ""
                },
                if r.yarn.is_some() { ", yarn" } else { "" }
            )?;
        }
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

/// Runs of consecutive layers with the same plan, as `("0-29", "attention ... | mlp ...")`.
fn layer_groups(c: &ModelConfig) -> Vec<(String, String)> {
    let mut out: Vec<(usize, usize, String)> = Vec::new();
    for (l, spec) in c.layers.iter().enumerate() {
        let text = format!("{spec}, cache {}", spec.cache_kind());
        match out.last_mut() {
            Some((_, end, t)) if *t == text => *end = l,
            _ => out.push((l, l, text)),
        }
    }
    out.into_iter()
        .map(|(a, b, t)| {
            let range = if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            };
            (range, t)
        })
        .collect()
}
