//! The gmlx cache directory, resolved as crates/mlx-sys/build.rs resolves it.
use std::path::PathBuf;

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
