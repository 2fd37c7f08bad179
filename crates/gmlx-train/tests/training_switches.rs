//! The switches that restore the plain (memory-hungry) training paths give the same loss and
//! LoRA gradients, to rounding, as the defaults:
//!
//! - `GMLX_TRAIN_GDN_CHUNK=0`: a gated-DeltaNet model (the `qwen35` and `qwen3next` fixtures:
//!   DeltaNet layers 0-1, attention layer 2) differentiates the chunked scan (64 tokens per
//!   step, inside a checkpoint) by default, the per-token loop with the switch; a 150-token
//!   row (three chunks).
//! - `GMLX_TRAIN_BLOCKED_ATTN=0`: attention of a row longer than 256 tokens runs in blocks of
//!   queries under a custom VJP by default, as MLX's whole-row attention with the switch; a
//!   300-token row (two blocks) through grouped-query attention (`llama`), sinks and a sliding
//!   window (`gpt-oss`), MLA (`kimi-k3`) and compressed attention (`deepseek4`).
//!
//! One test, in its own test binary: the switches are the process's environment.
use gmlx_mlx::Array;
use gmlx_models::{load, LoadOptions};
use gmlx_train::data::Example;
use gmlx_train::lora::LoraSet;
use gmlx_train::step::{Batch, ForwardOptions};
use gmlx_train::{loss_and_grads, LoraConfig};

fn host(a: &Array) -> Vec<f32> {
    let c = a.contiguous().expect("contiguous");
    c.eval().expect("eval");
    c.as_slice::<f32>().to_vec()
}

#[test]
fn the_memory_saving_paths_train_like_the_plain_ones() {
    for arch in ["qwen35", "qwen3next"] {
        default_against_switch(arch, "GMLX_TRAIN_GDN_CHUNK", 150);
    }
    for arch in ["llama", "gpt-oss", "kimi-k3", "deepseek4"] {
        default_against_switch(arch, "GMLX_TRAIN_BLOCKED_ATTN", 300);
    }
}

/// Loss and gradients on `tokens` of the fixture's golden sequence (repeated where it is
/// shorter), by default and with `switch=0`.
fn default_against_switch(arch: &str, switch: &str, tokens: usize) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(arch);
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{arch}-Q8_0.json"))).expect("golden"),
    )
    .expect("json");
    let ids: Vec<u32> = golden["sequence"]
        .as_array()
        .expect("sequence")
        .iter()
        .cycle()
        .take(tokens)
        .map(|v| v.as_u64().expect("id") as u32)
        .collect();
    let model = load(
        dir.join(format!("{arch}-Q8_0.gguf")),
        &LoadOptions::default(),
    )
    .expect("load")
    .model;
    let config = LoraConfig {
        rank: 4,
        dropout: 0.0,
        ..LoraConfig::default()
    };
    let mut set = LoraSet::new(&model, &config, 3).expect("lora set");
    for (i, p) in set.params.iter_mut().enumerate() {
        if i % 2 == 1 {
            let key = gmlx_mlx::mlx_rs::random::key(200 + i as u64).expect("key");
            *p = gmlx_mlx::mlx_rs::random::normal::<f32>(p.shape(), 0.0, 0.02, &key)
                .expect("normal");
        }
    }
    let example = Example {
        target: vec![true; ids.len()],
        ids,
        soft: Vec::new(),
    };
    let batch = Batch::new(&[&example]);
    let run = || {
        let options = ForwardOptions {
            checkpoint: false,
            dropout: None,
        };
        let (loss, grads) = loss_and_grads(&model, &set, &batch, options).expect("grads");
        loss.eval().expect("eval");
        (loss.item_exact::<f32>(), grads)
    };
    let (loss_default, grads_default) = run();
    std::env::set_var(switch, "0");
    let (loss_plain, grads_plain) = run();
    std::env::remove_var(switch);

    assert!(
        (loss_default - loss_plain).abs() < 1e-4 * loss_plain.abs().max(1.0),
        "{arch}: {loss_default} vs {loss_plain}"
    );
    let mut worst = 0f32;
    for (a, b) in grads_default.iter().zip(&grads_plain) {
        let (a, b) = (host(a), host(b));
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
        let d = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        worst = worst.max(d / scale);
    }
    eprintln!(
        "{arch}: loss {loss_default}, with {switch}=0 {loss_plain}; max relative gradient difference {worst:e}"
    );
    assert!(worst < 1e-3, "{arch}: gradients differ by {worst:e}");
    assert!(grads_default
        .iter()
        .any(|g| host(g).iter().any(|v| *v != 0.0)));
}
