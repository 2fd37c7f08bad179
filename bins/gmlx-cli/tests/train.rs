//! `gmlx train` and `gmlx run --adapter` end to end: refusals before load (exit 2, one line,
//! nothing left behind), adapter-file rejections, a run that learns a made-up fact, and the
//! written adapter read back by gguf-py's `GGUFReader`.
mod common;

use common::{assert_refused, default_model, gmlx, stderr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data_dir() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/made-up-fact").to_owned()
}

/// A fresh, empty scratch folder for one test.
fn scratch(name: &str) -> PathBuf {
    common::scratch("train", name)
}

/// `gmlx train MODEL --data DATA --adapter-out OUT`: rank 8, 12 steps of batch 2 at lr 1e-2,
/// validation every 6 steps (when DATA has `valid.jsonl`), seed 1, then `extra`.
fn train_briefly(model: &str, data: &str, out: &str, extra: &[&str]) -> Output {
    let mut args = vec!["train", model, "--data", data, "--adapter-out", out];
    args.extend(["--rank", "8", "--iters", "12", "--batch-size", "2"]);
    args.extend(["--learning-rate", "1e-2", "--val-every", "6", "--seed", "1"]);
    args.extend(extra);
    gmlx(&args)
}

/// `gmlx run MODEL`'s 8 greedy tokens after "The capital of Zorbania is", with `extra` flags.
fn zorbania(model: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "run",
        model,
        "--raw",
        "--prompt",
        "The capital of Zorbania is",
    ];
    args.extend(["-n", "8", "--temperature", "0", "--ignore-eos"]);
    args.extend(extra);
    let o = gmlx(&args);
    assert!(o.status.success(), "{model}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn refusals_come_before_the_model_loads_and_leave_nothing_behind() {
    let dir = scratch("refusals");
    let data = dir.join("data");
    std::fs::create_dir(&data).expect("data dir");
    let out_path = dir.join("out/");
    let out = out_path.to_string_lossy().into_owned();
    let data_s = data.to_string_lossy().into_owned();
    let model = default_model();
    let train = |extra: &[&str], data: &str, out: &str| {
        let mut args = vec![
            "train",
            model.as_str(),
            "--data",
            data,
            "--adapter-out",
            out,
        ];
        args.extend_from_slice(extra);
        gmlx(&args)
    };

    let missing = dir.join("nope").to_string_lossy().into_owned();
    assert_refused(&train(&[], &missing, &out), "does not exist");
    assert_refused(&train(&[], &data_s, &out), "train.jsonl");

    std::fs::write(
        data.join("train.jsonl"),
        "{\"text\": \"fine\"}\n{\"prompt\": \"no completion\"}\n",
    )
    .expect("write");
    assert_refused(
        &train(&[], &data_s, &out),
        "train.jsonl:2: missing \"completion\"",
    );
    std::fs::write(data.join("train.jsonl"), "{\"text\": \"fine\"}\n").expect("write");
    std::fs::write(data.join("valid.jsonl"), "not json\n").expect("write");
    assert_refused(&train(&[], &data_s, &out), "valid.jsonl:1: not valid JSON");
    std::fs::remove_file(data.join("valid.jsonl")).expect("rm");

    let ok = data_dir();
    assert_refused(&train(&["--rank", "0"], &ok, &out), "--rank");
    assert_refused(&train(&["--rank", "-3"], &ok, &out), "--rank");
    assert_refused(&train(&["--dropout", "1"], &ok, &out), "--dropout");
    assert_refused(&train(&["--dropout", "-0.1"], &ok, &out), "--dropout");
    assert_refused(&train(&["--keys", "wq"], &ok, &out), "--keys");
    let file = dir.join("data/train.jsonl").to_string_lossy().into_owned();
    assert_refused(
        &train(&[], &ok, &format!("{file}/")),
        "exists and is not a folder",
    );
    let unwritable = dir.join("no/such/folder/a.gguf");
    assert_refused(
        &train(&[], &ok, &unwritable.to_string_lossy()),
        "does not exist",
    );

    // Nothing was created: no out/ folder, no stray files.
    assert_eq!(listing(&dir), vec!["data".to_owned()]);
    std::fs::remove_dir_all(&dir).expect("rm");
}

