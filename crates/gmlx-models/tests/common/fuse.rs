//! Fixtures rewritten with fused projections, as llama.cpp's converter writes them with
//! `--fuse-qkv` and `--fuse-gate-up-exps` (shared by the fused-file tests of gmlx-models and
//! gmlx-train).
use gmlx_gguf::{GgufFile, GgufWriter};

/// The fixture rewritten with fused `attn_qkv` tensors (weights, and biases when present) for
/// every layer with `attn_q`, and fused `ffn_gate_up_exps` (weights and biases) for every
/// layer with `ffn_gate_exps`; returns the path and the number of fused weights of each kind.
pub fn fuse(path: &std::path::Path, tag: &str) -> (std::path::PathBuf, usize, usize) {
    let file = GgufFile::open(path).expect("open");
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata().entries() {
        w.add_kv(key, value.clone()).expect("kv");
    }
    let (mut qkv, mut gate_up) = (0, 0);
    for info in file.tensors() {
        let name = info.name.as_str();
        if [".attn_k.", ".attn_v.", ".ffn_up_exps."]
            .iter()
            .any(|p| name.contains(p))
        {
            continue;
        }
        let (fused, parts, per_expert) = if let Some((layer, suffix)) = name.split_once(".attn_q.")
        {
            let parts = ["attn_q", "attn_k", "attn_v"].map(|p| format!("{layer}.{p}.{suffix}"));
            qkv += usize::from(suffix == "weight");
            (format!("{layer}.attn_qkv.{suffix}"), parts.to_vec(), false)
        } else if let Some((layer, suffix)) = name.split_once(".ffn_gate_exps.") {
            let parts = ["ffn_gate_exps", "ffn_up_exps"].map(|p| format!("{layer}.{p}.{suffix}"));
            gate_up += usize::from(suffix == "weight");
            (
                format!("{layer}.ffn_gate_up_exps.{suffix}"),
                parts.to_vec(),
                true,
            )
        } else {
            let bytes = file.tensor_bytes(name).expect("bytes").to_vec();
            w.add_tensor(name, info.ggml_type, &info.dims, bytes)
                .expect("tensor");
            continue;
        };
        let parts: Vec<_> = parts
            .iter()
            .map(|p| file.tensor(p).expect("part"))
            .collect();
        assert!(
            parts.iter().all(|p| p.ggml_type == info.ggml_type),
            "{fused}: parts of one type"
        );
        // the rows axis: the last (a matrix, a bias) or the one before the experts
        let rows_axis = info.dims.len() - 1 - usize::from(per_expert);
        let mut dims = info.dims.clone();
        dims[rows_axis] = parts.iter().map(|p| p.dims[rows_axis]).sum();
        // an expert's rows of each part, expert after expert
        let experts = if per_expert {
            *info.dims.last().expect("experts") as usize
        } else {
            1
        };
        let mut bytes = Vec::new();
        for e in 0..experts {
            for p in &parts {
                let data = file.tensor_data(p);
                let each = data.len() / experts;
                bytes.extend_from_slice(&data[e * each..(e + 1) * each]);
            }
        }
        w.add_tensor(&fused, info.ggml_type, &dims, bytes)
            .expect("fused");
    }
    let out = std::env::temp_dir().join(format!("gmlx-fused-{tag}-{}.gguf", std::process::id()));
    w.write_to_path(&out).expect("write");
    (out, qkv, gate_up)
}
