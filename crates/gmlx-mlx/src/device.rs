//! Device choice: `auto` (the GPU when the loaded MLX has one, else the CPU), `cpu` or `gpu`.
use std::str::FromStr;

use mlx_rs::{Device, DeviceType};

use crate::error::{Error, Result};
use crate::runtime::{self, Backend};

/// What the user asked for (`--device`, `GMLX_DEVICE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    #[default]
    Auto,
    Cpu,
    Gpu,
}

impl FromStr for DeviceChoice {
    type Err = Error;
    fn from_str(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "gpu" | "cuda" | "metal" => Ok(Self::Gpu),
            _ => Err(Error::UnknownDevice {
                name: name.to_owned(),
            }),
        }
    }
}

/// The device a choice resolves to on the loaded runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

impl DeviceKind {
    pub fn mlx(self) -> Device {
        match self {
            DeviceKind::Cpu => Device::cpu(),
            DeviceKind::Gpu => Device::gpu(),
        }
    }
}

/// Whether the loaded MLX runtime has a GPU backend with at least one device.
pub fn gpu_available() -> Result<bool> {
    Ok(runtime::backend()? != Backend::Cpu && runtime::device_count(DeviceType::Gpu)? > 0)
}

/// Resolves a choice: `Auto` is the GPU when there is one, else the CPU; `Gpu` without a GPU
/// is an error that names the runtime in use.
pub fn resolve(choice: DeviceChoice) -> Result<DeviceKind> {
    match choice {
        DeviceChoice::Cpu => Ok(DeviceKind::Cpu),
        DeviceChoice::Auto => Ok(if gpu_available()? {
            DeviceKind::Gpu
        } else {
            DeviceKind::Cpu
        }),
        DeviceChoice::Gpu if gpu_available()? => Ok(DeviceKind::Gpu),
        DeviceChoice::Gpu => Err(Error::NoGpu {
            backend: runtime::backend()?,
            library: runtime::libmlx_path().unwrap_or_else(|| "libmlx".into()),
        }),
    }
}

/// The kind of MLX's default device now (on this thread), `None` where MLX cannot say.
pub fn current() -> Option<DeviceKind> {
    match Device::try_default().and_then(|d| d.get_type()).ok()? {
        DeviceType::Cpu => Some(DeviceKind::Cpu),
        DeviceType::Gpu => Some(DeviceKind::Gpu),
    }
}

/// Resolves a choice and makes it MLX's default device for this process.
pub fn use_device(choice: DeviceChoice) -> Result<DeviceKind> {
    let kind = resolve(choice)?;
    Device::set_default(&kind.mlx());
    Ok(kind)
}
