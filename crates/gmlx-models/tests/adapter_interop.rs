//! A LoRA adapter written by `gmlx train` (tests/goldens/smollm2_zorbania_lora.gguf, rank 4 on
//! the top 2 blocks of the default model) gives the same logits in gmlx, applied live on the
//! quantized base, as in llama.cpp (`lora_path`, float32 copy of the base, f32 KV cache).
//! Golden made by tests/goldens/make_adapter_golden.py.
use gmlx_mlx::Array;
use gmlx_models::adapter::{self, Adapter};
use gmlx_models::{default_model, load, GenerateOptions, Generation, LoadOptions, Logits};
use serde_json::Value;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn gmlx_adapter_matches_llama_cpp_with_the_same_file() {
    let golden: Value =
        serde_json::from_str(include_str!("goldens/smollm2_zorbania_lora.json")).expect("json");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens");
    let mut loaded = load(
        default_model::fetch().expect("model"),
        &LoadOptions::default(),
    )
    .expect("load");
    let lora = Adapter::read(dir.join("smollm2_zorbania_lora.gguf")).expect("adapter");
    adapter::apply(&mut loaded.model, &lora, 1.0).expect("apply");

    let sequence = ids(&golden["sequence"]);
    let mut caches = loaded.model.new_caches();
    let input = Array::from_slice(&sequence, &[1, sequence.len() as i32]);
    let logits = loaded
        .model
        .forward(&input, &mut caches, Logits::All)
        .expect("forward");
    let vocab = logits.shape()[2] as usize;
    let flat = logits.flatten(None, None).expect("flatten");
    flat.eval().expect("eval");
    let ours = flat.as_slice::<f32>();
    let fixed = ids(&golden["fixed_ids"]);
    let mut worst = 0f32;
    for (p, pos) in golden["positions"]
        .as_array()
        .expect("positions")
        .iter()
        .enumerate()
    {
        let row = &ours[p * vocab..(p + 1) * vocab];
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
    eprintln!(
        "max |gmlx + adapter - llama.cpp + adapter| over {} positions: {worst:.2e}",
        sequence.len()
    );
    assert!(worst < 1e-3, "max logit difference {worst}");

    // and the greedy continuation is llama.cpp's (" Quillemont.")
    let prompt = ids(&golden["prompt_ids"]);
    let want = ids(&golden["greedy"]);
    let options = GenerateOptions {
        max_tokens: want.len(),
        ..Default::default()
    };
    let got: Vec<u32> = Generation::new(&loaded.model, &loaded.tokenizer, &prompt, options)
        .expect("generation")
        .map(|p| p.expect("piece").token)
        .collect();
    assert_eq!(got, want[..got.len()].to_vec());
    assert!(!got.is_empty());
}
