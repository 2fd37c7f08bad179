//! Training a gated-DeltaNet model (the `qwen35` and `qwen3next` fixtures: DeltaNet layers
//! 0-1, attention layer 2) differentiates the chunked scan (64 tokens per step) inside a
//! checkpoint (recomputed in the backward pass); `GMLX_TRAIN_GDN_CHUNK=0` restores the
//! per-token loop. On a 150-token row (three chunks) both give the same loss and LoRA
//! gradients to rounding. Its own test binary: the switch is the process's environment.
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
fn the_chunked_scan_trains_like_the_per_token_loop() {
    for arch in ["qwen35", "qwen3next"] {
        chunked_against_loop(arch);
    }
}

fn chunked_against_loop(arch: &str) {
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
        .take(150)
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
    let (loss_chunked, grads_chunked) = run();
    std::env::set_var("GMLX_TRAIN_GDN_CHUNK", "0");
    let (loss_loop, grads_loop) = run();
    std::env::remove_var("GMLX_TRAIN_GDN_CHUNK");

    assert!(
        (loss_chunked - loss_loop).abs() < 1e-4 * loss_loop.abs().max(1.0),
        "{arch}: {loss_chunked} vs {loss_loop}"
    );
    let mut worst = 0f32;
    for (a, b) in grads_chunked.iter().zip(&grads_loop) {
        let (a, b) = (host(a), host(b));
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-12);
        let d = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        worst = worst.max(d / scale);
    }
    eprintln!(
        "{arch}: loss chunked {loss_chunked} loop {loss_loop}; max relative gradient difference {worst:e}"
    );
    assert!(worst < 1e-3, "{arch}: gradients differ by {worst:e}");
    assert!(grads_chunked
        .iter()
        .any(|g| host(g).iter().any(|v| *v != 0.0)));
}
