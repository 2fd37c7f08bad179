//! `cargo xtask bench gguf FILE|SHAPE [--prompt N] [--decode N] [--threads N]`: prefill and
//! decode throughput of `gmlx run --bench` (release build) next to llama.cpp's `llama-bench`
//! on the same file, measured in the same run, then gmlx's prefill again in batch-invariant
//! mode (`GMLX_BATCH_INVARIANT=1`). SHAPE (`qwen35-9b`) is a random-weight file written once
//! into `<cache>/bench/` by `tools/bench/random_gguf.py` (speed only, outputs meaningless).
//! The JSON line is kept under `bench/runs/<date>-<host>/gguf-<name>.json`.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{cargo, fixtures, run_command, setup};

/// The shapes `tools/bench/random_gguf.py` writes.
const SHAPES: &[&str] = &["qwen35-9b", "qwen3moe-stream"];

/// Where the random files' tokenizer comes from (any byte-level BPE GGUF does; this one is in
/// the repository, so the device machine writes the same file).
const TOKENIZER_SOURCE: &str = "tests/fixtures/qwen35/qwen35-Q8_0.gguf";

struct Options {
    target: String,
    prompt: usize,
    decode: usize,
    threads: usize,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut target = None;
    let mut prompt = 512;
    let mut decode = 128;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut number = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name} takes a count"))
        };
        match a.as_str() {
            "--prompt" => prompt = number("--prompt")?,
            "--decode" => decode = number("--decode")?,
            "--threads" => threads = number("--threads")?,
            other if target.is_none() && !other.starts_with('-') => target = Some(other.to_owned()),
            other => bail!("unexpected argument {other:?}"),
        }
    }
    Ok(Options {
        target: target.context(
            "usage: cargo xtask bench gguf FILE|SHAPE [--prompt N --decode N --threads N]",
        )?,
        prompt,
        decode,
        threads,
    })
}

/// The file to measure: a path, or a random-weight file of a known shape written once.
pub(crate) fn model_file(target: &str, sources: &Path, python: &Path) -> Result<PathBuf> {
    let path = PathBuf::from(target);
    if path.is_file() {
        return Ok(path);
    }
    if !SHAPES.contains(&target) {
        bail!(
            "{target}: no such file, and not a known shape ({})",
            SHAPES.join(", ")
        );
    }
    let dir = gmlx_cache::dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{target}-Q4_K.gguf"));
    if !file.is_file() {
        let partial = file.with_extension("partial");
        eprintln!(
            "xtask: writing {} (random weights, a few GB)",
            file.display()
        );
        run_command(
            Command::new(python)
                .arg(setup::workspace_root().join("tools/bench/random_gguf.py"))
                .arg(target)
                .arg(&partial)
                .arg("--vocab-from")
                .arg(setup::workspace_root().join(TOKENIZER_SOURCE))
                .env("PYTHONPATH", sources.join("gguf-py")),
        )?;
        std::fs::rename(&partial, &file)?;
    }
    Ok(file)
}

/// `llama-bench` of the CPU build (built when missing).
pub(crate) fn llama_bench(sources: &Path) -> Result<PathBuf> {
    llama_cpp_tool(sources, "llama-bench", &[])
}

/// The llama.cpp program `name` of the CPU build (its CMake target built when missing, after
/// configuring the build again with `options` when there are any).
pub(crate) fn llama_cpp_tool(sources: &Path, name: &str, options: &[&str]) -> Result<PathBuf> {
    let bin = fixtures::llama_cpp_build(&gmlx_cache::dir(), sources)?;
    let exe = bin.join(name);
    if !exe.is_file() {
        let build = bin.parent().context("llama.cpp build")?;
        if !options.is_empty() {
            run_command(
                Command::new("cmake")
                    .arg("-S")
                    .arg(sources)
                    .arg("-B")
                    .arg(build)
                    .args(options),
            )?;
        }
        run_command(
            Command::new("cmake")
                .arg("--build")
                .arg(build)
                .args(["--target", name]),
        )?;
    }
    Ok(exe)
}

/// llama.cpp's prefill and decode tokens per second.
fn run_llama(exe: &Path, file: &Path, o: &Options) -> Result<(f64, f64)> {
    let (prompt, decode) = (o.prompt.to_string(), o.decode.to_string());
    let rows = llama_bench_rows(exe, file, &["-p", &prompt, "-n", &decode], o.threads)?;
    let rate = |prompt: bool| -> Result<f64> {
        rows.iter()
            .find(|r| (r["n_prompt"].as_u64().unwrap_or(0) > 0) == prompt)
            .and_then(|r| r["avg_ts"].as_f64())
            .context("llama-bench row")
    };
    Ok((rate(true)?, rate(false)?))
}

/// `gmlx` built in release, its path.
pub(crate) fn release_gmlx() -> Result<PathBuf> {
    release_binary("gmlx-cli", "gmlx")
}

