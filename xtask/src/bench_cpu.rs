//! `cargo xtask bench cpu [FILE] [--rounds N] [--threads N]`: gmlx on the CPU next to
//! llama.cpp's `llama-bench` (the pinned sdist's CPU build, built once) on the same file,
//! alternating, `--rounds` times each: prefill of 128 and 512 tokens and 128 decoded tokens,
//! the ratios, and the bytes of weights each decode reads per second against the machine's
//! memory bandwidth measured in the same run. FILE defaults to the default model. The JSON
//! line is kept under `bench/runs/<date>-<host>/cpu-<name>.json`.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::{bench_gguf, setup};

struct Options {
    file: Option<PathBuf>,
    rounds: usize,
    threads: usize,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options {
        file: None,
        rounds: 2,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut number = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name} takes a count"))
        };
        match a.as_str() {
            "--rounds" => o.rounds = number("--rounds")?.max(1),
            "--threads" => o.threads = number("--threads")?.max(1),
            other if o.file.is_none() && !other.starts_with('-') => o.file = Some(other.into()),
            other => bail!(
                "unexpected argument {other:?}; usage: cargo xtask bench cpu [FILE] \
                 [--rounds N] [--threads N]"
            ),
        }
    }
    Ok(o)
}

/// One side's figures in one round: tok/s of prefill 128, prefill 512 and decode 128.
#[derive(Clone, Copy, Default)]
struct Rates {
    pp128: f64,
    pp512: f64,
    tg128: f64,
}

fn llama(exe: &Path, file: &Path, threads: usize) -> Result<Rates> {
    let rows = bench_gguf::llama_bench_rows(exe, file, &["-p", "128,512", "-n", "128"], threads)?;
    let rate = |prompt: u64, gen: u64| -> Result<f64> {
        rows.iter()
            .find(|r| r["n_prompt"].as_u64() == Some(prompt) && r["n_gen"].as_u64() == Some(gen))
            .and_then(|r| r["avg_ts"].as_f64())
            .with_context(|| format!("no llama-bench row for pp{prompt} tg{gen}"))
    };
    Ok(Rates {
        pp128: rate(128, 0)?,
        pp512: rate(512, 0)?,
        tg128: rate(0, 128)?,
    })
}

