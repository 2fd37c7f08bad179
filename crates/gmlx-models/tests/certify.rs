//! Certification of each (architecture, codec) fixture against llama.cpp, with the references
//! of docs/testing.md. Fixtures and goldens: tests/fixtures/<arch>/ (docs/fixtures.md).
//!
//! Per file: gmlx in float32 within 1e-3 of llama.cpp on a float32 copy of the file at every
//! position, the same greedy tokens; teacher-forced on llama.cpp's run of the file itself
//! (where its top-1 leads by >= 0.5, gmlx picks the same token); and for float fixtures,
//! within 1e-3 of transformers. Each test prints one `CERTIFIED` line that
//! `cargo xtask certify` collects into docs/architectures.md.
use std::path::PathBuf;

mod common;

use common::{all_logits, greedy, ids, rows};
use gmlx_models::{load, LoadOptions};
use serde_json::Value;

const TOLERANCE: f32 = 1e-3;
const CONFIDENT_MARGIN: f64 = 0.5;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len(), "position count");
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len(), "vocabulary size");
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

fn certify(stem: &str) {
    let (arch_dir, _) = stem.split_once('/').expect("arch/file");
    let dir = fixtures().join(arch_dir);
    let file = stem.split_once('/').map(|(_, f)| f).expect("file");
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{file}.json"))).expect("golden"),
    )
    .expect("golden JSON");
    let loaded = load(dir.join(format!("{file}.gguf")), &LoadOptions::default()).expect("load");
    assert_eq!(loaded.config().arch, golden["arch"].as_str().expect("arch"));
    let sequence = ids(&golden["sequence"]);
    let prompt_len = golden["prompt_len"].as_u64().expect("prompt_len") as usize;
    let prompt = &sequence[..prompt_len];

    // exact reference: every position, and greedy tokens
    let exact = &golden["exact"];
    let ours = all_logits(&loaded, &sequence);
    let d_exact = max_diff(&ours, &rows(&exact["logits"]));
    assert!(
        d_exact < TOLERANCE,
        "{stem}: max |logit - llama.cpp exact| = {d_exact}"
    );
    let want = ids(&exact["greedy"]);
    // llama.cpp's recorded greedy run does not stop at end-of-generation tokens
    let got = greedy(&loaded, prompt, want.len(), true);

    // llama.cpp on the file itself, teacher-forced
    let q = &golden["quantized"];
    let q_tokens = ids(&q["greedy"]);
    let margins: Vec<f64> = q["margins"]
        .as_array()
        .expect("margins")
        .iter()
        .map(|m| m.as_f64().expect("margin"))
        .collect();
    let forced: Vec<u32> = prompt.iter().chain(&q_tokens).copied().collect();
    let forced_logits = all_logits(&loaded, &forced);
    let mut confident = 0;
    for (step, (&token, &margin)) in q_tokens.iter().zip(&margins).enumerate() {
        if margin >= CONFIDENT_MARGIN {
            let row = &forced_logits[prompt_len - 1 + step];
            assert_eq!(
                gmlx_models::sample::argmax(row),
                token,
                "{stem}: teacher-forced step {step} (llama.cpp margin {margin})"
            );
            confident += 1;
        }
    }

    // transformers, for float fixtures
    let d_hf = golden
        .get("transformers")
        .map(|t| max_diff(&ours, &rows(&t["logits"])));

    println!(
        "CERTIFIED arch={} codec={} positions={} max_diff_exact={d_exact:.2e} greedy={}/{} \
         teacher_forced={confident}/{} max_diff_transformers={}",
        golden["arch"].as_str().unwrap_or("?"),
        golden["codec"].as_str().unwrap_or("?"),
        sequence.len(),
        got.iter().zip(&want).take_while(|(a, b)| a == b).count(),
        want.len(),
        q_tokens.len(),
        d_hf.map_or("-".into(), |d| format!("{d:.2e}")),
    );
    assert!(
        d_exact < TOLERANCE,
        "{stem}: max |logit - llama.cpp exact| = {d_exact}"
    );
    assert_eq!(got, want, "{stem}: greedy tokens differ from llama.cpp");
    if let Some(d) = d_hf {
        assert!(d < TOLERANCE, "{stem}: max |logit - transformers| = {d}");
    }
}

