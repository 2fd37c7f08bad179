//! The references tests compare against, fetched once into the cache directory:
//! - a Python venv with `xtask/python-requirements.txt` (`GMLX_PYTHON`);
//! - llama.cpp's sources from the `llama-cpp-python` sdist on PyPI (`GMLX_LLAMA_CPP`): its
//!   tokenizer test suite, chat templates and converter;
//! - the default model (SmolLM2-135M-Instruct Q4_1), which the real-model tests read.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::run_command;

const LLAMA_CPP_PYTHON: &str = "0.3.36";
const LLAMA_CPP_PYTHON_SHA256: &str =
    "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";

pub struct References {
    pub python: PathBuf,
    pub llama_cpp: PathBuf,
}

impl References {
    pub fn apply(&self, cmd: &mut Command) {
        cmd.env("GMLX_PYTHON", &self.python);
        cmd.env("GMLX_LLAMA_CPP", &self.llama_cpp);
    }

    pub fn print(&self) {
        println!("GMLX_PYTHON={}", self.python.display());
        println!("GMLX_LLAMA_CPP={}", self.llama_cpp.display());
    }
}

pub fn run() -> Result<References> {
    let cache = gmlx_cache::dir();
    fs::create_dir_all(&cache).with_context(|| format!("create {}", cache.display()))?;
    let references = References {
        python: python_env(&cache)?,
        llama_cpp: llama_cpp_sources(&cache)?,
    };
    // fetched here once, so the tests that read it never download it concurrently
    gmlx_cache::default_model::fetch()?;
    Ok(references)
}

pub fn workspace_root() -> PathBuf {
    // `cargo run` sets it at run time too: a binary reused from a build in another checkout
    // (shared target dir) still finds this one.
    let manifest_dir =
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    Path::new(&manifest_dir)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The test references' venv: `xtask/python-requirements.txt` in `<cache>/pyenv`.
fn python_env(cache: &Path) -> Result<PathBuf> {
    pinned_venv(
        &workspace_root().join("xtask/python-requirements.txt"),
        &cache.join("pyenv"),
        "the Python reference environment",
    )
}

/// A venv at `venv` with the pinned `requirements`; reinstalled when that file changes (its
/// content is kept in the venv as a stamp). Returns the venv's python.
pub fn pinned_venv(requirements: &Path, venv: &Path, what: &str) -> Result<PathBuf> {
    let wanted = fs::read_to_string(requirements)
        .with_context(|| format!("read {}", requirements.display()))?;
    let python = venv.join("bin/python");
    let stamp = venv.join("gmlx-requirements.txt");
    if python.is_file() && fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(python);
    }
    if !python.is_file() {
        eprintln!("xtask: creating {what} in {}", venv.display());
        run_command(Command::new("python3").arg("-m").arg("venv").arg(venv))
            .context("python3 -m venv failed: a Python 3.10+ with the venv module is needed")?;
    }
    eprintln!("xtask: installing {}", requirements.display());
    run_command(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "-r"])
            .arg(requirements),
    )?;
    fs::write(&stamp, wanted)?;
    Ok(python)
}

/// `vendor/llama.cpp` of the hash-checked `llama-cpp-python` sdist.
fn llama_cpp_sources(cache: &Path) -> Result<PathBuf> {
    let root = cache.join(format!("llama-cpp-python-{LLAMA_CPP_PYTHON}"));
    let tree = root.join("vendor/llama.cpp");
    if tree.join("models").is_dir() {
        return Ok(tree);
    }
    let work = cache.join(format!(".sdist-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    let req = work.join("req.txt");
    fs::write(
        &req,
        format!("llama-cpp-python=={LLAMA_CPP_PYTHON} --hash=sha256:{LLAMA_CPP_PYTHON_SHA256}\n"),
    )?;
    eprintln!("xtask: downloading llama-cpp-python {LLAMA_CPP_PYTHON} (llama.cpp sources, 77 MB)");
    run_command(
        Command::new("python3")
            // the sdist of llama-cpp-python alone: `:all:` would also build its build tools
            // (cmake among them) from source to read its metadata, minutes on a cold machine
            .args(["-m", "pip", "download", "--no-deps"])
            .args(["--no-binary", "llama-cpp-python", "--require-hashes", "-r"])
            .arg(&req)
            .arg("-d")
            .arg(&work),
    )?;
    let archive = fs::read_dir(&work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .context("pip left no sdist")?;
    let unpacked = work.join("unpacked");
    fs::create_dir_all(&unpacked)?;
    run_command(
        Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&unpacked)
            .arg("--strip-components=1"),
    )?;
    if !unpacked.join("vendor/llama.cpp/models").is_dir() {
        bail!("{} has no vendor/llama.cpp/models", archive.display());
    }
    let _ = fs::remove_dir_all(&root);
    fs::rename(&unpacked, &root)?;
    let _ = fs::remove_dir_all(&work);
    Ok(tree)
}
