//! The MLX layer of gmlx: the only crate that makes raw `mlx-sys` calls.
//!
//! It re-exports the mlx-rs types the rest of the workspace uses, picks the device, applies
//! the float32 precision policy, and reports what runtime, BLAS and memory are in use.
//!
//! ```
//! use gmlx_mlx::{device, Array};
//!
//! let kind = device::use_device(device::DeviceChoice::Auto)?; // GPU if MLX has one
//! let a = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
//! let b = a.matmul(&a)?;
//! b.eval()?;
//! assert_eq!(b.as_slice::<f32>(), &[7.0, 10.0, 15.0, 22.0]);
//! println!("on {kind:?}: {}", gmlx_mlx::report::Environment::read()?);
//! # Ok::<(), gmlx_mlx::Error>(())
//! ```
pub mod blas;
pub mod cache_check;
pub mod checkpoint;
mod closure;
pub mod cpu_attend;
pub mod cpu_qmm;
pub mod cuda_attention;
mod cuda_kernel;
pub mod cuda_layer;
pub mod cuda_q6k;
pub mod cuda_qmv;
pub mod cuda_warm;
pub mod custom_vjp;
pub mod device;
mod error;
mod kept;
pub mod memory;
pub mod owned;
pub mod precision;
pub mod qmm;
pub mod quant;
pub mod report;
pub mod runtime;
pub mod slicing;
pub mod threads;

pub use error::{Error, Result};
pub use mlx_rs::{self, fast, ops, Array, Dtype};
pub use quant::{QuantWeight, Storage};

use std::sync::OnceLock;

static PRECISION: OnceLock<precision::Precision> = OnceLock::new();

/// Prepares the process for MLX: applies the precision policy and turns MLX's cache-thrashing
/// abort off ([`cache_check`]) before MLX first reads them, and
/// installs mlx-rs's error handler so failing raw mlx-c calls return codes instead of exiting.
/// Every entry point of this crate calls it; applications may call it first thing in `main`.
pub fn init() -> precision::Precision {
    *PRECISION.get_or_init(|| {
        let policy = precision::apply();
        cache_check::apply();
        // Any mlx-rs call that checks a status registers its error handler once.
        let _ = mlx_rs::Device::try_default();
        policy
    })
}