macro_rules! certify {
    ($($name:ident => $stem:literal,)*) => {
        $(#[test] fn $name() { certify($stem); })*
    };
}

certify! {
    llama_f16 => "llama/llama-F16",
    llama_q8_0 => "llama/llama-Q8_0",
    llama_q4_k_m => "llama/llama-Q4_K_M",
    llama_q6_k => "llama/llama-Q6_K",
    qwen3_f16 => "qwen3/qwen3-F16",
    qwen3_q8_0 => "qwen3/qwen3-Q8_0",
    qwen3_q4_k_m => "qwen3/qwen3-Q4_K_M",
    qwen3_q6_k => "qwen3/qwen3-Q6_K",
    qwen3moe_f16 => "qwen3moe/qwen3moe-F16",
    qwen3moe_q8_0 => "qwen3moe/qwen3moe-Q8_0",
    qwen3moe_q4_k_m => "qwen3moe/qwen3moe-Q4_K_M",
    qwen3moe_q6_k => "qwen3moe/qwen3moe-Q6_K",
    gpt_oss_f16 => "gpt-oss/gpt-oss-F16",
    gpt_oss_q8_0 => "gpt-oss/gpt-oss-Q8_0",
    gpt_oss_q4_k_m => "gpt-oss/gpt-oss-Q4_K_M",
    gpt_oss_q6_k => "gpt-oss/gpt-oss-Q6_K",
    gpt_oss_mxfp4 => "gpt-oss/gpt-oss-MXFP4_MOE",
    qwen35_f16 => "qwen35/qwen35-F16",
    qwen35_q8_0 => "qwen35/qwen35-Q8_0",
    qwen35_q4_k_m => "qwen35/qwen35-Q4_K_M",
    qwen35_q6_k => "qwen35/qwen35-Q6_K",
    qwen35_iq4_xs => "qwen35/qwen35-IQ4_XS",
    qwen35moe_f16 => "qwen35moe/qwen35moe-F16",
    qwen35moe_q8_0 => "qwen35moe/qwen35moe-Q8_0",
    qwen35moe_q4_k_m => "qwen35moe/qwen35moe-Q4_K_M",
    qwen35moe_q6_k => "qwen35moe/qwen35moe-Q6_K",
    qwen35moe_iq4_xs => "qwen35moe/qwen35moe-IQ4_XS",
    qwen3next_f16 => "qwen3next/qwen3next-F16",
    qwen3next_q8_0 => "qwen3next/qwen3next-Q8_0",
    qwen3next_q4_k_m => "qwen3next/qwen3next-Q4_K_M",
    qwen3next_q6_k => "qwen3next/qwen3next-Q6_K",
    qwen3next_iq4_xs => "qwen3next/qwen3next-IQ4_XS",
    hy_v4_f16 => "hy_v4/hy_v4-F16",
    hy_v4_q8_0 => "hy_v4/hy_v4-Q8_0",
    hy_v4_q4_k_m => "hy_v4/hy_v4-Q4_K_M",
    hy_v4_q6_k => "hy_v4/hy_v4-Q6_K",
    deepseek4_f16 => "deepseek4/deepseek4-F16",
    deepseek4_q8_0 => "deepseek4/deepseek4-Q8_0",
    deepseek4_q4_k_m => "deepseek4/deepseek4-Q4_K_M",
    deepseek4_q6_k => "deepseek4/deepseek4-Q6_K",
    deepseek4_mxfp4 => "deepseek4/deepseek4-MXFP4_MOE",
    glm5_next_f16 => "glm5-next/glm5-next-F16",
    glm5_next_q8_0 => "glm5-next/glm5-next-Q8_0",
    glm5_next_q4_k_m => "glm5-next/glm5-next-Q4_K_M",
    glm5_next_q6_k => "glm5-next/glm5-next-Q6_K",
    glm5_next_mxfp4 => "glm5-next/glm5-next-MXFP4_MOE",
    qwen4exp_f16 => "qwen4exp/qwen4exp-F16",
    qwen4exp_q8_0 => "qwen4exp/qwen4exp-Q8_0",
    qwen4exp_q4_k_m => "qwen4exp/qwen4exp-Q4_K_M",
    qwen4exp_q6_k => "qwen4exp/qwen4exp-Q6_K",
    qwen4exp_iq4_xs => "qwen4exp/qwen4exp-IQ4_XS",
    kimi_k3_f16 => "kimi-k3/kimi-k3-F16",
    kimi_k3_q8_0 => "kimi-k3/kimi-k3-Q8_0",
    kimi_k3_q4_k_m => "kimi-k3/kimi-k3-Q4_K_M",
    kimi_k3_q6_k => "kimi-k3/kimi-k3-Q6_K",
    kimi_k3_mxfp4 => "kimi-k3/kimi-k3-MXFP4_MOE",
}
