//! Aggregate decode throughput of the engine at 1, 2, 4 and 8 concurrent streams on the
//! default model, as a ratio to one stream. `cargo xtask bench serve` runs it and keeps the
//! JSON line. Args: `--tokens N` per stream (default 64), `--streams 1,2,4,8`, `--read-ahead
//! gpu|always|never` (the scheduler's [`ReadAhead`], `gpu` by default).
use std::time::Instant;

#[path = "../tests/common/mod.rs"]
mod common;

use gmlx_models::SamplingParams;
use gmlx_serve::engine::Event;
use gmlx_serve::ReadAhead;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let tokens: usize = arg("--tokens").and_then(|t| t.parse().ok()).unwrap_or(64);
    let streams: Vec<usize> = arg("--streams")
        .unwrap_or_else(|| "1,2,4,8".to_owned())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let width = streams.iter().copied().max().unwrap_or(8);
    let read_ahead = match arg("--read-ahead").as_deref() {
        None | Some("gpu") => ReadAhead::OnGpu,
        Some("always") => ReadAhead::Always,
        Some("never") => ReadAhead::Never,
        Some(other) => {
            eprintln!("serve bench: --read-ahead {other}: expected gpu, always or never");
            std::process::exit(2);
        }
    };
    let (engine, tokenizer) = common::engine(width, read_ahead);
    // never stops early: end-of-generation tokens are biased away
    let request = |i: usize| {
        let text = format!("Story number {i}: once upon a time");
        common::request(
            &tokenizer,
            &format!("bench-{i}"),
            &text,
            tokens,
            SamplingParams::default(),
        )
    };
    let run = |n: usize| -> f64 {
        let start = Instant::now();
        let receivers: Vec<_> = (0..n)
            .map(|i| engine.submit(request(i)).expect("submit"))
            .collect();
        let mut generated = 0;
        for mut rx in receivers {
            while let Some(e) = rx.blocking_recv() {
                match e {
                    Event::Token(_) => {}
                    Event::Done(d) => {
                        generated += d.completion_tokens;
                        break;
                    }
                    Event::Failed(e) => panic!("{e}"),
                }
            }
        }
        generated as f64 / start.elapsed().as_secs_f64()
    };
    run(1); // warm-up
    let mut rows = Vec::new();
    let mut base = None;
    for &n in &streams {
        let rate = run(n);
        let base = *base.get_or_insert(rate);
        println!(
            "streams {n}: {rate:8.1} tok/s aggregate  ({:.2}x one stream)",
            rate / base
        );
        rows.push(format!(
            "{{\"streams\":{n},\"tokens_per_s\":{rate:.2},\"ratio\":{:.3}}}",
            rate / base
        ));
    }
    println!(
        "read-ahead {read_ahead:?}: {} decode steps submitted before the step before was read",
        engine.stats().read_ahead_steps
    );
    println!(
        "json: {{\"bench\":\"serve\",\"model\":\"{}\",\"tokens_per_stream\":{tokens},\"rows\":[{}]}}",
        gmlx_models::default_model::FILE_NAME,
        rows.join(",")
    );
    // the scheduler thread frees the model before the process exits: left running, it could
    // still be freeing MLX arrays while MLX's own statics are destroyed ("corrupted
    // double-linked list" at exit, once in four runs)
    engine.shutdown();
}
