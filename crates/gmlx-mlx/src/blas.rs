//! Which BLAS serves MLX's CPU matmul in this process.
//!
//! The MLX wheel bundles reference (netlib) BLAS; our mlx-sys links OpenBLAS ahead of it when
//! OpenBLAS is installed, so its `cblas_sgemm` wins symbol resolution. What actually happened
//! is read back from the loader, not assumed from the build.
use std::ffi::{c_char, CStr};

use crate::runtime::library_of;

/// The BLAS the build linked ahead of MLX's bundled one: `openblas` or `reference`.
pub const BUILD_BLAS: &str = env!("GMLX_MLX_BUILD_BLAS");

/// The kind of BLAS that resolved `cblas_sgemm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlasKind {
    OpenBlas,
    /// The netlib reference BLAS bundled in the MLX wheel.
    Reference,
    Other,
    /// No `cblas_sgemm` in the process (a GPU-only MLX build).
    None,
}

/// The BLAS in use, as the dynamic loader resolved it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BlasInfo {
    pub kind: BlasKind,
    /// The shared library that provides `cblas_sgemm`.
    pub library: Option<String>,
    /// OpenBLAS's own configuration line (version, core type, threads), when it is OpenBLAS.
    pub config: Option<String>,
}

/// Reads which library provides `cblas_sgemm` in this process.
pub fn blas_info() -> BlasInfo {
    crate::init();
    let library = library_of(c"cblas_sgemm");
    let config = openblas_config();
    let kind = match (&library, &config) {
        (None, _) => BlasKind::None,
        (Some(path), _) if file_name(path).starts_with("libblas-") => BlasKind::Reference,
        (Some(path), _) if file_name(path).contains("openblas") => BlasKind::OpenBlas,
        (Some(_), Some(_)) if library_of(c"openblas_get_config") == library => BlasKind::OpenBlas,
        _ => BlasKind::Other,
    };
    BlasInfo {
        kind,
        library,
        config,
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn openblas_config() -> Option<String> {
    // SAFETY: when present, openblas_get_config has signature `char *(void)` and returns a
    // static string.
    unsafe {
        let f = libc::dlsym(libc::RTLD_DEFAULT, c"openblas_get_config".as_ptr());
        if f.is_null() {
            return None;
        }
        let get: extern "C" fn() -> *const c_char = std::mem::transmute(f);
        let s = get();
        (!s.is_null()).then(|| CStr::from_ptr(s).to_string_lossy().trim().to_owned())
    }
}
