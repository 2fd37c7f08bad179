//! `cargo xtask bench gpu [--types T,..] [--depth N] [--rounds N] [--no-small]
//! [--gmlx BIN] [--llama-cpp DIR]`, on a machine with an NVIDIA GPU: llama.cpp's
//! `llama-bench` (the pinned sdist built once with CUDA into `<cache>/llama.cpp-cuda-build`)
//! and `gmlx run --device gpu --dtype bfloat16 --bench` on the same Llama-3-8B-shaped random
//! files (one per codec, written once into `<cache>/bench/` by `tools/bench/random_gguf.py`),
//! in the same run: pp512, tg128 and tg128 at depth `--depth` (for Q4_0 and Q4_K), their
//! ratios and the weight bytes each decode reads per second. llama-bench averages 3 repetitions; gmlx runs `--rounds` times (3), each a new
//! process, and each cell is the median (one process's decode rate varied by up to 1.5x on an
//! H100). gmlx's decode also runs with host sampling (`GMLX_DEVICE_SAMPLING=0`) on the
//! first file, for the decode loop's share. The JSON line is kept under
//! `bench/runs/<date>-<host>/gpu-llama3-8b.json`. A SmolLM2-135M-shaped Q4_0 file (tied output
//! head) adds the small model's pp512 and tg128, where a decode step's time is its launches and
//! the host's work rather than its bytes (`--no-small` skips it).
//!
//! Where cargo cannot run (a rented GPU machine), the xtask binary built elsewhere runs the
//! same way given `--gmlx` (a gmlx binary) and `--llama-cpp` (the llama.cpp sources).
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{bench_gguf, run_command, setup};

const TYPES: &[&str] = &["Q4_0", "Q4_K", "Q6_K", "Q8_0", "IQ4_XS"];
/// The files whose decode is also measured after a long context.
const DEPTH_TYPES: &[&str] = &["Q4_0", "Q4_K"];
/// The small model's row: the decode whose time is the step's launches and host work.
const SMALL_SHAPE: &str = "smollm2-135m";
const SMALL_TYPE: &str = "Q4_0";
const TOKENIZER_SOURCE: &str = "tests/fixtures/qwen35/qwen35-Q8_0.gguf";

struct Options {
    types: Vec<String>,
    depth: usize,
    rounds: usize,
    gmlx: Option<PathBuf>,
    llama_cpp: Option<PathBuf>,
    python: Option<PathBuf>,
    /// Whether to measure the small model too (`--no-small` skips it).
    small: bool,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        types: TYPES.iter().map(|t| t.to_string()).collect(),
        depth: 8192,
        rounds: 3,
        gmlx: None,
        llama_cpp: None,
        python: None,
        small: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<String> {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--types" => {
                o.types = value("--types")?.split(',').map(str::to_owned).collect();
                if let Some(t) = o.types.iter().find(|t| !TYPES.contains(&t.as_str())) {
                    bail!("--types: {t} is not one of {}", TYPES.join(", "));
                }
            }
            "--depth" => o.depth = value("--depth")?.parse().context("--depth takes a count")?,
            "--rounds" => {
                o.rounds = value("--rounds")?
                    .parse()
                    .ok()
                    .filter(|&r| r > 0)
                    .context("--rounds takes a count above 0")?
            }
            "--gmlx" => o.gmlx = Some(value("--gmlx")?.into()),
            "--llama-cpp" => o.llama_cpp = Some(value("--llama-cpp")?.into()),
            "--python" => o.python = Some(value("--python")?.into()),
            "--no-small" => o.small = false,
            other => bail!(
                "unexpected argument {other:?}; usage: cargo xtask bench gpu [--types {}] \
                 [--depth N] [--rounds N] [--no-small] [--gmlx BIN] [--llama-cpp DIR] \
                 [--python PY]",
                TYPES.join(",")
            ),
        }
    }
    Ok(o)
}

