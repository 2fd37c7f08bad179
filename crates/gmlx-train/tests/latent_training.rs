//! Training through multi-head latent attention, the lightning indexer shared across blocks and
//! iHC residual streams, on the `hy_v4` fixture (tests/fixtures/hy_v4, indexer top-k 64): on
//! a 120-token row, so the later positions attend sparsely, the training loss with a fresh
//! adapter is llama.cpp's cross-entropy on the same tokens (from the fixture's golden logits),
//! and the gradients with and without checkpointing agree and reach every adapter.
use gmlx_mlx::Array;
use gmlx_models::{load, LoadOptions, Model};
use gmlx_train::data::Example;
use gmlx_train::lora::LoraSet;
use gmlx_train::step::{Batch, ForwardOptions};
use gmlx_train::{loss_and_grads, LoraConfig};
use serde_json::Value;

const LEN: usize = 120;

fn fixture() -> (Model, Vec<u32>, Vec<Vec<f32>>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hy_v4");
    let model = load(dir.join("hy_v4-F16.gguf"), &LoadOptions::default())
        .expect("load")
        .model;
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("hy_v4-F16.json")).expect("golden"))
            .expect("golden JSON");
    let as_f32 = |v: &Value| v.as_f64().expect("number") as f32;
    let sequence = golden["sequence"].as_array().expect("sequence")[..LEN]
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect();
    let logits = golden["exact"]["logits"].as_array().expect("logits")[..LEN]
        .iter()
        .map(|row| row.as_array().expect("row").iter().map(as_f32).collect())
        .collect();
    (model, sequence, logits)
}

fn batch(ids: &[u32]) -> Batch {
    let row = Example {
        ids: ids.to_vec(),
        target: vec![true; ids.len()],
        soft: Vec::new(),
    };
    Batch::new(&[&row])
}

fn loss_and_gradients(
    model: &Model,
    set: &LoraSet,
    ids: &[u32],
    checkpoint: bool,
) -> (f32, Vec<Array>) {
    let options = ForwardOptions {
        checkpoint,
        dropout: None,
    };
    let (loss, grads) = loss_and_grads(model, set, &batch(ids), options).expect("gradients");
    loss.eval().expect("eval");
    (loss.item_exact::<f32>(), grads)
}

fn host(a: &Array) -> Vec<f32> {
    let c = a.contiguous().expect("contiguous");
    c.eval().expect("eval");
    c.as_slice::<f32>().to_vec()
}

#[test]
fn a_fresh_adapter_trains_from_llama_cpps_loss_on_a_sparse_row() {
    let (model, ids, golden) = fixture();
    let set = LoraSet::new(&model, &LoraConfig::default(), 3).expect("lora set");
    let names: Vec<&str> = set.targets.iter().map(|t| t.name.as_str()).collect();
    for name in [
        "blk.1.attn_q_a.weight",
        "blk.2.attn_kv_a_mqa.weight",
        "blk.0.attn_gate.weight",
    ] {
        assert!(
            names.contains(&name),
            "{name} is not trained by default: {names:?}"
        );
    }
    // llama.cpp's mean cross-entropy of each next token
    let mut want = 0f64;
    for (t, row) in golden.iter().enumerate().take(LEN - 1) {
        let max = row.iter().copied().fold(f32::MIN, f32::max) as f64;
        let lse = max
            + row
                .iter()
                .map(|&v| (v as f64 - max).exp())
                .sum::<f64>()
                .ln();
        want += lse - row[ids[t + 1] as usize] as f64;
    }
    let want = (want / (LEN - 1) as f64) as f32;
    let (got, _) = loss_and_gradients(&model, &set, &ids, false);
    eprintln!("training loss {got}, llama.cpp's cross-entropy {want}");
    assert!((got - want).abs() < 1e-4, "loss {got} vs llama.cpp {want}");
}

#[test]
fn checkpointing_keeps_the_gradients_through_latent_attention_and_hyper_streams() {
    let (model, ids, _) = fixture();
    let mut set = LoraSet::new(&model, &LoraConfig::default(), 3).expect("lora set");
    // non-zero `b`, so every parameter has a non-trivial gradient
    for (i, p) in set.params.iter_mut().enumerate() {
        if i % 2 == 1 {
            let key = gmlx_mlx::mlx_rs::random::key(100 + i as u64).expect("key");
            *p = gmlx_mlx::mlx_rs::random::normal::<f32>(p.shape(), 0.0, 0.05, &key)
                .expect("normal");
        }
    }
    let (loss_plain, plain) = loss_and_gradients(&model, &set, &ids, false);
    let (loss_ck, checked) = loss_and_gradients(&model, &set, &ids, true);
    assert_eq!(plain.len(), set.params.len());
    let mut worst = 0f32;
    for ((p, c), target) in plain
        .iter()
        .zip(&checked)
        .zip(set.targets.iter().flat_map(|t| [t, t]))
    {
        let (p, c) = (host(p), host(c));
        let scale = p.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "no gradient reaches {}", target.name);
        let d = p
            .iter()
            .zip(&c)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        worst = worst.max(d / scale);
    }
    eprintln!("loss {loss_plain} vs {loss_ck}; max relative gradient difference {worst:e}");
    assert!((loss_plain - loss_ck).abs() <= 1e-5 * loss_plain.abs().max(1.0));
    assert!(worst <= 1e-5, "checkpointed gradients differ by {worst:e}");
}
