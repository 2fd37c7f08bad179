//! Teacher-forced log-probabilities against llama.cpp: on each architecture's float fixture,
//! the log-probability gmlx gives every next token of the golden sequence equals the one
//! llama.cpp's logits give (its float32 reference run over the same sequence).
mod common;

use gmlx_models::{load, perplexity, LoadOptions};

/// Logits agree to 1e-3 (the certification tolerance); a log-softmax entry is a logit minus
/// a log-sum-exp, so it can move by twice that.
const TOLERANCE: f32 = 2e-3;

fn check(stem: &str) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{stem}.json"))).expect("golden"),
    )
    .expect("golden JSON");
    let sequence = common::ids(&golden["sequence"]);
    let logits = common::rows(&golden["exact"]["logits"]);
    let reference: Vec<f32> = (0..sequence.len() - 1)
        .map(|i| {
            let row = &logits[i];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let lse = max + row.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
            row[sequence[i + 1] as usize] - lse
        })
        .collect();
    let loaded = load(dir.join(format!("{stem}.gguf")), &LoadOptions::default()).expect("load");
    // chunks of 7 straddle the prompt and the continuation
    let scores = perplexity::score(&loaded.model, &sequence, 7).expect("score");
    assert_eq!(scores.logprobs.len(), sequence.len() - 1);
    let worst = scores
        .logprobs
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= TOLERANCE, "{stem}: max |Δ logprob| {worst}");
    let ours = scores.perplexity();
    let theirs =
        (-reference.iter().map(|&l| f64::from(l)).sum::<f64>() / reference.len() as f64).exp();
    assert!(
        (ours / theirs - 1.0).abs() < 1e-3,
        "{stem}: perplexity {ours} vs llama.cpp {theirs}"
    );
}

#[test]
fn llama_logprobs_match_llama_cpp() {
    check("llama/llama-F16");
}

#[test]
fn qwen3_logprobs_match_llama_cpp() {
    check("qwen3/qwen3-F16");
}

#[test]
fn qwen3moe_logprobs_match_llama_cpp() {
    check("qwen3moe/qwen3moe-F16");
}

#[test]
fn gpt_oss_logprobs_match_llama_cpp() {
    check("gpt-oss/gpt-oss-F16");
}
