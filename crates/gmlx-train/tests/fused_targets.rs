//! Training on a file with fused attention projections (`attn_qkv`, llama.cpp's converter with
//! `--fuse-qkv`): the fused projection is one LoRA target per layer, it receives a gradient,
//! and the trained adapter names `attn_qkv` and moves the model's logits when applied.
#[path = "../../gmlx-models/tests/common/fuse.rs"]
mod fuse;

use gmlx_mlx::Array;
use gmlx_models::{load, LoadOptions, Logits};
use gmlx_train::data::Example;
use gmlx_train::lora::LoraSet;
use gmlx_train::step::{Batch, ForwardOptions};
use gmlx_train::{loss_and_grads, LoraConfig};

fn host(a: &Array) -> Vec<f32> {
    let c = a.contiguous().expect("contiguous");
    c.eval().expect("eval");
    c.as_slice::<f32>().to_vec()
}

fn last_logits(model: &gmlx_models::Model, ids: &[u32]) -> Vec<f32> {
    let mut caches = model.new_cache();
    let input = Array::from_slice(ids, &[1, ids.len() as i32]);
    host(
        &model
            .forward(&input, &mut caches, Logits::Last)
            .expect("forward"),
    )
}

#[test]
fn the_fused_attention_projection_trains_and_applies() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llama");
    let (path, qkv, _) = fuse::fuse(&dir.join("llama-Q8_0.gguf"), "train-llama");
    assert_eq!(qkv, 2);
    let mut model = load(&path, &LoadOptions::default()).expect("load").model;
    let _ = std::fs::remove_file(&path);
    let config = LoraConfig {
        rank: 4,
        dropout: 0.0,
        ..LoraConfig::default()
    };
    let mut set = LoraSet::new(&model, &config, 5).expect("lora set");
    let fused: Vec<usize> = set
        .targets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.name.ends_with(".attn_qkv.weight"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(fused.len(), 2, "one attn_qkv target per layer");
    assert!(set.targets.iter().all(|t| !t.name.contains(".attn_q.")));
    // non-zero `b`, so `a` gets a gradient too
    for (i, p) in set.params.iter_mut().enumerate() {
        if i % 2 == 1 {
            let key = gmlx_mlx::mlx_rs::random::key(300 + i as u64).expect("key");
            *p = gmlx_mlx::mlx_rs::random::normal::<f32>(p.shape(), 0.0, 0.05, &key)
                .expect("normal");
        }
    }
    let ids: Vec<u32> = (0..40).map(|i| (i * 7 % 250) as u32 + 3).collect();
    let example = Example {
        target: vec![true; ids.len()],
        ids: ids.clone(),
        soft: Vec::new(),
    };
    let options = ForwardOptions {
        checkpoint: false,
        dropout: None,
    };
    let (_, grads) =
        loss_and_grads(&model, &set, &Batch::new(&[&example]), options).expect("grads");
    for &t in &fused {
        for g in [&grads[2 * t], &grads[2 * t + 1]] {
            assert!(
                host(g).iter().any(|v| *v != 0.0),
                "{}: no gradient",
                set.targets[t].name
            );
        }
    }

    let adapter = set.to_adapter("llama").expect("adapter");
    assert!(adapter
        .pairs
        .iter()
        .any(|p| p.target == "blk.0.attn_qkv.weight"));
    let before = last_logits(&model, &ids);
    gmlx_models::adapter::apply(&mut model, &adapter, 1.0).expect("apply");
    let after = last_logits(&model, &ids);
    let moved = before
        .iter()
        .zip(&after)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(moved > 1e-3, "the adapter moves the logits ({moved})");
}
