//! Adapters on the certified fixtures against llama.cpp, and every projection of `hy_v4` and
//! `deepseek4` (and `kimi-k3`) as an adapter target by its GGUF name. For each fixture, an adapter on every
//! projection that gmlx and llama.cpp's graph both adapt (tests/goldens/<arch>-lora.gguf, made
//! with its llama.cpp golden by tests/goldens/make_fixture_adapter_golden.py) gives llama.cpp's
//! logits; on `hy_v4` and `deepseek4`, an adapter on any single projection changes gmlx's,
//! including on `hy_v4` the latent ones llama.cpp multiplies without adapters (`attn_q_a`,
//! `attn_q_b`, `attn_kv_a_mqa`, `attn_gate`, the indexer's), and on `deepseek4` `attn_q_a`,
//! `attn_kv` and the compressors' `attn_compressor_kv` / `attn_compressor_gate`.
mod common;

use common::{all_logits, greedy, ids, max_diff_at_recorded_ids};
use gmlx_models::adapter::{self, Adapter, LoraPair};
use gmlx_models::{load, LoadOptions};
use serde_json::Value;

const ARCHS: [&str; 9] = [
    "llama",
    "qwen3",
    "qwen3moe",
    "gpt-oss",
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "hy_v4",
    "deepseek4",
];

fn goldens() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens")
}

#[test]
fn adapters_on_every_fixture_give_llama_cpps_logits_with_the_same_file() {
    for arch in ARCHS {
        let golden: Value = serde_json::from_str(
            &std::fs::read_to_string(goldens().join(format!("{arch}-lora.json"))).expect("json"),
        )
        .expect("golden JSON");
        let (path, _) = common::fixture(arch, "F16");
        let mut loaded = load(&path, &LoadOptions::default()).expect("load");
        let lora = Adapter::read(goldens().join(format!("{arch}-lora.gguf"))).expect("adapter");
        let targets = golden["targets"].as_array().expect("targets");
        assert_eq!(lora.pairs.len(), targets.len(), "{arch}");
        assert!(!targets.is_empty(), "{arch}: no target");
        adapter::apply(&mut loaded.model, &lora, 1.0).expect("apply");

        let sequence = ids(&golden["sequence"]);
        let worst = max_diff_at_recorded_ids(&all_logits(&loaded, &sequence), &golden);
        eprintln!(
            "{arch}: {} targets, max |gmlx + adapter - llama.cpp + adapter| over {} positions: \
             {worst:.2e}",
            targets.len(),
            sequence.len()
        );
        assert!(worst < 1e-3, "{arch}: max logit difference {worst}");

        let prompt = ids(&golden["prompt_ids"]);
        let want = ids(&golden["greedy"]);
        assert_eq!(greedy(&loaded, &prompt, want.len(), false), want, "{arch}");
    }
}

