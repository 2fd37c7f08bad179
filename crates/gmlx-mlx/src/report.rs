//! Everything `gmlx env` reports, gathered in one value.
use std::fmt;

use crate::blas::{self, BlasInfo};
use crate::device::{self, DeviceChoice, DeviceKind};
use crate::error::Result;
use crate::memory::{self, MemoryStats};
use crate::precision::Precision;
use crate::runtime::{self, Backend, DeviceInfo};

/// The MLX runtime as this process sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Environment {
    /// Version of the loaded libmlx.
    pub mlx_version: String,
    /// Version the workspace was built against.
    pub build_mlx_version: &'static str,
    pub backend: Backend,
    pub libmlx: Option<String>,
    /// What `--device auto` resolves to.
    pub default_device: DeviceKind,
    pub devices: Vec<DeviceInfo>,
    pub blas: BlasInfo,
    pub precision: Precision,
    pub memory: MemoryStats,
}

impl Environment {
    pub fn read() -> Result<Self> {
        let precision = crate::init();
        Ok(Self {
            mlx_version: runtime::mlx_version()?,
            build_mlx_version: runtime::BUILD_MLX_VERSION,
            backend: runtime::backend()?,
            libmlx: runtime::libmlx_path(),
            default_device: device::resolve(DeviceChoice::Auto)?,
            devices: runtime::devices()?,
            blas: blas::blas_info(),
            precision,
            memory: memory::stats()?,
        })
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "mlx        {} (built against {})",
            self.mlx_version, self.build_mlx_version
        )?;
        writeln!(f, "backend    {}", self.backend)?;
        writeln!(
            f,
            "libmlx     {}",
            self.libmlx.as_deref().unwrap_or("(not found)")
        )?;
        writeln!(f, "device     {:?} (auto)", self.default_device)?;
        for d in &self.devices {
            let props: Vec<String> = d
                .properties
                .iter()
                .map(|(k, v)| match k.as_str() {
                    "memory_size" => match v.parse::<usize>() {
                        Ok(b) => format!("{k}={}", mib(b)),
                        Err(_) => format!("{k}={v}"),
                    },
                    _ => format!("{k}={v}"),
                })
                .collect();
            writeln!(f, "  {}:{}  {}", d.kind, d.index, props.join(", "))?;
        }
        let blas_kind = match self.blas.kind {
            blas::BlasKind::OpenBlas => "OpenBLAS",
            blas::BlasKind::Reference => "reference BLAS (bundled with MLX)",
            blas::BlasKind::Other => "other",
            blas::BlasKind::None => "none",
        };
        writeln!(
            f,
            "blas       {blas_kind}: {}",
            self.blas.library.as_deref().unwrap_or("-")
        )?;
        if let Some(config) = &self.blas.config {
            writeln!(f, "           {config}")?;
        }
        writeln!(
            f,
            "float32    TF32 {} ({})",
            if self.precision.tf32 { "on" } else { "off" },
            if self.precision.from_environment {
                "MLX_ENABLE_TF32 set"
            } else {
                "gmlx default"
            }
        )?;
        write!(
            f,
            "memory     active {}, peak {}, cache {}, limit {}",
            mib(self.memory.active_bytes),
            mib(self.memory.peak_bytes),
            mib(self.memory.cache_bytes),
            mib(self.memory.limit_bytes)
        )
    }
}
