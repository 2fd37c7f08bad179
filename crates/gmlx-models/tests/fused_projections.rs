//! Files with fused projections, as llama.cpp's converter writes them with `--fuse-qkv`
//! (attention's query, key and value projections as one `attn_qkv` tensor) and
//! `--fuse-gate-up-exps` (each routed expert's gate and up rows as one `ffn_gate_up_exps`
//! stack), and llama.cpp reads them. Each fixture rewritten that way (the same blocks, rows
//! concatenated) gives the same logits as the file it came from. The fused attention
//! projection is one adapter target, `attn_qkv`: the llama.cpp adapter golden's q/k/v pairs,
//! stacked into an equivalent `attn_qkv` pair, give llama.cpp's logits with the adapter on the
//! fused file.
mod common;

use common::fuse::fuse;
use common::{all_logits, ids, max_diff_at_recorded_ids};
use gmlx_gguf::GgufFile;
use gmlx_models::adapter::{self, Adapter, LoraPair};
use gmlx_models::{load, LoadOptions};

fn max_abs(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0f32, f32::max)
}

#[test]
fn fused_files_give_the_split_files_logits() {
    // qwen3: per-head q/k norms; qwen35: an output-gated attention layer after two DeltaNets;
    // qwen35moe, qwen3moe: routed experts; gpt-oss: routed experts with biases
    for (arch, qkv_layers, moe_layers) in [
        ("llama", 2, 0),
        ("qwen3", 2, 0),
        ("qwen35", 1, 0),
        ("qwen3moe", 2, 2),
        ("qwen35moe", 1, 3),
        ("gpt-oss", 2, 2),
    ] {
        let (path, sequence) = common::fixture(arch, "Q8_0");
        let (fused_path, qkv, gate_up) = fuse(&path, arch);
        assert_eq!(
            (qkv, gate_up),
            (qkv_layers, moe_layers),
            "{arch}: layers fused"
        );
        let split = load(&path, &LoadOptions::default()).expect("load split");
        let joined = load(&fused_path, &LoadOptions::default()).expect("load fused");
        let _ = std::fs::remove_file(&fused_path);
        let tokens = &sequence[..sequence.len().min(64)];
        let split_logits = all_logits(&split, tokens);
        let worst = max_abs(&split_logits, &all_logits(&joined, tokens));
        // One product over the stacked rows may sum in another order than three (BLAS picks
        // its blocking by shape and by CPU: up to 7 ulps of a 20.6 logit on an AMD EPYC), so
        // the bound is in units of the largest logit's last place; a misplaced row moves
        // logits by whole units.
        let largest = split_logits
            .iter()
            .flatten()
            .fold(0f32, |m, v| m.max(v.abs()));
        let bound = 32.0 * f32::EPSILON * largest;
        eprintln!("{arch}: fused vs split, max |logit difference| {worst:e} (bound {bound:e})");
        assert!(worst < bound, "{arch}: the fused file differs by {worst}");
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
    let (fused_path, _, _) = fuse(&path, "llama-f16");
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

/// Keeps a layer's experts resident, as the default does, but as a placement: the load path
/// a streaming placement takes.
#[derive(Debug)]
struct ResidentPlacement;

impl gmlx_models::blocks::moe::ExpertPlacement for ResidentPlacement {
    fn store(
        &self,
        file: &GgufFile,
        t: gmlx_models::blocks::moe::ExpertTensors<'_>,
        dtype: gmlx_mlx::Dtype,
    ) -> gmlx_models::Result<std::rc::Rc<dyn gmlx_models::blocks::moe::ExpertStore>> {
        let stack = |info| gmlx_mlx::QuantWeight::from_gguf(file, info, dtype);
        Ok(std::rc::Rc::new(
            gmlx_models::blocks::moe::ResidentExperts {
                ffn_gate_exps: stack(t.gate)?,
                ffn_up_exps: stack(t.up)?,
                ffn_down_exps: stack(t.down)?,
            },
        ))
    }
}

#[test]
fn a_placement_refuses_fused_gate_up_experts_with_the_reason() {
    let (path, _) = common::fixture("qwen35moe", "Q8_0");
    let options = LoadOptions {
        experts: Some(std::sync::Arc::new(ResidentPlacement)),
        ..LoadOptions::default()
    };
    load(&path, &options).expect("the split file loads through a placement");
    let (fused_path, _, _) = fuse(&path, "qwen35moe-placement");
    let err = load(&fused_path, &options).expect_err("fused experts through a placement");
    let _ = std::fs::remove_file(&fused_path);
    assert!(
        err.to_string().contains("ffn_gate_up_exps") && err.to_string().contains("streaming"),
        "{err}"
    );
}