#[test]
fn a_run_that_fails_after_loading_leaves_nothing_behind() {
    let dir = scratch("fails");
    let data = dir.join("data");
    std::fs::create_dir(&data).expect("data dir");
    // Rows that parse but leave nothing to train on (under two tokens each).
    std::fs::write(data.join("train.jsonl"), "{\"text\": \"\"}\n").expect("write");
    let out_dir = format!("{}/out/", dir.display());
    let o = gmlx(&[
        "train",
        &default_model(),
        "--data",
        &data.to_string_lossy(),
        "--adapter-out",
        &out_dir,
        "--iters",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("no rows"), "{}", stderr(&o));
    assert_eq!(listing(&dir), vec!["data".to_owned()]);
    std::fs::remove_dir_all(&dir).expect("rm");
}

type Edit<'a> = Box<dyn FnOnce(&mut gmlx_gguf::GgufWriter<'static>) + 'a>;

fn write_adapter(path: &Path, edit: impl FnOnce(&mut gmlx_gguf::GgufWriter<'static>)) {
    let mut w = gmlx_gguf::GgufWriter::new();
    edit(&mut w);
    w.write_to_path(path).expect("write adapter");
}

#[test]
fn adapter_files_are_checked_before_the_model_loads() {
    let dir = scratch("adapters");
    let model = default_model();
    let kv = |w: &mut gmlx_gguf::GgufWriter<'static>, k: &str, v: &str| w.add_kv(k, v).expect("kv");
    let header = |w: &mut gmlx_gguf::GgufWriter<'static>, arch: &str, alpha: bool| {
        kv(w, "general.architecture", arch);
        kv(w, "general.type", "adapter");
        kv(w, "adapter.type", "lora");
        if alpha {
            w.add_kv("adapter.lora.alpha", 16.0f32).expect("alpha");
        }
    };
    // SmolLM2-135M: hidden 576, so attn_q is [576, 576].
    let pair = |w: &mut gmlx_gguf::GgufWriter<'static>, target: &str, a: bool, b: bool| {
        if a {
            w.add_f32(&format!("{target}.lora_a"), &[576, 2], &[0.0; 1152])
                .expect("a");
        }
        if b {
            w.add_f32(&format!("{target}.lora_b"), &[2, 576], &[0.0; 1152])
                .expect("b");
        }
    };
    let q = "blk.0.attn_q.weight";
    let cases: Vec<(&str, Edit<'_>, &str)> = vec![
        (
            "type",
            Box::new(|w| {
                kv(w, "general.architecture", "llama");
                kv(w, "general.type", "model");
            }),
            "general.type",
        ),
        (
            "kind",
            Box::new(|w| {
                kv(w, "general.architecture", "llama");
                kv(w, "general.type", "adapter");
                kv(w, "adapter.type", "control_vector");
            }),
            "adapter.type",
        ),
        (
            "alpha",
            Box::new(move |w| {
                header(w, "llama", false);
                pair(w, q, true, true);
            }),
            "adapter.lora.alpha",
        ),
        (
            "arch",
            Box::new(move |w| {
                header(w, "qwen3", true);
                pair(w, q, true, true);
            }),
            "does not match",
        ),
        (
            "half",
            Box::new(move |w| {
                header(w, "llama", true);
                pair(w, q, true, false);
            }),
            "lora_b is missing",
        ),
        (
            "target",
            Box::new(|w| {
                header(w, "llama", true);
                pair(w, "blk.99.attn_q.weight", true, true);
            }),
            "does not exist in the base model",
        ),
    ];
    for (name, edit, needle) in cases {
        let path = dir.join(format!("{name}.gguf"));
        write_adapter(&path, edit);
        let o = gmlx(&[
            "run",
            &model,
            "--raw",
            "--prompt",
            "hi",
            "-n",
            "1",
            "--adapter",
            &path.to_string_lossy(),
        ]);
        assert_refused(&o, needle);
        assert!(!stderr(&o).contains("loading"), "refused after loading");
    }
    std::fs::remove_dir_all(&dir).expect("rm");
}

fn python() -> PathBuf {
    let p = std::env::var_os("GMLX_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/gmlx/pyenv/bin/python")
        });
    assert!(
        p.is_file(),
        "no Python with gguf at {} (set GMLX_PYTHON to a python that can `import gguf`)",
        p.display()
    );
    p
}

