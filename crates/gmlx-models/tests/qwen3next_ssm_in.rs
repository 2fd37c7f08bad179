//! Qwen3-Next files converted before llama.cpp split the DeltaNet's input projection store it
//! fused as `ssm_in`: per key head, its queries, keys, values and gate rows. The `qwen3next`
//! fixture rewritten into that layout (the same numbers, rows regrouped) gives the same logits.
//! (llama.cpp reads the layout the same way: on the same rewrite, made with gguf-py, its logits
//! over these positions were within 5.0e-5 of the fixture's golden, checked on 2026-12-03.)
mod common;

use gmlx_gguf::{GgmlType, GgufFile, GgufWriter};
use gmlx_models::{load, LoadOptions};

/// Fixture shape: 2 key heads of 32, 4 value heads of 32 (2 per key head), hidden 256.
const K_HEADS: usize = 2;
const K_DIM: usize = 32;
const PER_K: usize = 2;
const V_DIM: usize = 32;
const HIDDEN: usize = 256;

/// Rows `[from, from + n)` of a row-major `[rows, HIDDEN]` matrix.
fn rows(m: &[f32], from: usize, n: usize) -> &[f32] {
    &m[from * HIDDEN..(from + n) * HIDDEN]
}

/// `ssm_in` rows from `attn_qkv` (q, k, v of all heads) and `attn_gate` (z).
fn fused(qkv: &[f32], gate: &[f32]) -> Vec<f32> {
    let values = PER_K * V_DIM;
    let mut out = Vec::new();
    for kh in 0..K_HEADS {
        out.extend_from_slice(rows(qkv, kh * K_DIM, K_DIM));
        out.extend_from_slice(rows(qkv, K_HEADS * K_DIM + kh * K_DIM, K_DIM));
        out.extend_from_slice(rows(qkv, 2 * K_HEADS * K_DIM + kh * values, values));
        out.extend_from_slice(rows(gate, kh * values, values));
    }
    out
}

#[test]
fn the_legacy_fused_input_projection_loads_and_matches() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3next");
    let path = dir.join("qwen3next-F16.gguf");
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("qwen3next-F16.json")).expect("golden"),
    )
    .expect("golden JSON");
    let sequence = common::ids(&golden["sequence"]);
    let file = GgufFile::open(&path).expect("open");
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata().entries() {
        w.add_kv(key, value.clone()).expect("kv");
    }
    let mut fused_layers = 0;
    for info in file.tensors() {
        let name = info.name.as_str();
        if name.ends_with(".attn_gate.weight") {
            continue;
        }
        if let Some(layer) = name.strip_suffix(".attn_qkv.weight") {
            let qkv = file.dequantize(name).expect("qkv");
            let gate = file
                .dequantize(&format!("{layer}.attn_gate.weight"))
                .expect("gate");
            let ssm_in = fused(&qkv, &gate);
            let out_rows = (ssm_in.len() / HIDDEN) as u64;
            w.add_f32(
                &format!("{layer}.ssm_in.weight"),
                &[HIDDEN as u64, out_rows],
                &ssm_in,
            )
            .expect("ssm_in");
            fused_layers += 1;
            continue;
        }
        let bytes = file.tensor_bytes(name).expect("bytes").to_vec();
        let ty: GgmlType = info.ggml_type;
        w.add_tensor(name, ty, &info.dims, bytes).expect("tensor");
    }
    assert_eq!(fused_layers, 2, "the fixture's two DeltaNet layers");
    let legacy =
        std::env::temp_dir().join(format!("gmlx-qwen3next-ssm-in-{}.gguf", std::process::id()));
    w.write_to_path(&legacy).expect("write");

    let split = load(&path, &LoadOptions::default()).expect("load split");
    let fused = load(&legacy, &LoadOptions::default()).expect("load fused");
    let _ = std::fs::remove_file(&legacy);
    let tokens = &sequence[..130];
    let a = common::all_logits(&split, tokens);
    let b = common::all_logits(&fused, tokens);
    let worst = a
        .iter()
        .zip(&b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "the fused layout differs by {worst}");
}