/// The binary `name` of `package`, built in release, its path.
pub(crate) fn release_binary(package: &str, name: &str) -> Result<PathBuf> {
    run_command(cargo().args(["build", "--release", "-p", package]))?;
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| setup::workspace_root().join("target"));
    Ok(target_dir.join("release").join(name))
}

/// The JSON rows of one `llama-bench` run on `file` (`-r 1`, `threads` threads) with `tests`
/// (`-p ... -n ...`). Where llama-bench dies of a signal, it runs again with `--repack 0`
/// (no extra CPU buffer types): a processor that advertises AMX inside a VM that does not let
/// programs use it kills the AMX kernels of a native build with SIGILL. Each row's `repack`
/// field records which run it came from.
pub(crate) fn llama_bench_rows(
    exe: &Path,
    file: &Path,
    tests: &[&str],
    threads: usize,
) -> Result<Vec<serde_json::Value>> {
    let run = |extra: &[&str]| {
        Command::new(exe)
            .arg("-m")
            .arg(file)
            .args(tests)
            .args(["-r", "1", "-t", &threads.to_string(), "-o", "json"])
            .args(extra)
            .env("LD_LIBRARY_PATH", exe.parent().context("bin")?)
            .output()
            .context("run llama-bench")
    };
    let mut out = run(&[])?;
    if out.status.code().is_none() {
        eprintln!(
            "xtask: llama-bench died of a signal ({}); again with --repack 0 (no extra CPU \
             buffer types, AMX among them)",
            out.status
        );
        out = run(&["--repack", "0"])?;
    }
    if !out.status.success() {
        bail!(
            "llama-bench failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rows: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("llama-bench JSON")?;
    match rows {
        serde_json::Value::Array(rows) => Ok(rows),
        _ => bail!("llama-bench rows: not a JSON array"),
    }
}

/// gmlx's prefill and decode tokens per second, from its `--bench` table.
fn run_gmlx(exe: &Path, file: &Path, o: &Options, invariant: bool) -> Result<(f64, f64)> {
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg(file)
        .args(["--bench", &o.prompt.to_string()])
        .args(["--bench-decode", &o.decode.to_string()]);
    if invariant {
        cmd.env("GMLX_BATCH_INVARIANT", "1");
    } else {
        cmd.env_remove("GMLX_BATCH_INVARIANT");
    }
    let out = cmd.output().context("run gmlx")?;
    if !out.status.success() {
        bail!("gmlx failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let row: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let v: Vec<f64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            (v.len() == 4).then_some(v)
        })
        .next_back()
        .with_context(|| format!("no --bench row in: {text}"))?;
    Ok((row[1], row[3]))
}

pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let refs = setup::run()?;
    let sources = refs.llama_cpp.clone();
    let file = model_file(&o.target, &sources, &refs.python)?;
    let llama = llama_bench(&sources)?;
    let gmlx = release_gmlx()?;

    eprintln!(
        "xtask: llama-bench -p {} -n {} -t {}",
        o.prompt, o.decode, o.threads
    );
    let (l_pre, l_dec) = run_llama(&llama, &file, &o)?;
    eprintln!(
        "xtask: gmlx run --bench {} --bench-decode {}",
        o.prompt, o.decode
    );
    let (g_pre, g_dec) = run_gmlx(&gmlx, &file, &o, false)?;
    eprintln!("xtask: the same with GMLX_BATCH_INVARIANT=1");
    let (i_pre, _) = run_gmlx(&gmlx, &file, &o, true)?;

    let name = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    println!(
        "{name}: prompt {} tokens, decode {} tokens, {} threads",
        o.prompt, o.decode, o.threads
    );
    println!("                    prefill tok/s   decode tok/s");
    println!("llama.cpp           {l_pre:>13.2}   {l_dec:>12.2}");
    println!("gmlx                {g_pre:>13.2}   {g_dec:>12.2}");
    println!(
        "gmlx / llama.cpp    {:>13.3}   {:>12.3}",
        g_pre / l_pre,
        g_dec / l_dec
    );
    println!(
        "batch-invariant prefill {i_pre:.2} tok/s: {:+.1}% prefill time",
        (g_pre / i_pre - 1.0) * 100.0
    );
    let json = serde_json::json!({
        "bench": "gguf", "file": name, "prompt": o.prompt, "decode": o.decode,
        "llama_cpp_threads": o.threads,
        "llama_cpp": {"prefill_tok_s": l_pre, "decode_tok_s": l_dec},
        "gmlx": {"prefill_tok_s": g_pre, "decode_tok_s": g_dec},
        "gmlx_batch_invariant": {"prefill_tok_s": i_pre},
    });
    println!("json: {json}");
    crate::bench::save(&format!("gguf-{name}"), &json.to_string())
}