/// The adapter as gguf-py's GGUFReader sees it: key types and values, tensor shapes.
fn read_with_gguf_py(path: &Path) -> serde_json::Value {
    let script = r#"
import json, sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
kv = {}
for f in r.fields.values():
    if f.name.startswith("GGUF."):
        continue
    kv[f.name] = {"type": f.types[0].name, "value": f.contents()}
tensors = {t.name: {"type": t.tensor_type.name, "shape": [int(d) for d in t.shape],
                    "numpy": list(t.data.shape)} for t in r.tensors}
print(json.dumps({"kv": kv, "tensors": tensors}))
"#;
    let out = Command::new(python())
        .args(["-c", script, &path.to_string_lossy()])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "gguf-py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn training_learns_a_made_up_fact_and_run_applies_the_adapter_live() {
    let dir = scratch("learns");
    let model = default_model();
    let out_dir = format!("{}/adapters/", dir.display());
    let t = gmlx(&[
        "train",
        &model,
        "--data",
        &data_dir(),
        "--adapter-out",
        &out_dir,
        "--rank",
        "8",
        "--num-layers",
        "2",
        "--iters",
        "24",
        "--batch-size",
        "2",
        "--learning-rate",
        "1e-2",
        "--report-every",
        "6",
        "--val-every",
        "0",
        "--seed",
        "1",
    ]);
    let log = stderr(&t);
    eprintln!("{log}");
    assert!(t.status.success(), "{log}");
    assert!(
        log.contains("step 6/24  train loss"),
        "progress lines: {log}"
    );
    assert!(log.contains("tok/s") && log.contains("peak"), "{log}");

    // The summary: "train loss A -> B, val loss C -> D".
    let summary = log
        .lines()
        .find(|l| l.contains("trained 24 steps"))
        .expect("summary line");
    let losses: Vec<f32> = summary
        .split(" -> ")
        .flat_map(|s| s.split([' ', ',', ';']))
        .filter_map(|w| w.parse().ok())
        .collect();
    let numbers_after = |label: &str| -> (f32, f32) {
        let rest = &summary[summary.find(label).expect(label) + label.len()..];
        let mut it = rest
            .split([' ', ',', ';'])
            .filter_map(|w| w.parse::<f32>().ok());
        (it.next().expect("before"), it.next().expect("after"))
    };
    let (train_before, train_after) = numbers_after("train loss ");
    let (val_before, val_after) = numbers_after("val loss ");
    assert!(!losses.is_empty());
    assert!(
        train_after < 0.5 * train_before,
        "train loss {train_before} -> {train_after}"
    );
    assert!(
        val_after < 0.5 * val_before,
        "val loss {val_before} -> {val_after}"
    );

    let adapter = PathBuf::from(&out_dir).join("adapter.gguf");
    assert!(adapter.is_file());
    assert_eq!(
        listing(Path::new(&out_dir)),
        vec!["adapter.gguf".to_owned()]
    );

    // gguf-py reads it with llama.cpp's keys, types and shapes.
    let g = read_with_gguf_py(&adapter);
    assert_eq!(g["kv"]["general.type"]["value"], "adapter");
    assert_eq!(g["kv"]["adapter.type"]["value"], "lora");
    assert_eq!(g["kv"]["general.architecture"]["value"], "llama");
    assert_eq!(g["kv"]["adapter.lora.alpha"]["type"], "FLOAT32");
    assert_eq!(g["kv"]["adapter.lora.alpha"]["value"], 16.0);
    let tensors = g["tensors"].as_object().expect("tensors");
    assert_eq!(
        tensors.len(),
        2 * 7 * 2,
        "7 projections x 2 blocks, a and b"
    );
    let a = &tensors["blk.29.attn_q.weight.lora_a"];
    let b = &tensors["blk.29.attn_q.weight.lora_b"];
    assert_eq!(a["type"], "F32");
    assert_eq!(
        a["numpy"],
        serde_json::json!([8, 576]),
        "lora_a is [rank, in]"
    );
    assert_eq!(
        b["numpy"],
        serde_json::json!([576, 8]),
        "lora_b is [out, rank]"
    );
    let down_b = &tensors["blk.28.ffn_down.weight.lora_b"];
    assert_eq!(down_b["numpy"], serde_json::json!([576, 8]));
    let down_a = &tensors["blk.28.ffn_down.weight.lora_a"];
    assert_eq!(down_a["numpy"], serde_json::json!([8, 1536]));

    // Applied live, the adapter turns the base model's answer into the trained one.
    let ask = |adapter: Option<&Path>| {
        let mut args = vec![
            "run".to_owned(),
            model.clone(),
            "--raw".into(),
            "--prompt".into(),
            "The capital of Zorbania is".into(),
            "-n".into(),
            "6".into(),
        ];
        if let Some(a) = adapter {
            args.extend(["--adapter".into(), a.to_string_lossy().into_owned()]);
        }
        let o = Command::new(env!("CARGO_BIN_EXE_gmlx"))
            .args(&args)
            .output()
            .expect("run");
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let base = ask(None);
    let tuned = ask(Some(&adapter));
    eprintln!("base: {base:?}\ntuned: {tuned:?}");
    assert!(!base.contains("Quillemont"), "{base:?}");
    assert!(tuned.contains("Quillemont"), "{tuned:?}");
    std::fs::remove_dir_all(&dir).expect("rm");
}

#[test]
fn an_interrupted_run_exits_130_and_leaves_nothing_behind() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = scratch("interrupted");
    std::fs::create_dir(dir.join("data")).expect("data dir");
    std::fs::copy(
        Path::new(&data_dir()).join("train.jsonl"),
        dir.join("data/train.jsonl"),
    )
    .expect("copy rows");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gmlx"))
        .args([
            "train",
            &default_model(),
            "--data",
            &dir.join("data").to_string_lossy(),
            "--adapter-out",
            &format!("{}/out/", dir.display()),
            "--iters",
            "100000",
            "--num-layers",
            "2",
            "--report-every",
            "1",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gmlx train");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen = String::new();
    // interrupt once training is under way
    for line in lines.by_ref() {
        let line = line.expect("stderr line");
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("step 1/") {
            break;
        }
    }
    assert!(seen.contains("step 1/"), "training never started:\n{seen}");
    // SAFETY: sends SIGINT to our own child.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    for line in lines {
        seen.push_str(&line.expect("stderr line"));
        seen.push('\n');
    }
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130), "{seen}");
    assert!(seen.to_lowercase().contains("interrupt"), "{seen}");
    assert_eq!(listing(&dir), vec!["data".to_owned()], "{seen}");
    std::fs::remove_dir_all(&dir).expect("rm");
}

