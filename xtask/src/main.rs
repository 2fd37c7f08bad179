//! Developer automation: `cargo xtask <verb>`.
//!
//! - `setup`: the test references (a Python venv with the pinned tools, llama.cpp's sources).
//! - `test [ARGS...]`: `setup`, then `cargo test --workspace ARGS...` with the references found,
//!   then `examples/embed` (an application outside the workspace) built and run.
//! - `lint`: `cargo fmt --check` and `cargo clippy --all-targets -- -D warnings`.
//! - `bench mlx`: MLX CPU matmul GFLOP/s with the BLAS in use next to the wheel's reference BLAS.
//! - `bench gguf FILE|SHAPE`: `gmlx run --bench` next to llama.cpp's `llama-bench` on one file.
//! - `bench cpu [FILE]`: the CPU side by side with llama.cpp, alternating, with memory bandwidth.
mod bench;
mod bench_cpu;
mod bench_gguf;
mod bench_gpu;
mod bench_serve;
mod certify;
mod fixtures;
mod setup;

use anyhow::{bail, Result};
use std::process::Command;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verb = args.first().map(String::as_str).unwrap_or("help");
    let rest = &args[args.len().min(1)..];
    match verb {
        "setup" => setup::run().map(|refs| refs.print()),
        "test" => test(rest),
        "lint" => lint(),
        "bench" => bench::run(rest),
        "fixtures" => fixtures::run(rest),
        "certify" => certify::run(),
        "help" | "--help" | "-h" => {
            println!(
                "usage: cargo xtask <setup | test [ARGS] | lint | bench mlx | fixtures [ARCH...] | certify>"
            );
            Ok(())
        }
        other => bail!("unknown xtask verb {other:?} (try `cargo xtask help`)"),
    }
}

fn test(args: &[String]) -> Result<()> {
    let refs = setup::run()?;
    let mut cmd = cargo();
    cmd.args(["test", "--workspace"]).args(args);
    refs.apply(&mut cmd);
    run_command(&mut cmd)?;
    embed_example()
}

/// Builds and runs `examples/embed`, an application outside the workspace that embeds
/// gmlx-models with the recipe of docs/embedding.md (it shares the target directory, so it
/// costs little): the recipe cannot rot.
fn embed_example() -> Result<()> {
    // the checkout this run is in, not the one a reused xtask binary was built in
    let manifest = setup::workspace_root().join("examples/embed/Cargo.toml");
    eprintln!("xtask: building and running {}", manifest.display());
    let out = cargo()
        .args(["run", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("examples/embed failed ({}): {text}", out.status);
    }
    // llama.cpp's greedy continuation of the prompt on the default model
    if !text.starts_with(" Paris.") {
        bail!("examples/embed printed {text:?}, expected llama.cpp's \" Paris.\"");
    }
    eprintln!("xtask: examples/embed: ok ({:?})", text.trim_end());
    Ok(())
}

fn lint() -> Result<()> {
    run_command(cargo().args(["fmt", "--all", "--check"]))?;
    run_command(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
}

pub(crate) fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

pub(crate) fn run_command(cmd: &mut Command) -> Result<()> {
    let status = cmd.status()?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}
