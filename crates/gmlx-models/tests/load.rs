//! One load opens the model file once: plan, tokenizer, weights and adapter checks all read
//! the same handle.
use gmlx_models::{default_model, load, open, LoadOptions};

#[test]
fn a_load_opens_the_file_once() {
    let path = default_model::fetch().expect("the default model");
    let before = gmlx_gguf::opened_on_this_thread();
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    assert_eq!(gmlx_gguf::opened_on_this_thread() - before, 1);
    assert_eq!(loaded.config().layers.len(), 30);

    let before = gmlx_gguf::opened_on_this_thread();
    let opened = open(&path).expect("open");
    let plan = opened.plan();
    assert_eq!(plan.config.n_layers, 30);
    let adapter = gmlx_models::adapter::Adapter::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/goldens/smollm2_zorbania_lora.gguf"),
    )
    .expect("adapter");
    adapter.check_base(opened.file()).expect("the adapter fits");
    let loaded = opened.load(&LoadOptions::default()).expect("load");
    // the adapter file is the second open; the model's file was opened once
    assert_eq!(gmlx_gguf::opened_on_this_thread() - before, 2);
    assert_eq!(loaded.tokenizer.vocab_size(), 49152);
}

#[test]
fn a_preflight_names_every_missing_and_misshapen_tensor_before_reading() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/qwen3/qwen3-F16.gguf");
    let source = gmlx_gguf::GgufFile::open(&fixture).expect("fixture");
    let mut w = gmlx_gguf::GgufWriter::new();
    for (key, value) in source.metadata().entries() {
        if key != "general.alignment" {
            w.add_kv(key, value.clone()).expect("kv");
        }
    }
    let dropped = ["blk.0.attn_q_norm.weight", "blk.1.ffn_up.weight"];
    for t in source.tensors() {
        if dropped.contains(&t.name.as_str()) {
            continue;
        }
        let bytes = source.tensor_data(t).to_vec();
        if t.name == "blk.1.attn_k_norm.weight" {
            // half the head size: a shape the config does not allow
            let half = bytes[..bytes.len() / 2].to_vec();
            w.add_tensor(&t.name, t.ggml_type, &[t.dims[0] / 2], half)
                .expect("tensor");
        } else {
            w.add_tensor(&t.name, t.ggml_type, &t.dims, bytes)
                .expect("tensor");
        }
    }
    let dir = std::env::temp_dir().join(format!("gmlx-preflight-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let broken = dir.join("broken.gguf");
    w.write_to_path(&broken).expect("write");
    let err = load(&broken, &LoadOptions::default()).expect_err("a broken file");
    std::fs::remove_dir_all(&dir).ok();
    assert!(err.is_load_refusal(), "{err}");
    let gmlx_models::Error::Tensors { problems } = &err else {
        panic!("one error listing the problems, got {err}");
    };
    assert_eq!(problems.len(), 3, "{err}");
    let text = err.to_string();
    for name in dropped.iter().chain(&["blk.1.attn_k_norm.weight"]) {
        assert!(text.contains(name), "{name} not named: {text}");
    }
}

#[test]
fn the_weight_walk_sees_every_tensor_and_the_adapter_targets_by_name() {
    let path = default_model::fetch().expect("the default model");
    let file = gmlx_gguf::GgufFile::open(&path).expect("open");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    // every tensor is resident: float32 scales make the memory larger than the file
    assert!(
        loaded.weight_bytes as u64 >= file.total_tensor_bytes(),
        "{} bytes resident, the file holds {}",
        loaded.weight_bytes,
        file.total_tensor_bytes()
    );
    let roles = [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ];
    for (l, layer) in loaded.model.layers().iter().enumerate() {
        let names: Vec<&str> = layer.linears().iter().map(|x| x.name()).collect();
        let want: Vec<String> = roles
            .iter()
            .map(|r| format!("blk.{l}.{r}.weight"))
            .collect();
        assert_eq!(names, want);
    }
    let mut model = loaded.model;
    let target = "blk.7.ffn_up.weight";
    let found = model.layers_mut()[7].linear_mut(target).expect("by name");
    assert_eq!(found.name(), target);
    assert!(model.layers_mut()[7]
        .linear_mut("blk.7.ffn_norm.weight")
        .is_none());
}