/// `llama-bench` of the CUDA build (sm_90), built when missing.
fn cuda_llama_bench(sources: &Path) -> Result<PathBuf> {
    let build = gmlx_cache::dir().join("llama.cpp-cuda-build");
    let exe = build.join("bin/llama-bench");
    if exe.is_file() {
        return Ok(exe);
    }
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!(
        "xtask: building llama-bench with CUDA in {} (about 5 minutes on 16 cores)",
        build.display()
    );
    run_command(
        Command::new("cmake")
            .arg("-S")
            .arg(sources)
            .arg("-B")
            .arg(&build)
            .args([
                "-DCMAKE_BUILD_TYPE=Release",
                "-DGGML_CUDA=ON",
                "-DCMAKE_CUDA_ARCHITECTURES=90",
                "-DLLAMA_CURL=OFF",
                "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF",
                "-DLLAMA_BUILD_SERVER=OFF",
            ]),
    )?;
    run_command(Command::new("cmake").arg("--build").arg(&build).args([
        "-j",
        &jobs.to_string(),
        "--target",
        "llama-bench",
    ]))?;
    Ok(exe)
}

/// The random file of `shape` (a `random_gguf.py` shape) in `qtype`, written when missing.
fn model_file(shape: &str, qtype: &str, sources: &Path, python: &Path) -> Result<PathBuf> {
    let dir = gmlx_cache::dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{shape}-{qtype}.gguf"));
    if !file.is_file() {
        let partial = file.with_extension("partial");
        eprintln!("xtask: writing {} (random weights)", file.display());
        run_command(
            Command::new(python)
                .arg(setup::workspace_root().join("tools/bench/random_gguf.py"))
                .arg(shape)
                .arg(&partial)
                .arg("--vocab-from")
                .arg(setup::workspace_root().join(TOKENIZER_SOURCE))
                .args(["--type", qtype])
                .env("PYTHONPATH", sources.join("gguf-py")),
        )?;
        std::fs::rename(&partial, &file)?;
    }
    Ok(file)
}

