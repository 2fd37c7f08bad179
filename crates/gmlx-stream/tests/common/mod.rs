//! Helpers of the streaming tests: fixtures, streamed loads, greedy runs that record logits.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::sync::Arc;

use gmlx_mlx::Array;
use gmlx_models::{load, LoadOptions, Loaded, Logits};
use gmlx_stream::{StreamOptions, StreamedExperts};

pub fn fixture(arch: &str, codec: &str) -> (PathBuf, Vec<u32>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(arch);
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{arch}-{codec}.json"))).expect("golden"),
    )
    .expect("golden JSON");
    let sequence = golden["sequence"]
        .as_array()
        .expect("sequence")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect();
    (dir.join(format!("{arch}-{codec}.gguf")), sequence)
}

pub fn streamed(path: &PathBuf, options: StreamOptions) -> (Loaded, Arc<StreamedExperts>) {
    let experts = Arc::new(StreamedExperts::new(options));
    (load_through(path, &experts), experts)
}

/// The model at `path` with its experts placed by `experts`.
pub fn load_through(path: &PathBuf, experts: &Arc<StreamedExperts>) -> Loaded {
    load(
        path,
        &LoadOptions {
            experts: Some(experts.clone()),
            ..LoadOptions::default()
        },
    )
    .expect("load streamed")
}

/// The prompt prefilled in one pass, then `steps` greedy tokens one at a time: each step's
/// logits as bits.
pub fn greedy_logits(loaded: &Loaded, prompt: &[u32], steps: usize) -> Vec<Vec<u32>> {
    try_greedy_logits(loaded, prompt, steps).expect("forward")
}

/// [`greedy_logits`], or the first forward pass's error.
pub fn try_greedy_logits(
    loaded: &Loaded,
    prompt: &[u32],
    steps: usize,
) -> gmlx_models::Result<Vec<Vec<u32>>> {
    let model = &loaded.model;
    let mut cache = model.new_cache();
    let mut input = Array::from_slice(prompt, &[1, prompt.len() as i32]);
    let mut out = Vec::with_capacity(steps);
    for _ in 0..steps {
        let logits = model
            .forward(&input, &mut cache, Logits::Last)?
            .flatten(None, None)
            .map_err(gmlx_mlx::Error::from)?;
        logits.eval().map_err(gmlx_mlx::Error::from)?;
        let row = logits.as_slice::<f32>();
        let next = row
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                if v > best.1 {
                    (i, v)
                } else {
                    best
                }
            })
            .0 as u32;
        out.push(row.iter().map(|v| v.to_bits()).collect());
        input = Array::from_slice(&[next], &[1, 1]);
    }
    Ok(out)
}

/// `tokens[..prefill]` in one pass, then the rest one token at a time (teacher-forced): each
/// step's last logits as bits, or the first error.
pub fn forced_logits(
    model: &gmlx_models::Model,
    tokens: &[u32],
    prefill: usize,
) -> gmlx_models::Result<Vec<Vec<u32>>> {
    let mut cache = model.new_cache();
    let mut out = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let n = if at == 0 { prefill } else { 1 };
        let piece = &tokens[at..at + n];
        let input = Array::from_slice(piece, &[1, n as i32]);
        let logits = model
            .forward(&input, &mut cache, Logits::Last)?
            .flatten(None, None)
            .map_err(gmlx_mlx::Error::from)?;
        logits.eval().map_err(gmlx_mlx::Error::from)?;
        out.push(
            logits
                .as_slice::<f32>()
                .iter()
                .map(|v| v.to_bits())
                .collect(),
        );
        at += n;
    }
    Ok(out)
}
