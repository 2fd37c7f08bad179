//! The float32 precision policy.
//!
//! On CUDA, MLX runs float32 matmuls in TF32 unless `MLX_ENABLE_TF32=0` (about 1e-3 relative
//! error), and reads that variable once, at the first matmul. gmlx wants float32 to mean
//! float32, so [`apply`] sets it to `0` before any MLX work unless the user set it already.

/// The environment variable MLX reads.
pub const TF32_VAR: &str = "MLX_ENABLE_TF32";

/// Whether float32 matmuls may use TF32, and who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Precision {
    pub tf32: bool,
    /// True when the user set `MLX_ENABLE_TF32`; false when it is gmlx's default (off).
    pub from_environment: bool,
}

/// Applies the policy (idempotent; called by [`crate::init`]).
pub(crate) fn apply() -> Precision {
    match std::env::var(TF32_VAR) {
        Ok(value) => Precision {
            tf32: value.trim() != "0" && !value.trim().is_empty(),
            from_environment: true,
        },
        Err(_) => {
            // Runs once, from init(), before any MLX call and before gmlx starts threads.
            std::env::set_var(TF32_VAR, "0");
            Precision {
                tf32: false,
                from_environment: false,
            }
        }
    }
}
