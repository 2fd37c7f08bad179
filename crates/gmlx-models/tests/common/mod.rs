//! Helpers shared by the parity tests: golden JSON readers, a full forward pass, greedy runs.
#![allow(dead_code)] // each test binary uses its own subset

pub mod fuse;

use gmlx_mlx::Array;
use gmlx_models::{GenerateOptions, Generation, Loaded, Logits};
use serde_json::Value;

/// A JSON array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// A JSON array of logit rows.
pub fn rows(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().expect("logit") as f32)
                .collect()
        })
        .collect()
}

/// float32 logits at every position of `tokens`, one row each, from a fresh cache.
pub fn all_logits(loaded: &Loaded, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut caches = loaded.model.new_cache();
    let input = Array::from_slice(tokens, &[1, tokens.len() as i32]);
    let logits = loaded
        .model
        .forward(&input, &mut caches, Logits::All)
        .expect("forward");
    let vocab = logits.shape()[2] as usize;
    let flat = logits.flatten(None, None).expect("flatten");
    flat.eval().expect("eval");
    flat.as_slice::<f32>()
        .chunks(vocab)
        .map(<[f32]>::to_vec)
        .collect()
}

/// The largest |ours - golden| over a golden's `positions` (each with `top_ids`,
/// `top_logits`, `fixed_logits` for the golden's `fixed_ids`).
pub fn max_diff_at_recorded_ids(ours: &[Vec<f32>], golden: &Value) -> f32 {
    let fixed = ids(&golden["fixed_ids"]);
    let positions = golden["positions"].as_array().expect("positions");
    assert_eq!(positions.len(), ours.len(), "position count");
    let mut worst = 0f32;
    for (row, pos) in ours.iter().zip(positions) {
        let pairs = ids(&pos["top_ids"])
            .into_iter()
            .zip(pos["top_logits"].as_array().expect("top"))
            .chain(
                fixed
                    .iter()
                    .copied()
                    .zip(pos["fixed_logits"].as_array().expect("fixed")),
            );
        for (id, want) in pairs {
            worst = worst.max((row[id as usize] - want.as_f64().expect("logit") as f32).abs());
        }
    }
    worst
}

/// `n` greedy tokens after `prompt`.
pub fn greedy(loaded: &Loaded, prompt: &[u32], n: usize, ignore_eos: bool) -> Vec<u32> {
    let options = GenerateOptions {
        max_tokens: n,
        ignore_eos,
        ..Default::default()
    };
    Generation::new(&loaded.model, &loaded.tokenizer, prompt, options)
        .expect("generation")
        .map(|p| p.expect("piece").token)
        .collect()
}

/// A fixture's GGUF and its golden's token sequence.
pub fn fixture(arch: &str, codec: &str) -> (std::path::PathBuf, Vec<u32>) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(arch);
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{arch}-{codec}.json"))).expect("golden"),
    )
    .expect("golden JSON");
    (
        dir.join(format!("{arch}-{codec}.gguf")),
        ids(&golden["sequence"]),
    )
}

/// Feeds `sequence` to a fresh cache in pieces of the given lengths (the last one cut at the
/// sequence's end) and returns the cache, the positions fed and the largest |logit - want| over
/// every position, `want` holding one reference row per position.
pub fn feed_pieces(
    model: &gmlx_models::Model,
    sequence: &[u32],
    pieces: &[usize],
    want: &[Vec<f32>],
) -> (gmlx_models::cache::SequenceCache, usize, f32) {
    let mut cache = model.new_cache();
    let (mut at, mut worst) = (0, 0f32);
    for &len in pieces {
        let piece = &sequence[at..(at + len).min(sequence.len())];
        let tokens = Array::from_slice(piece, &[1, piece.len() as i32]);
        let logits = model
            .forward(&tokens, &mut cache, Logits::All)
            .expect("forward");
        logits.eval().expect("eval");
        let vocab = logits.shape()[2] as usize;
        for (i, row) in logits.as_slice::<f32>().chunks(vocab).enumerate() {
            let d = row
                .iter()
                .zip(&want[at + i])
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            worst = worst.max(d);
        }
        at += piece.len();
    }
    (cache, at, worst)
}