/// Every certified architecture's fixture trains (hybrids: gradients through the chunked scan;
/// MoE: the routers' discrete choice left out of the tape; `hy_v4`: latent attention, the
/// indexer's selection handed between blocks, residual streams; `deepseek4`: the compressors,
/// the indexer's top-k, Sinkhorn-mixed streams, hash routing), with and without validation data
/// (every other architecture validates), and the adapter changes what `gmlx run` generates.
#[test]
fn hybrid_and_moe_fixtures_train_and_their_adapters_apply() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
    let archs = [
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "qwen3moe",
        "llama",
        "qwen3",
        "gpt-oss",
        "hy_v4",
        "deepseek4",
        "kimi-k3",
        "glm5-next",
        "qwen4exp",
    ];
    // the made-up-fact rows without their valid.jsonl
    let train_only = scratch("train-only");
    std::fs::create_dir_all(&train_only).expect("dir");
    std::fs::copy(
        Path::new(&data_dir()).join("train.jsonl"),
        train_only.join("train.jsonl"),
    )
    .expect("copy");
    let train_only = train_only.display().to_string();
    for (i, arch) in archs.into_iter().enumerate() {
        let validate = i % 2 == 1;
        let data = if validate {
            data_dir()
        } else {
            train_only.clone()
        };
        let model = format!("{fixtures}/{arch}/{arch}-Q8_0.gguf");
        let dir = scratch(&format!("fixture-{arch}"));
        let out_dir = format!("{}/adapters/", dir.display());
        let t = train_briefly(&model, &data, &out_dir, &[]);
        let log = stderr(&t);
        assert!(t.status.success(), "{arch}: {log}");
        assert_eq!(log.contains("val loss"), validate, "{arch}: {log}");
        let adapter = format!("{out_dir}adapter.gguf");
        assert_ne!(
            zorbania(&model, &[]),
            zorbania(&model, &["--adapter", &adapter]),
            "{arch}: the adapter changed nothing\n{log}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_dir_all(&train_only);
}

/// With `MLX_ENABLE_TF32=1`, training a gated-DeltaNet model prints one notice; without it,
/// or on an attention-only model, none.
#[test]
fn tf32_on_a_delta_net_model_gets_one_notice() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
    let train = |arch: &str, tf32: Option<&str>| -> String {
        let model = format!("{fixtures}/{arch}/{arch}-Q8_0.gguf");
        let dir = scratch(&format!("tf32-{arch}-{}", tf32.unwrap_or("unset")));
        let out_dir = format!("{}/adapters/", dir.display());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gmlx"));
        cmd.args([
            "train",
            &model,
            "--data",
            &data_dir(),
            "--adapter-out",
            &out_dir,
        ])
        .args(["--iters", "1", "--batch-size", "1", "--val-every", "0"]);
        match tf32 {
            Some(v) => cmd.env("MLX_ENABLE_TF32", v),
            None => cmd.env_remove("MLX_ENABLE_TF32"),
        };
        let out = cmd.output().expect("run gmlx");
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    let notices = |log: &str| log.matches("notice: MLX_ENABLE_TF32 is on").count();
    assert_eq!(notices(&train("qwen35moe", Some("1"))), 1);
    assert_eq!(notices(&train("qwen35moe", None)), 0);
    assert_eq!(notices(&train("qwen35moe", Some("0"))), 0);
    assert_eq!(notices(&train("qwen3moe", Some("1"))), 0);
}

/// The shared expert's projections and the gated DeltaNet's fused `attn_qkv`, `attn_gate` and
/// `ssm_out` are adapter targets: trained alone (`--keys`), they are the adapter's tensors,
/// and `gmlx run --adapter` applies them (the text changes; at scale 0 it is the base's).
#[test]
fn shared_experts_and_fused_delta_net_projections_train_and_apply() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
    let model = format!("{fixtures}/qwen35moe/qwen35moe-Q8_0.gguf");
    let dir = scratch("shexp-qkv");
    let out_dir = format!("{}/adapters/", dir.display());
    let keys = "attn_qkv,attn_gate,ssm_out,ffn_gate_shexp,ffn_up_shexp,ffn_down_shexp";
    let t = train_briefly(&model, &data_dir(), &out_dir, &["--keys", keys]);
    assert!(t.status.success(), "{}", stderr(&t));
    let adapter = format!("{out_dir}adapter.gguf");
    let file = gmlx_gguf::GgufFile::open(&adapter).expect("adapter");
    let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    for key in keys.split(',') {
        assert!(
            names
                .iter()
                .any(|n| n.contains(&format!(".{key}.weight.lora_a"))),
            "{key} missing from {names:?}"
        );
    }
    assert!(
        names.iter().all(|n| keys.split(',').any(|k| n.contains(k))),
        "only the keys asked for: {names:?}"
    );
    let base = zorbania(&model, &[]);
    let adapted = zorbania(&model, &["--adapter", &adapter]);
    assert_ne!(adapted, base, "the adapter changed nothing");
    let scaled_to_zero = zorbania(&model, &["--adapter", &adapter, "--adapter-scale", "0"]);
    assert_eq!(scaled_to_zero, base);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Adapting only the top blocks of `hy_v4` trains: its blocks hand residual streams and the
/// indexer's selection to the next, so the frozen blocks below run with the adapted ones
/// rather than from cached hidden states.
#[test]
fn the_top_blocks_of_a_hyper_connected_indexer_model_train() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
    let model = format!("{fixtures}/hy_v4/hy_v4-Q8_0.gguf");
    let dir = scratch("hy_v4-top");
    let out_dir = format!("{}/adapters/", dir.display());
    let t = train_briefly(&model, &data_dir(), &out_dir, &["--num-layers", "2"]);
    assert!(t.status.success(), "{}", stderr(&t));
    let file = gmlx_gguf::GgufFile::open(format!("{out_dir}adapter.gguf")).expect("adapter");
    assert!(file.tensors().iter().all(|t| !t.name.starts_with("blk.0.")));
    let _ = std::fs::remove_dir_all(&dir);
}
