//! Helpers shared by the CLI's end-to-end tests: running the binary, its stderr, the default
//! model, scratch folders, the refusal shape.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the `gmlx` binary with `args`.
pub fn gmlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gmlx"))
        .args(args)
        .output()
        .expect("run gmlx")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The default model's path (fetched once).
pub fn default_model() -> String {
    gmlx_models::default_model::fetch()
        .expect("the default model")
        .display()
        .to_string()
}

/// A fresh, empty scratch folder for one test of the binary `suite`.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gmlx-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    dir
}

/// Exit code 2, a one-line message containing `needle`.
pub fn assert_refused(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
}
