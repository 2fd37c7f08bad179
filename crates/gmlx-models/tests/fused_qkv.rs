//! Files whose attention stores its query, key and value projections as one `attn_qkv` tensor
//! (llama.cpp's converter with `--fuse-qkv`; llama.cpp reads them for the llama and Qwen
//! families). Each fixture rewritten that way (the same blocks, rows concatenated: queries,
//! keys, values) gives the same logits as the file it came from, and the fused projection is
//! one adapter target, `attn_qkv`: the llama.cpp adapter golden's q/k/v pairs, stacked into an
//! equivalent `attn_qkv` pair, give llama.cpp's logits with the adapter on the fused file.
mod common;

use common::{all_logits, ids, max_diff_at_recorded_ids};
use gmlx_gguf::{GgufFile, GgufWriter};
use gmlx_models::adapter::{self, Adapter, LoraPair};
use gmlx_models::{load, LoadOptions};

/// The fixture rewritten with fused `attn_qkv` tensors (weights, and biases when present) for
/// every layer with `attn_q`; returns the path and the number of fused layers.
fn fuse(path: &std::path::Path, tag: &str) -> (std::path::PathBuf, usize) {
    let file = GgufFile::open(path).expect("open");
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata().entries() {
        w.add_kv(key, value.clone()).expect("kv");
    }
    let mut fused = 0;
    for info in file.tensors() {
        let name = info.name.as_str();
        if name.contains(".attn_k.") || name.contains(".attn_v.") {
            continue;
        }
        let Some((layer, suffix)) = name.split_once(".attn_q.") else {
            let bytes = file.tensor_bytes(name).expect("bytes").to_vec();
            w.add_tensor(name, info.ggml_type, &info.dims, bytes)
                .expect("tensor");
            continue;
        };
        let parts: Vec<_> = ["attn_q", "attn_k", "attn_v"]
            .iter()
            .map(|p| file.tensor(&format!("{layer}.{p}.{suffix}")).expect("part"))
            .collect();
        assert!(
            parts.iter().all(|p| p.ggml_type == info.ggml_type),
            "{layer}: q, k and v of one type"
        );
        let mut bytes = Vec::new();
        let mut dims = info.dims.clone();
        *dims.last_mut().expect("dims") = parts.iter().map(|p| *p.dims.last().expect("d")).sum();
        for p in &parts {
            bytes.extend_from_slice(file.tensor_data(p));
        }
        w.add_tensor(
            &format!("{layer}.attn_qkv.{suffix}"),
            info.ggml_type,
            &dims,
            bytes,
        )
        .expect("fused");
        if suffix == "weight" {
            fused += 1;
        }
    }
    let out =
        std::env::temp_dir().join(format!("gmlx-fused-qkv-{tag}-{}.gguf", std::process::id()));
    w.write_to_path(&out).expect("write");
    (out, fused)
}

fn max_abs(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0f32, f32::max)
}

#[test]
fn fused_qkv_files_give_the_split_files_logits() {
    // qwen3: per-head q/k norms; qwen35: an output-gated attention layer after two DeltaNets
    for (arch, layers) in [("llama", 2), ("qwen3", 2), ("qwen35", 1)] {
        let (path, sequence) = common::fixture(arch, "Q8_0");
        let (fused_path, fused) = fuse(&path, arch);
        assert_eq!(fused, layers, "{arch}: attention layers fused");
        let split = load(&path, &LoadOptions::default()).expect("load split");
        let joined = load(&fused_path, &LoadOptions::default()).expect("load fused");
        let _ = std::fs::remove_file(&fused_path);
        let tokens = &sequence[..sequence.len().min(64)];
        let worst = max_abs(&all_logits(&split, tokens), &all_logits(&joined, tokens));
        eprintln!("{arch}: fused vs split, max |logit difference| {worst:e}");
        assert!(worst < 1e-5, "{arch}: the fused file differs by {worst}");
    }
}

/// The q, k and v pairs of one layer as one `attn_qkv` pair: `A` stacked (rank `3r`), `B`
/// block-diagonal, scaled by 3 since llama.cpp scales a pair by `alpha / rank`.
fn stacked(layer: &str, q: &LoraPair, k: &LoraPair, v: &LoraPair) -> LoraPair {
    let r = q.rank;
    assert!(k.rank == r && v.rank == r, "{layer}: one rank");
    let mut a = Vec::new();
    for p in [q, k, v] {
        a.extend_from_slice(&p.a);
    }
    let output = q.output + k.output + v.output;
    let mut b = vec![0f32; output * 3 * r];
    let mut row0 = 0;
    for (i, p) in [q, k, v].into_iter().enumerate() {
        for row in 0..p.output {
            for j in 0..r {
                b[(row0 + row) * 3 * r + i * r + j] = 3.0 * p.b[row * r + j];
            }
        }
        row0 += p.output;
    }
    LoraPair {
        target: format!("{layer}.attn_qkv.weight"),
        rank: 3 * r,
        input: q.input,
        output,
        a,
        b,
    }
}

#[test]
fn an_adapter_on_the_fused_projection_gives_llama_cpps_logits() {
    let goldens = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens");
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(goldens.join("llama-lora.json")).expect("json"),
    )
    .expect("golden JSON");
    let lora = Adapter::read(goldens.join("llama-lora.gguf")).expect("adapter");
    let pair = |name: &str| lora.pairs.iter().find(|p| p.target == name);
    let mut pairs = Vec::new();
    for p in &lora.pairs {
        let Some(layer) = p.target.strip_suffix(".attn_q.weight") else {
            if !p.target.contains(".attn_k.") && !p.target.contains(".attn_v.") {
                pairs.push(p.clone());
            }
            continue;
        };
        let k = pair(&format!("{layer}.attn_k.weight")).expect("k pair");
        let v = pair(&format!("{layer}.attn_v.weight")).expect("v pair");
        pairs.push(stacked(layer, p, k, v));
    }
    pairs.sort_by(|x, y| x.target.cmp(&y.target));
    assert!(pairs.iter().any(|p| p.target.ends_with(".attn_qkv.weight")));
    let fused_lora = Adapter {
        pairs,
        ..lora.clone()
    };

    let (path, _) = common::fixture("llama", "F16");
    let (fused_path, _) = fuse(&path, "llama-f16");
    let base = GgufFile::open(&fused_path).expect("open fused");
    fused_lora
        .check_base(&base)
        .expect("the fused file takes the fused adapter");
    lora.check_base(&base)
        .expect_err("the fused file has no attn_q to adapt");
    let mut loaded = load(&fused_path, &LoadOptions::default()).expect("load fused");
    let _ = std::fs::remove_file(&fused_path);
    let sequence = ids(&golden["sequence"]);
    let without = all_logits(&loaded, &sequence);
    adapter::apply(&mut loaded.model, &fused_lora, 1.0).expect("apply");
    let with = all_logits(&loaded, &sequence);
    let worst = max_diff_at_recorded_ids(&with, &golden);
    eprintln!(
        "llama, fused file + fused adapter vs llama.cpp + adapter on the split file: {worst:.2e} \
         (the adapter moves the logits by {:.2e})",
        max_abs(&with, &without)
    );
    assert!(worst < 1e-3, "max logit difference {worst}");
    assert!(
        max_abs(&with, &without) > 1e-2,
        "the adapter changes the logits"
    );
}
