//! Flags and steps `run` and `train` share: the device and dtype choices, and opening the
//! model file once.
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use gmlx_mlx::device::DeviceChoice;
use gmlx_mlx::Dtype;
use gmlx_models::{default_model, Opened};

use crate::{usage, Failure};

/// Where MLX runs.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DeviceArg {
    /// The GPU when MLX has one, else the CPU.
    Auto,
    Cpu,
    #[value(alias = "cuda", alias = "metal")]
    Gpu,
}

impl From<DeviceArg> for DeviceChoice {
    fn from(d: DeviceArg) -> DeviceChoice {
        match d {
            DeviceArg::Auto => DeviceChoice::Auto,
            DeviceArg::Cpu => DeviceChoice::Cpu,
            DeviceArg::Gpu => DeviceChoice::Gpu,
        }
    }
}

/// The activation dtype (dense weights are stored in it).
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DtypeArg {
    #[value(alias = "f32")]
    Float32,
    #[value(alias = "bf16")]
    Bfloat16,
    #[value(alias = "f16")]
    Float16,
}

impl From<DtypeArg> for Dtype {
    fn from(d: DtypeArg) -> Dtype {
        match d {
            DtypeArg::Float32 => Dtype::Float32,
            DtypeArg::Bfloat16 => Dtype::Bfloat16,
            DtypeArg::Float16 => Dtype::Float16,
        }
    }
}

/// The model path the user gave (which must exist), or the default model, fetched once.
pub fn model_path(model: Option<&Path>) -> Result<PathBuf, Failure> {
    match model {
        Some(p) if p.is_file() => Ok(p.to_owned()),
        Some(p) => Err(usage(anyhow::anyhow!("{}: no such file", p.display()))),
        None => Ok(default_model::fetch()?),
    }
}

/// Opens the model file once. A file that is not valid GGUF is a file error (exit 2); what it
/// asks for that gmlx cannot do is a load refusal (exit 1).
pub fn open_model(path: &Path) -> Result<Opened, Failure> {
    let file = gmlx_gguf::GgufFile::open(path).map_err(usage)?;
    Ok(Opened::new(file, path)?)
}
