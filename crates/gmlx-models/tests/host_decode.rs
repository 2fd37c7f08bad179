//! A CPU decode of one token per step attends on the host (`Attention::forward_host`: host
//! products, rotation, a host KV cache, softmax attention) with no MLX evaluation in a block.
//! Its logits are llama.cpp's on the default model, and the MLX path's (a whole-sequence
//! prefill) on the fixtures, including after a prefill (the cache moves to the host) and with
//! chunks of several tokens between single steps (the cache moves back to MLX).
mod common;

use common::{all_logits, feed_pieces, fixture, ids, max_diff_at_recorded_ids};
use gmlx_mlx::Array;
use gmlx_models::cache::LayerCache;
use gmlx_models::{default_model, load, LoadOptions, Logits};
use serde_json::Value;

/// Every position's logits with the sequence fed as `pieces`.
fn pieces_logits(model: &gmlx_models::Model, sequence: &[u32], pieces: &[usize]) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache();
    let mut rows = Vec::new();
    let mut at = 0;
    for &len in pieces {
        let piece = &sequence[at..(at + len).min(sequence.len())];
        let logits = model
            .forward(
                &Array::from_slice(piece, &[1, piece.len() as i32]),
                &mut cache,
                Logits::All,
            )
            .expect("forward");
        logits.eval().expect("eval");
        let vocab = logits.shape()[2] as usize;
        rows.extend(logits.as_slice::<f32>().chunks(vocab).map(<[f32]>::to_vec));
        at += piece.len();
    }
    rows
}

#[test]
fn decoding_token_by_token_on_the_host_matches_llama_cpp() {
    let golden: Value =
        serde_json::from_str(include_str!("goldens/smollm2_q4_1.json")).expect("golden JSON");
    let loaded = load(
        default_model::fetch().expect("model"),
        &LoadOptions::default(),
    )
    .expect("load");
    let exact = &golden["exact"];
    let sequence = ids(&exact["sequence"]);
    // a prefill of 5 tokens, then one token per step
    let mut pieces = vec![5];
    pieces.resize(sequence.len() - 4, 1);
    let rows = pieces_logits(&loaded.model, &sequence, &pieces);
    let worst = max_diff_at_recorded_ids(&rows, exact);
    eprintln!(
        "decoded one token at a time: max |gmlx - llama.cpp| over {} positions {worst:.2e}",
        sequence.len()
    );
    assert!(worst < 1e-3, "max logit difference {worst}");
}

/// Full caches of `cache` in host memory, and full caches in all.
fn on_host(cache: &gmlx_models::cache::SequenceCache) -> (usize, usize) {
    let full: Vec<bool> = cache
        .layers()
        .iter()
        .filter_map(|l| match l {
            LayerCache::FullKv(f) => Some(f.on_host()),
            _ => None,
        })
        .collect();
    (full.iter().filter(|h| **h).count(), full.len())
}

#[test]
fn host_decode_gives_the_prefill_logits_on_the_fixtures() {
    // llama and qwen3 (per-head norms) attend on the host; qwen3moe (its blocks' feed-forward
    // is not a host one), gpt-oss (sinks, a window) and qwen35 (an output gate) keep MLX's
    // attention and must not change
    for (arch, host) in [
        ("llama", true),
        ("qwen3", true),
        ("qwen3moe", false),
        ("gpt-oss", false),
        ("qwen35", false),
    ] {
        let (path, sequence) = fixture(arch, "Q8_0");
        let loaded = load(&path, &LoadOptions::default()).expect("load");
        let want = all_logits(&loaded, &sequence);
        // single steps after a prefill; then a chunk of several tokens between steps (the
        // caches go back to MLX and return)
        for pieces in [&[3, 1, 1, 1, 1][..], &[3, 1, 1, 4, 1, 1]] {
            let (cache, fed, worst) = feed_pieces(&loaded.model, &sequence, pieces, &want);
            eprintln!("{arch}: {fed} positions as {pieces:?}, max |steps - prefill| {worst:.2e}");
            assert!(
                worst < 1e-4,
                "{arch} {pieces:?}: max logit difference {worst}"
            );
            let (held, full) = on_host(&cache);
            assert_eq!(
                held,
                if host { full } else { 0 },
                "{arch} {pieces:?}: caches on the host"
            );
        }
    }
}

/// Rows at different positions decoded together (`Model::forward_rows`, as the server batches
/// them) each give their own sequence's prefill logits.
#[test]
fn batched_rows_at_different_positions_attend_on_the_host() {
    let (path, sequence) = fixture("llama", "Q8_0");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let want = all_logits(&loaded, &sequence);
    let model = &loaded.model;
    let (mut a, mut b) = (model.new_cache(), model.new_cache());
    let starts = [3usize, 6];
    for (cache, &start) in [&mut a, &mut b].into_iter().zip(&starts) {
        model
            .forward(
                &Array::from_slice(&sequence[..start], &[1, start as i32]),
                cache,
                Logits::Last,
            )
            .expect("prefill")
            .eval()
            .expect("eval");
    }
    let mut worst = 0f32;
    for step in 0..4 {
        let at = [starts[0] + step, starts[1] + step];
        let tokens = [sequence[at[0]], sequence[at[1]]];
        let logits = model
            .forward_rows(&tokens, &mut [&mut a, &mut b])
            .expect("forward_rows");
        logits.eval().expect("eval");
        let vocab = logits.shape()[1] as usize;
        for (row, &p) in logits.as_slice::<f32>().chunks(vocab).zip(&at) {
            let d = row
                .iter()
                .zip(&want[p])
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            worst = worst.max(d);
        }
    }
    eprintln!("two rows at positions 3 and 6, 4 steps: max |rows - prefill| {worst:.2e}");
    assert!(worst < 1e-4, "max logit difference {worst}");
    assert_eq!(on_host(&a).0, on_host(&a).1, "row 0's caches on the host");
    assert_eq!(on_host(&b).0, on_host(&b).1, "row 1's caches on the host");
}