/// gmlx's rates, and the MiB of weights it holds (what one decode step reads).
fn gmlx(exe: &Path, file: &Path) -> Result<(Rates, f64)> {
    let out = Command::new(exe)
        .arg("run")
        .arg(file)
        .args([
            "--device",
            "cpu",
            "--bench",
            "128,512",
            "--bench-decode",
            "128",
        ])
        .env_remove("GMLX_BATCH_INVARIANT")
        .output()
        .context("run gmlx")?;
    if !out.status.success() {
        bail!("gmlx failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<f64>> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .filter(|v: &Vec<f64>| v.len() == 4)
        .collect();
    let row = |prompt: f64| {
        rows.iter()
            .find(|r| r[0] == prompt)
            .with_context(|| format!("no --bench row for prompt {prompt} in: {text}"))
    };
    let (r128, r512) = (row(128.0)?, row(512.0)?);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let weights_mib = stderr
        .lines()
        .find_map(|l| {
            let before = l.split(" MiB of weights in memory").next()?;
            (before.len() < l.len()).then(|| before.rsplit(' ').next()?.parse().ok())?
        })
        .with_context(|| format!("no weights line in: {stderr}"))?;
    Ok((
        Rates {
            pp128: r128[1],
            pp512: r512[1],
            // the decode after the shortest prompt (llama-bench's tg128 starts from none)
            tg128: r128[3],
        },
        weights_mib,
    ))
}

/// The best of a few passes reading a 1 GiB buffer with `threads` threads, in GB/s.
fn memory_bandwidth(threads: usize) -> f64 {
    const WORDS: usize = 1 << 27;
    let buffer: Vec<u64> = (0..WORDS as u64).collect();
    let per = WORDS.div_ceil(threads);
    let mut best = 0f64;
    for _ in 0..5 {
        let start = Instant::now();
        let sum: u64 = std::thread::scope(|s| {
            let parts: Vec<_> = buffer
                .chunks(per)
                .map(|part| s.spawn(move || part.iter().fold(0u64, |a, &w| a.wrapping_add(w))))
                .collect();
            parts.into_iter().map(|p| p.join().unwrap_or(0)).sum()
        });
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(sum);
        best = best.max((WORDS * 8) as f64 / seconds / 1e9);
    }
    best
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let refs = setup::run()?;
    let file = match &o.file {
        Some(f) => f.clone(),
        None => gmlx_cache::default_model::fetch()?,
    };
    let llama_exe = bench_gguf::llama_bench(&refs.llama_cpp)?;
    let gmlx_exe = bench_gguf::release_gmlx()?;

    let bandwidth = memory_bandwidth(o.threads);
    eprintln!(
        "xtask: memory read bandwidth {bandwidth:.2} GB/s ({} threads)",
        o.threads
    );
    let (mut l, mut g) = (Vec::new(), Vec::new());
    let mut weights_mib = 0.0;
    for round in 1..=o.rounds {
        eprintln!(
            "xtask: round {round}/{}: llama-bench -p 128,512 -n 128 -t {}",
            o.rounds, o.threads
        );
        l.push(llama(&llama_exe, &file, o.threads)?);
        eprintln!(
            "xtask: round {round}/{}: gmlx run --bench 128,512 --bench-decode 128",
            o.rounds
        );
        let (rates, mib) = gmlx(&gmlx_exe, &file)?;
        g.push(rates);
        weights_mib = mib;
    }
    let file_bytes = std::fs::metadata(&file)?.len() as f64;
    let gmlx_bytes = weights_mib * 1024.0 * 1024.0;
    let name = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let pick = |v: &[Rates], f: fn(&Rates) -> f64| median(v.iter().map(f).collect());
    let (lm, gm) = (
        Rates {
            pp128: pick(&l, |r| r.pp128),
            pp512: pick(&l, |r| r.pp512),
            tg128: pick(&l, |r| r.tg128),
        },
        Rates {
            pp128: pick(&g, |r| r.pp128),
            pp512: pick(&g, |r| r.pp512),
            tg128: pick(&g, |r| r.tg128),
        },
    );
    println!(
        "{name}: {} rounds alternating, {} threads, median tok/s (each round in brackets)",
        o.rounds, o.threads
    );
    let each = |v: &[Rates], f: fn(&Rates) -> f64| {
        v.iter()
            .map(|r| format!("{:.1}", f(r)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("| | llama.cpp | gmlx | gmlx / llama.cpp |");
    println!("|---|---|---|---|");
    for (label, f) in [
        ("prefill 128", (|r: &Rates| r.pp128) as fn(&Rates) -> f64),
        ("prefill 512", |r: &Rates| r.pp512),
        ("decode 128", |r: &Rates| r.tg128),
    ] {
        println!(
            "| {label} | {:.1} [{}] | {:.1} [{}] | {:.2} |",
            f(&lm),
            each(&l, f),
            f(&gm),
            each(&g, f),
            f(&gm) / f(&lm)
        );
    }
    let l_read = file_bytes * lm.tg128 / 1e9;
    let g_read = gmlx_bytes * gm.tg128 / 1e9;
    println!(
        "decode reads: llama.cpp {:.1} MiB per token (the file) at {l_read:.2} GB/s, gmlx {:.1} MiB \
         (its weights in memory) at {g_read:.2} GB/s; memory read bandwidth {bandwidth:.2} GB/s",
        file_bytes / 1048576.0,
        weights_mib
    );
    let rates =
        |r: &Rates| serde_json::json!({"pp128": r.pp128, "pp512": r.pp512, "tg128": r.tg128});
    let json = serde_json::json!({
        "bench": "cpu", "file": name, "threads": o.threads, "rounds": o.rounds,
        "llama_cpp": {"median": rates(&lm), "rounds": l.iter().map(rates).collect::<Vec<_>>()},
        "gmlx": {"median": rates(&gm), "rounds": g.iter().map(rates).collect::<Vec<_>>()},
        "memory_read_gb_s": bandwidth,
        "decode_read_gb_s": {"llama_cpp": l_read, "gmlx": g_read},
        "bytes_per_token": {"llama_cpp_file": file_bytes, "gmlx_weights": gmlx_bytes},
    });
    println!("json: {json}");
    crate::bench::save(&format!("cpu-{name}"), &json.to_string())
}
