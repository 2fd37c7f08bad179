//! Decode speed and bytes read per token of an MoE model whose experts exceed the arena:
//! resident, streamed through an arena of `--arena-mb`, and streamed with no room in the
//! arena for a step's experts (every step reads its experts through the page cache, as an
//! mmap-only run would touch them). The tokens are a fixed pseudo-random sequence, fed one at
//! a time after a prompt, so the routing varies as over real text. `cargo xtask bench stream`
//! writes the file and keeps the JSON line.
//! Args: `--file F` (required), `--arena-mb N` (96), `--tokens N` (64), `--prompt N` (32).
use std::sync::Arc;
use std::time::Instant;

use gmlx_mlx::Array;
use gmlx_models::{load, LoadOptions, Logits};
use gmlx_stream::{StreamOptions, StreamReport, StreamedExperts};

struct Row {
    mode: &'static str,
    decode_tok_s: f64,
    mib_read_per_token: f64,
    hit_rate: Option<f64>,
    resident_mib: f64,
}

fn tokens(n: usize, vocab: u32) -> Vec<u32> {
    let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % u64::from(vocab)) as u32
        })
        .collect()
}

fn decode_hits(before: &Option<StreamReport>, after: &Option<StreamReport>) -> Option<f64> {
    let sum = |r: &Option<StreamReport>| {
        r.as_ref().map_or((0, 0), |r| {
            r.stats
                .layers
                .values()
                .fold((0, 0), |(h, m), s| (h + s.hits, m + s.misses))
        })
    };
    let ((h0, m0), (h1, m1)) = (sum(before), sum(after));
    let (h, m) = (h1 - h0, m1 - m0);
    (h + m > 0).then(|| h as f64 / (h + m) as f64)
}

fn measure(
    mode: &'static str,
    file: &str,
    placement: Option<Arc<StreamedExperts>>,
    prompt: &[u32],
    decode: &[u32],
) -> Row {
    let loaded = load(
        file,
        &LoadOptions {
            experts: placement
                .clone()
                .map(|p| p as Arc<dyn gmlx_models::blocks::moe::ExpertPlacement>),
            ..LoadOptions::default()
        },
    )
    .expect("load");
    let model = &loaded.model;
    let mut cache = model.new_cache();
    let step = |cache: &mut gmlx_models::SequenceCache, piece: &[u32]| {
        let input = Array::from_slice(piece, &[1, piece.len() as i32]);
        let logits = model.forward(&input, cache, Logits::Last).expect("forward");
        logits.eval().expect("eval");
    };
    step(&mut cache, prompt);
    let report = || placement.as_ref().and_then(|p| p.report());
    let before = report();
    let start = Instant::now();
    for &t in decode {
        step(&mut cache, &[t]);
    }
    let secs = start.elapsed().as_secs_f64();
    let after = report();
    let read = |r: &Option<StreamReport>| r.as_ref().map_or(0, |r| r.stats.bytes_read);
    let arena = after.as_ref().map_or(0, |r| r.arena_bytes);
    Row {
        mode,
        decode_tok_s: decode.len() as f64 / secs,
        mib_read_per_token: (read(&after) - read(&before)) as f64
            / decode.len() as f64
            / (1024.0 * 1024.0),
        hit_rate: decode_hits(&before, &after),
        resident_mib: (loaded.weight_bytes as u64 + arena) as f64 / (1024.0 * 1024.0),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let Some(file) = arg("--file") else {
        eprintln!("usage: stream --file MODEL.gguf [--arena-mb N] [--tokens N] [--prompt N]");
        std::process::exit(2);
    };
    let arena_mb: u64 = arg("--arena-mb").and_then(|v| v.parse().ok()).unwrap_or(96);
    let n: usize = arg("--tokens").and_then(|v| v.parse().ok()).unwrap_or(64);
    let p: usize = arg("--prompt").and_then(|v| v.parse().ok()).unwrap_or(32);
    let opened = gmlx_models::open(&file).expect("open");
    let vocab = opened.config().vocab as u32;
    let experts_bytes: u64 = opened
        .file()
        .tensors()
        .iter()
        .filter(|t| t.name.contains("_exps."))
        .map(|t| t.n_bytes)
        .sum();
    drop(opened);
    let sequence = tokens(p + n, vocab);
    let (prompt, decode) = sequence.split_at(p);
    let streamed = |slots: Option<usize>| {
        Some(Arc::new(StreamedExperts::new(StreamOptions {
            arena_bytes: arena_mb << 20,
            slots,
            ..StreamOptions::default()
        })))
    };
    let rows = [
        measure("resident", &file, None, prompt, decode),
        measure("streamed", &file, streamed(None), prompt, decode),
        measure("page cache only", &file, streamed(Some(1)), prompt, decode),
    ];
    println!(
        "experts in the file: {:.1} MiB; arena: {arena_mb} MiB; {n} tokens after a {p}-token prompt",
        experts_bytes as f64 / (1024.0 * 1024.0)
    );
    println!(
        "{:>16} {:>12} {:>10} {:>16} {:>10} {:>14}",
        "mode", "decode tok/s", "vs resident", "MiB read/token", "hit rate", "resident MiB"
    );
    let base = rows[0].decode_tok_s;
    for r in &rows {
        println!(
            "{:>16} {:>12.2} {:>10.2} {:>16.2} {:>10} {:>14.1}",
            r.mode,
            r.decode_tok_s,
            r.decode_tok_s / base,
            r.mib_read_per_token,
            r.hit_rate
                .map_or("-".to_owned(), |h| format!("{:.1}%", 100.0 * h)),
            r.resident_mib
        );
    }
    let json: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"mode\":\"{}\",\"decode_tok_s\":{:.3},\"mib_read_per_token\":{:.3},\"hit_rate\":{},\"resident_mib\":{:.1}}}",
                r.mode,
                r.decode_tok_s,
                r.mib_read_per_token,
                r.hit_rate.map_or("null".to_owned(), |h| format!("{h:.4}")),
                r.resident_mib
            )
        })
        .collect();
    println!(
        "json: {{\"bench\":\"stream\",\"file\":\"{}\",\"experts_mib\":{:.1},\"arena_mb\":{arena_mb},\"prompt\":{p},\"tokens\":{n},\"rows\":[{}]}}",
        std::path::Path::new(&file)
            .file_name()
            .map_or(String::new(), |f| f.to_string_lossy().into_owned()),
        experts_bytes as f64 / (1024.0 * 1024.0),
        json.join(",")
    );
}