/// A rank-2 pair for `target` with deterministic values of about unit gain.
fn pair(target: &str, output: usize, input: usize, seed: u32) -> LoraPair {
    let value = |i: usize, scale: f32| {
        let h = (i as u32 ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_mul(0x85eb_ca6b);
        ((h >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 2.0 * scale
    };
    let rank = 2;
    LoraPair {
        target: target.to_owned(),
        rank,
        input,
        output,
        a: (0..rank * input)
            .map(|i| value(i, 3.0 / (input as f32).sqrt()))
            .collect(),
        b: (0..output * rank).map(|i| value(i + 7919, 3.0)).collect(),
    }
}

/// Every name in `required` is an adapter target of `arch`'s fixture, and an adapter on any
/// one target alone moves the logits over the first `positions` positions; removing it
/// restores them.
fn an_adapter_on_any_projection_moves_the_logits(
    arch: &str,
    positions: usize,
    required: &[String],
) {
    let (path, sequence) = common::fixture(arch, "F16");
    let sequence = &sequence[..positions];
    let mut loaded = load(&path, &LoadOptions::default()).expect("load");
    let base = all_logits(&loaded, sequence);

    let mut targets: Vec<(String, usize, usize)> = Vec::new();
    for layer in loaded.model.layers() {
        for linear in layer.linears() {
            let (rows, cols) = linear.weight.shape();
            targets.push((linear.name().to_owned(), rows as usize, cols as usize));
        }
    }
    let names: Vec<&str> = targets.iter().map(|(n, _, _)| n.as_str()).collect();
    for name in required {
        assert!(
            names.contains(&name.as_str()),
            "{name} is not an adapter target"
        );
    }
    for (seed, (name, rows, cols)) in targets.iter().enumerate() {
        let lora = Adapter {
            arch: arch.to_owned(),
            alpha: 2.0,
            pairs: vec![pair(name, *rows, *cols, seed as u32 + 1)],
        };
        adapter::apply(&mut loaded.model, &lora, 1.0).expect("apply");
        let adapted = all_logits(&loaded, sequence);
        let moved = base
            .iter()
            .flatten()
            .zip(adapted.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("{name}: logits move by up to {moved:.3}");
        assert!(
            moved > 0.05,
            "an adapter on {name} moved the logits by only {moved}"
        );
    }
    adapter::remove(&mut loaded.model);
    assert_eq!(
        all_logits(&loaded, sequence),
        base,
        "removing the adapter restores the base"
    );
}

fn names(blocks: &[usize], slots: &[&str]) -> Vec<String> {
    blocks
        .iter()
        .flat_map(|b| slots.iter().map(move |p| format!("blk.{b}.{p}.weight")))
        .collect()
}

#[test]
fn an_adapter_on_any_hy_v4_projection_changes_the_logits() {
    let mut required = names(
        &[0, 1, 2],
        &[
            "attn_q_a",
            "attn_q_b",
            "attn_kv_a_mqa",
            "attn_gate",
            "attn_output",
        ],
    );
    required.extend(names(
        &[0, 2],
        &["indexer.attn_q_b", "indexer.attn_k", "indexer.proj"],
    ));
    required.extend(names(&[0], &["ffn_gate", "ffn_up", "ffn_down"]));
    required.extend(names(&[1], &["ffn_gate_shexp"]));
    required.extend(names(&[2], &["ffn_down_shexp"]));
    // past the indexer's top-k of 64, so a changed key choice shows
    an_adapter_on_any_projection_moves_the_logits("hy_v4", 100, &required);
}

#[test]
fn an_adapter_on_any_deepseek4_projection_changes_the_logits() {
    let mut required = names(
        &[0, 1, 2, 3],
        &[
            "attn_q_a",
            "attn_q_b",
            "attn_kv",
            "attn_output_b",
            "ffn_gate_shexp",
            "ffn_up_shexp",
            "ffn_down_shexp",
        ],
    );
    required.extend(names(
        &[1, 2, 3],
        &["attn_compressor_kv", "attn_compressor_gate"],
    ));
    required.extend(names(
        &[1, 3],
        &[
            "indexer.attn_q_b",
            "indexer.proj",
            "indexer_compressor_kv",
            "indexer_compressor_gate",
        ],
    ));
    // past the first 128-position block (its pooled row) and the indexer's top-16
    an_adapter_on_any_projection_moves_the_logits("deepseek4", 140, &required);
}

#[test]
fn an_adapter_on_any_kimi_k3_projection_changes_the_logits() {
    let mut required = names(
        &[0, 1, 3],
        &[
            "attn_q",
            "attn_k",
            "attn_v",
            "ssm_f_a",
            "ssm_f_b",
            "ssm_beta",
            "ssm_g",
            "attn_output",
        ],
    );
    required.extend(names(
        &[2],
        &[
            "attn_q_a",
            "attn_q_b",
            "attn_kv_a_mqa",
            "attn_gate",
            "attn_output",
        ],
    ));
    required.extend(names(&[0], &["ffn_gate", "ffn_up", "ffn_down"]));
    required.extend(names(
        &[1, 2, 3],
        &[
            "ffn_routed_down",
            "ffn_routed_up",
            "ffn_gate_shexp",
            "ffn_up_shexp",
            "ffn_down_shexp",
        ],
    ));
    // past two 16-token KDA chunks
    an_adapter_on_any_projection_moves_the_logits("kimi-k3", 40, &required);
}
