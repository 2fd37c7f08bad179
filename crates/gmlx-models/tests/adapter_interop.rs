//! A LoRA adapter written by `gmlx train` (tests/goldens/smollm2_zorbania_lora.gguf, rank 4 on
//! the top 2 blocks of the default model) gives the same logits in gmlx, applied live on the
//! quantized base, as in llama.cpp (`lora_path`, float32 copy of the base, f32 KV cache).
//! Golden made by tests/goldens/make_adapter_golden.py.
mod common;

use common::{all_logits, greedy, ids, max_diff_at_recorded_ids};
use gmlx_models::adapter::{self, Adapter};
use gmlx_models::{default_model, load, LoadOptions};
use serde_json::Value;

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
    let worst = max_diff_at_recorded_ids(&all_logits(&loaded, &sequence), &golden);
    eprintln!(
        "max |gmlx + adapter - llama.cpp + adapter| over {} positions: {worst:.2e}",
        sequence.len()
    );
    assert!(worst < 1e-3, "max logit difference {worst}");

    // and the greedy continuation is llama.cpp's (" Quillemont.")
    let prompt = ids(&golden["prompt_ids"]);
    let want = ids(&golden["greedy"]);
    let got = greedy(&loaded, &prompt, want.len(), false);
    assert_eq!(got, want[..got.len()].to_vec());
    assert!(!got.is_empty());
}