/// llama.cpp's pp512, tg128 and (with `depth`) tg128 after `depth` tokens, tok/s.
fn llama(exe: &Path, file: &Path, depth: Option<usize>) -> Result<(f64, f64, Option<f64>)> {
    let depths = match depth {
        Some(d) => format!("0,{d}"),
        None => "0".into(),
    };
    let out = Command::new(exe)
        .arg("-m")
        .arg(file)
        .args(["-p", "512", "-n", "128", "-d", &depths])
        .args(["-ngl", "99", "-fa", "1", "-r", "3", "-o", "json"])
        .env("LD_LIBRARY_PATH", exe.parent().context("bin")?)
        .output()
        .context("run llama-bench")?;
    if !out.status.success() {
        bail!(
            "llama-bench failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).context("llama-bench JSON")?;
    let rate = |prompt: u64, gen: u64, at: u64| {
        rows.iter()
            .find(|r| {
                r["n_prompt"].as_u64() == Some(prompt)
                    && r["n_gen"].as_u64() == Some(gen)
                    && r["n_depth"].as_u64().unwrap_or(0) == at
            })
            .and_then(|r| r["avg_ts"].as_f64())
            .with_context(|| format!("no llama-bench row for pp{prompt} tg{gen} d{at}"))
    };
    let deep = match depth {
        Some(d) => Some(rate(0, 128, d as u64)?),
        None => None,
    };
    Ok((rate(512, 0, 0)?, rate(0, 128, 0)?, deep))
}

/// gmlx's rows `(prompt, prefill tok/s, decode tok/s)` for `prompts`: each cell the median of
/// `rounds` processes.
fn gmlx_median(
    exe: &Path,
    file: &Path,
    prompts: &[usize],
    host_sampling: bool,
    rounds: usize,
) -> Result<Vec<[f64; 3]>> {
    let runs = (0..rounds)
        .map(|_| gmlx(exe, file, prompts, host_sampling))
        .collect::<Result<Vec<_>>>()?;
    Ok((0..prompts.len())
        .map(|row| {
            let mut cell = [0.0; 3];
            for (c, v) in cell.iter_mut().enumerate() {
                let mut seen: Vec<f64> = runs.iter().map(|r| r[row][c]).collect();
                seen.sort_by(f64::total_cmp);
                *v = seen[seen.len() / 2];
            }
            cell
        })
        .collect())
}

/// One process's rows `(prompt, prefill tok/s, decode tok/s)` for `prompts`.
fn gmlx(exe: &Path, file: &Path, prompts: &[usize], host_sampling: bool) -> Result<Vec<[f64; 3]>> {
    let list: Vec<String> = prompts.iter().map(usize::to_string).collect();
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg(file)
        .args(["--device", "gpu", "--dtype", "bfloat16"])
        .args(["--bench", &list.join(","), "--bench-decode", "128"])
        .env_remove("GMLX_BATCH_INVARIANT");
    if host_sampling {
        cmd.env("GMLX_DEVICE_SAMPLING", "0");
    } else {
        cmd.env_remove("GMLX_DEVICE_SAMPLING");
    }
    let out = cmd.output().context("run gmlx")?;
    if !out.status.success() {
        bail!("gmlx failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    // the host's time per decode step (build, submit, wait), for the record
    for line in String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("gmlx: prompt"))
    {
        eprintln!(
            "  {} {line}",
            file.file_name().map_or("".into(), |n| n.to_string_lossy())
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<[f64; 3]> = text
        .lines()
        .filter_map(|l| {
            let v: Vec<f64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            (v.len() == 4).then(|| [v[0], v[1], v[3]])
        })
        .collect();
    if rows.len() != prompts.len() {
        bail!("expected {} --bench rows in: {text}", prompts.len());
    }
    Ok(rows)
}

fn gpu_name() -> String {
    Command::new("nvidia-smi")
        .args(["--query-gpu=name,memory.total", "--format=csv,noheader"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown GPU".into())
}

pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let (sources, python) = match (&o.llama_cpp, &o.python) {
        (Some(s), p) => (s.clone(), p.clone().unwrap_or_else(|| "python3".into())),
        (None, p) => {
            let refs = setup::run()?;
            (refs.llama_cpp.clone(), p.clone().unwrap_or(refs.python))
        }
    };
    if Path::new("/usr/local/cuda/bin").is_dir() {
        let path = std::env::var("PATH").unwrap_or_default();
        std::env::set_var("PATH", format!("/usr/local/cuda/bin:{path}"));
    }
    let gpu = gpu_name();
    let files = o
        .types
        .iter()
        .map(|t| Ok((t.clone(), model_file("llama3-8b", t, &sources, &python)?)))
        .collect::<Result<Vec<_>>>()?;
    let llama_exe = cuda_llama_bench(&sources)?;
    let gmlx_exe = match &o.gmlx {
        Some(g) => g.clone(),
        None => bench_gguf::release_gmlx()?,
    };
    let depth_prompt = o.depth.saturating_sub(192).max(1);

    let mut rows = Vec::new();
    let mut host_loop = None;
    for (i, (qtype, file)) in files.iter().enumerate() {
        let deep = DEPTH_TYPES.contains(&qtype.as_str()).then_some(o.depth);
        eprintln!("xtask: {qtype}: llama-bench -p 512 -n 128 -ngl 99 -fa 1 -r 3");
        let (l_pp, l_tg, l_deep) = llama(&llama_exe, file, deep)?;
        let prompts: Vec<usize> = match deep {
            Some(_) => vec![512, depth_prompt],
            None => vec![512],
        };
        eprintln!(
            "xtask: {qtype}: gmlx run --device gpu --bench {prompts:?}, {} rounds",
            o.rounds
        );
        let g = gmlx_median(&gmlx_exe, file, &prompts, false, o.rounds)?;
        if i == 0 {
            eprintln!("xtask: {qtype}: the same with GMLX_DEVICE_SAMPLING=0");
            let host = gmlx_median(&gmlx_exe, file, &[512], true, o.rounds)?;
            host_loop = Some((qtype.clone(), host[0][2]));
        }
        let bytes = std::fs::metadata(file)?.len() as f64;
        rows.push(serde_json::json!({
            "type": qtype, "file_bytes": bytes,
            "llama_cpp": {"pp512": l_pp, "tg128": l_tg, "tg128_deep": l_deep},
            "gmlx": {"pp512": g[0][1], "tg128": g[0][2], "tg128_deep": g.get(1).map(|r| r[2])},
        }));
    }

    println!(
        "Llama-3-8B shape, random weights, {gpu}; llama.cpp: flash attention, all layers on the \
         GPU; gmlx: bfloat16"
    );
    println!(
        "| file | GiB | llama.cpp pp512 | gmlx pp512 | ratio | llama.cpp tg128 | gmlx tg128 | \
         ratio | llama.cpp tg128 @{d} | gmlx @{d} | ratio | weights read GB/s (llama.cpp / gmlx) |",
        d = o.depth
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let f = |v: &serde_json::Value| v.as_f64().map_or("—".into(), |x| format!("{x:.1}"));
    let ratio = |a: &serde_json::Value, b: &serde_json::Value| match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "—".into(),
    };
    for r in &rows {
        let (l, g) = (&r["llama_cpp"], &r["gmlx"]);
        let bytes = r["file_bytes"].as_f64().unwrap_or(0.0);
        let read = |v: &serde_json::Value| v.as_f64().map_or(0.0, |t| bytes * t / 1e9);
        println!(
            "| {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} / {:.0} |",
            r["type"].as_str().unwrap_or(""),
            bytes / (1u64 << 30) as f64,
            f(&l["pp512"]),
            f(&g["pp512"]),
            ratio(&g["pp512"], &l["pp512"]),
            f(&l["tg128"]),
            f(&g["tg128"]),
            ratio(&g["tg128"], &l["tg128"]),
            f(&l["tg128_deep"]),
            f(&g["tg128_deep"]),
            ratio(&g["tg128_deep"], &l["tg128_deep"]),
            read(&l["tg128"]),
            read(&g["tg128"]),
        );
    }
    if let (Some((qtype, host)), Some(first)) = (&host_loop, rows.first()) {
        let device = first["gmlx"]["tg128"].as_f64().unwrap_or(0.0);
        println!(
            "{qtype}: gmlx decode with host sampling (GMLX_DEVICE_SAMPLING=0) {host:.1} tok/s, \
             with the device loop {device:.1} ({:.2}x)",
            device / host
        );
    }
    let small = if o.small {
        let file = model_file(SMALL_SHAPE, SMALL_TYPE, &sources, &python)?;
        eprintln!("xtask: {SMALL_SHAPE} {SMALL_TYPE}: llama-bench and gmlx");
        let (l_pp, l_tg, _) = llama(&llama_exe, &file, None)?;
        let g = gmlx_median(&gmlx_exe, &file, &[512], false, o.rounds)?;
        println!(
            "SmolLM2-135M shape ({SMALL_TYPE}, tied output head), latency-bound: pp512 llama.cpp \
             {l_pp:.1} gmlx {:.1} ({:.2}x); tg128 llama.cpp {l_tg:.1} gmlx {:.1} ({:.2}x, \
             gmlx's after its 512-token prompt)",
            g[0][1],
            g[0][1] / l_pp,
            g[0][2],
            g[0][2] / l_tg
        );
        Some(serde_json::json!({
            "shape": SMALL_SHAPE, "type": SMALL_TYPE,
            "file_bytes": std::fs::metadata(&file)?.len(),
            "llama_cpp": {"pp512": l_pp, "tg128": l_tg},
            "gmlx": {"pp512": g[0][1], "tg128": g[0][2]},
        }))
    } else {
        None
    };
    let json = serde_json::json!({
        "bench": "gpu", "shape": "llama3-8b", "gpu": gpu, "depth": o.depth, "gmlx_rounds": o.rounds,
        "gmlx_decode_host_sampling": host_loop.map(|(t, v)| serde_json::json!({"type": t, "tg128": v})),
        "rows": rows, "small": small,
    });
    println!("json: {json}");
    crate::bench::save("gpu-llama3-8b", &json.to_string())
}
