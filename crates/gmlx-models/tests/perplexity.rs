//! Teacher-forced log-probabilities against llama.cpp: on each architecture's float fixture,
//! the log-probability gmlx gives every next token of the golden sequence equals the one
//! llama.cpp's logits give (its float32 reference run over the same sequence); on the real
//! model, a text unseen by the rest of the suite, tokenized and scored as llama.cpp does
//! (goldens/make_smollm2_perplexity_golden.py).
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

#[test]
fn smollm2_text_scores_like_llama_cpp() {
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/goldens/smollm2_perplexity.json"),
        )
        .expect("golden"),
    )
    .expect("golden JSON");
    let loaded = load(
        gmlx_models::default_model::fetch().expect("the default model"),
        &LoadOptions::default(),
    )
    .expect("load");
    let text = golden["text"].as_str().expect("text");
    // tokenized as llama-perplexity does: special tokens as the metadata says, none parsed
    let tokens = loaded.tokenizer.encode(text, true, false).expect("encode");
    assert_eq!(tokens, common::ids(&golden["tokens"]));
    // chunks of 16: the cache carries the text across many passes
    let scores = perplexity::score(&loaded.model, &tokens, 16).expect("score");
    let exact: Vec<f32> = golden["exact"]["logprobs"]
        .as_array()
        .expect("logprobs")
        .iter()
        .map(|v| v.as_f64().expect("logprob") as f32)
        .collect();
    assert_eq!(scores.logprobs.len(), exact.len());
    let worst = scores
        .logprobs
        .iter()
        .zip(&exact)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        worst <= TOLERANCE,
        "max |Δ logprob| {worst} against llama.cpp's float32 reference"
    );
    let theirs = golden["exact"]["perplexity"].as_f64().expect("perplexity");
    let ours = scores.perplexity();
    assert!(
        (ours / theirs - 1.0).abs() < 1e-3,
        "perplexity {ours} vs llama.cpp {theirs}"
    );
    // llama.cpp on the quantized file itself rounds activations to 8 bits inside its products:
    // its perplexity on this text moves 1.4% from its own float32 reference, so gmlx's exact
    // math is checked against it only to that order
    let quantized = golden["quantized"]["perplexity"]
        .as_f64()
        .expect("perplexity");
    assert!(
        (ours / quantized - 1.0).abs() < 0.03,
        "perplexity {ours} vs llama.cpp on the quantized file {quantized}"
    );
    println!("SmolLM2 Q4_1: perplexity {ours:.4} over {} tokens; llama.cpp exact {theirs}, quantized {quantized}; max |Δ logprob| {worst:.2e}", exact.len());
}
