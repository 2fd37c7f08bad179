//! `cargo xtask fixtures [ARCH...]`: tiny random-weight models of each architecture, converted
//! and quantized by llama.cpp, with llama.cpp's (and transformers') goldens, written to
//! `tests/fixtures/<arch>/`. The work is done by `tools/fixtures/pipeline.py`; this verb prepares
//! what it needs and runs it (docs/fixtures.md):
//! - a venv with `tools/fixtures/requirements.txt` (`<cache>/fixture-venv`);
//! - llama.cpp's sources from the `llama-cpp-python` sdist (as `cargo xtask setup` fetches them);
//! - a CPU build of llama.cpp with `llama-quantize` and the shared `libllama.so`
//!   (`GMLX_LLAMA_CPP_BUILD`, default `<cache>/llama.cpp-build`), built with cmake if absent.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{run_command, setup};

pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage: cargo xtask fixtures [ARCH...]   (default: every architecture)");
        println!("architectures: see ARCHES in tools/fixtures/build_model.py and WRITERS in tools/fixtures/write_gguf.py");
        return Ok(());
    }
    let root = setup::workspace_root();
    let cache = gmlx_cache::dir();
    fs::create_dir_all(&cache).with_context(|| format!("create {}", cache.display()))?;
    let sources = setup::run()?.llama_cpp;
    let python = fixture_venv(&root, &cache)?;
    let bin = llama_cpp_build(&cache, &sources)?;
    // <sdist>/vendor/llama.cpp -> <sdist>, where the `llama_cpp` binding package lives
    let sdist = sources
        .parent()
        .and_then(Path::parent)
        .context("llama.cpp sources are not inside an sdist")?;
    let mut cmd = Command::new(&python);
    cmd.arg(root.join("tools/fixtures/pipeline.py"))
        .arg("--out")
        .arg(root.join("tests/fixtures"))
        .args(args)
        .env("LLAMA_CPP_DIR", &sources)
        .env("LLAMA_CPP_BIN", &bin)
        .env("LLAMA_CPP_LIB_PATH", &bin)
        .env("PYTHONPATH", sdist)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("USE_HUB_KERNELS", "0");
    run_command(&mut cmd)
}

/// `<cache>/fixture-venv` with the pinned fixture tooling (torch, transformers: a few GB).
fn fixture_venv(root: &Path, cache: &Path) -> Result<PathBuf> {
    setup::pinned_venv(
        &root.join("tools/fixtures/requirements.txt"),
        &cache.join("fixture-venv"),
        "the fixture venv (torch, transformers: a few GB, about a minute)",
    )
}

/// A llama.cpp build's `bin/` holding `llama-quantize` and `libllama.so`; configured and built
/// with cmake (CPU, Release, shared libraries) when they are missing.
pub(crate) fn llama_cpp_build(cache: &Path, sources: &Path) -> Result<PathBuf> {
    let build = std::env::var_os("GMLX_LLAMA_CPP_BUILD")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("llama.cpp-build"));
    let bin = build.join("bin");
    let ready =
        |bin: &Path| bin.join("llama-quantize").is_file() && bin.join("libllama.so").is_file();
    if ready(&bin) {
        return Ok(bin);
    }
    if Command::new("cmake").arg("--version").output().is_err() {
        bail!(
            "no llama.cpp build in {} and no cmake to make one: install cmake and a C++ compiler \
             (apt-get install cmake g++) or point GMLX_LLAMA_CPP_BUILD at a build with \
             bin/llama-quantize and bin/libllama.so",
            build.display()
        );
    }
    eprintln!(
        "xtask: building llama.cpp (llama-quantize, libllama.so) in {}: about 15 minutes on 2 cores",
        build.display()
    );
    if !build.join("CMakeCache.txt").is_file() {
        run_command(
            Command::new("cmake")
                .arg("-S")
                .arg(sources)
                .arg("-B")
                .arg(&build)
                .args([
                    "-DCMAKE_BUILD_TYPE=Release",
                    "-DBUILD_SHARED_LIBS=ON",
                    "-DLLAMA_CURL=OFF",
                    "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF",
                    "-DLLAMA_BUILD_SERVER=OFF",
                ]),
        )?;
    }
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    run_command(
        Command::new("cmake")
            .arg("--build")
            .arg(&build)
            .arg(format!("-j{jobs}"))
            .args(["--target", "llama", "llama-quantize"]),
    )?;
    if !ready(&bin) {
        bail!(
            "the llama.cpp build finished without {}/llama-quantize and libllama.so",
            bin.display()
        );
    }
    Ok(bin)
}
