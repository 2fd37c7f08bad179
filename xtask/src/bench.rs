//! `cargo xtask bench <what>`: runs a benchmark that measures its own reference in the same
//! run, and keeps its JSON line under `bench/runs/<date>-<host>/`.
use std::fs;
use std::process::Stdio;

use anyhow::{bail, Context, Result};

use crate::cargo;

pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("mlx") => mlx(&args[1..]),
        Some("serve") => serve(&args[1..]),
        Some("gguf") => crate::bench_gguf::run(&args[1..]),
        Some("cpu") => crate::bench_cpu::run(&args[1..]),
        Some("gpu") => crate::bench_gpu::run(&args[1..]),
        Some("stream") => stream(&args[1..]),
        Some("invariance") => cargo_bench("gmlx-models", "invariance", "invariance", &args[1..]),
        Some("train-attention") => cargo_bench(
            "gmlx-models",
            "train_attention",
            "train-attention",
            &args[1..],
        ),
        other => bail!(
            "usage: cargo xtask bench mlx [--size N --reps R] \
             | serve [--tokens N --streams 1,2,4,8 --threads N --rounds N] \
             | gguf FILE|SHAPE [--prompt N --decode N --threads N] \
             | cpu [FILE] [--rounds N --threads N] \
             | gpu [--types T,.. --depth N --gmlx BIN --llama-cpp DIR --python PY] \
             | stream [--arena-mb N --tokens N --prompt N] | invariance \
             | train-attention [--tokens N --heads N --kv-heads N --dim N --device D] (got {other:?})"
        ),
    }
}

/// MLX CPU matmul GFLOP/s, BLAS in use next to the wheel's reference BLAS.
fn mlx(extra: &[String]) -> Result<()> {
    cargo_bench("gmlx-mlx", "matmul", "mlx-matmul", extra)
}

/// Aggregate decode tok/s of gmlx-serve's engine at 1, 2, 4 and 8 concurrent streams, then
/// of `gmlx-server` next to llama.cpp's `llama-server` over HTTP.
fn serve(extra: &[String]) -> Result<()> {
    cargo_bench("gmlx-serve", "serve", "serve", extra)?;
    crate::bench_serve::run(extra)
}

/// Decode tok/s, bytes read per token and the arena's hit rate of an MoE-shaped random file
/// (432 MiB of experts) resident, streamed through an arena, and read through the page cache
/// every step; the file is written once into `<cache>/bench/`.
fn stream(extra: &[String]) -> Result<()> {
    let refs = crate::setup::run()?;
    let file = crate::bench_gguf::model_file("qwen3moe-stream", &refs.llama_cpp, &refs.python)?;
    let mut args = vec!["--file".to_owned(), file.display().to_string()];
    args.extend(extra.iter().cloned());
    let arena = extra
        .iter()
        .position(|a| a == "--arena-mb")
        .and_then(|i| extra.get(i + 1))
        .map_or("96", String::as_str);
    cargo_bench(
        "gmlx-stream",
        "stream",
        &format!("stream-arena{arena}mb"),
        &args,
    )
}

/// Runs `cargo bench -p package --bench bench -- extra`, echoes its output and saves its
/// `json: ` line as `<name>.json`.
fn cargo_bench(package: &str, bench: &str, name: &str, extra: &[String]) -> Result<()> {
    let output = cargo()
        .args(["bench", "-p", package, "--bench", bench, "--"])
        .args(extra)
        .stderr(Stdio::inherit())
        .output()
        .context("run cargo bench")?;
    let text = String::from_utf8_lossy(&output.stdout);
    print!("{text}");
    if !output.status.success() {
        bail!("the {bench} benchmark of {package} failed");
    }
    if let Some(json) = text.lines().find_map(|l| l.strip_prefix("json: ")) {
        save(name, json)?;
    }
    Ok(())
}

pub(crate) fn save(name: &str, json: &str) -> Result<()> {
    let date = std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()?;
    let date = String::from_utf8_lossy(&date.stdout).trim().to_owned();
    let host = fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
    // GMLX_BENCH_RUNS: another folder for the runs (an xtask binary run away from its checkout)
    let runs = std::env::var_os("GMLX_BENCH_RUNS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::setup::workspace_root().join("bench/runs"));
    let dir = runs.join(format!("{date}-{}", host.trim()));
    fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.json"));
    fs::write(&path, format!("{json}\n"))?;
    println!("saved {}", path.display());
    Ok(())
}
