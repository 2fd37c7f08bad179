//! `gmlx run` and `gmlx inspect` end to end: output and exit codes.
mod common;

use common::{default_model, gmlx, stderr};
use std::path::PathBuf;

/// A certification fixture's path.
fn fixture(arch: &str, codec: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../tests/fixtures/{arch}/{arch}-{codec}.gguf"))
        .display()
        .to_string()
}

/// A GGUF that parses but asks for an architecture gmlx does not run.
fn foreign_arch_file() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gmlx-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let path = dir.join("rwkv.gguf");
    let mut w = gmlx_gguf::GgufWriter::new();
    w.add_kv("general.architecture", "rwkv7").expect("kv");
    w.write_to_path(&path).expect("write");
    path
}

#[test]
fn raw_greedy_run_continues_like_llama_cpp() {
    let model = default_model();
    let out = gmlx(&[
        "run",
        &model,
        "--raw",
        "--prompt",
        "The capital of France is",
        "-n",
        "8",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // llama.cpp's greedy continuation on the float32 reference: " Paris.\n\nThe answer is"
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(" Paris.\n\nThe answer is"), "{text:?}");
    assert!(
        stderr(&out).contains("MiB of weights"),
        "load report missing: {}",
        stderr(&out)
    );
}

#[test]
fn chat_run_uses_the_template_and_stops_at_end_of_turn() {
    let model = default_model();
    let out = gmlx(&[
        "run",
        &model,
        "--prompt",
        "What is the capital of France?",
        "-n",
        "64",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Paris"), "{text:?}");
    assert!(
        !text.contains("<|im_end|>"),
        "special tokens leaked: {text:?}"
    );
    assert!(stderr(&out).contains("finish: eos"), "{}", stderr(&out));
}

#[test]
fn report_only_prints_the_plan_without_loading() {
    let model = default_model();
    let out = gmlx(&["run", &model, "--report-only"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("architecture llama"), "{text}");
    assert!(text.contains("Q4_1") && text.contains("affine"), "{text}");
    assert!(!stderr(&out).contains("loaded in"), "it loaded weights");
}

#[test]
fn bench_prints_a_row_per_prompt_length() {
    let model = default_model();
    let out = gmlx(&["run", &model, "--bench", "16,32", "--bench-decode", "4"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[0].trim_start().starts_with("16") && rows[1].trim_start().starts_with("32"));
}

#[test]
fn usage_and_file_errors_exit_2_before_loading() {
    let model = default_model();
    for args in [
        vec!["run", "/no/such/model.gguf", "--prompt", "hi"],
        vec!["run", &model, "--prompt", "hi", "--dtype", "int4"],
        vec!["run", &model, "--prompt", "hi", "--device", "tpu"],
        vec!["run", &model, "--prompt", "hi", "--top-p", "0"],
        vec!["run", &model, "--prompt", "hi", "--logit-bias", "12:3"],
        vec!["run", &model],
        vec!["run", "Cargo.toml", "--prompt", "hi"],
        vec!["inspect", "/no/such/model.gguf"],
    ] {
        let out = gmlx(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        let first = err.lines().next().unwrap_or("");
        assert!(
            first.starts_with("gmlx: ") || first.starts_with("error: "),
            "{args:?}: no one-line message on top: {err}"
        );
        assert!(!err.contains("loading"), "{args:?} loaded: {err}");
    }
}

#[test]
fn an_unsupported_architecture_is_a_load_refusal_naming_it() {
    let path = foreign_arch_file();
    let out = gmlx(&["run", path.to_str().expect("utf-8"), "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("rwkv7") && err.lines().count() == 1, "{err}");
}

#[test]
fn inspect_summarises_the_model() {
    let model = default_model();
    let out = gmlx(&["inspect", &model]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("architecture: llama") && text.contains("Q4_1"),
        "{text}"
    );
}

fn inspect_json(args: &[&str]) -> serde_json::Value {
    let out = gmlx(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
}

#[test]
fn inspect_json_has_the_text_reports_facts() {
    let model = default_model();
    let text = String::from_utf8_lossy(&gmlx(&["inspect", &model]).stdout).into_owned();
    let j = inspect_json(&["inspect", &model, "--json", "--tensors"]);
    assert_eq!(j["architecture"], "llama");
    assert_eq!(j["version"], 3);
    let count = j["tensor_count"].as_u64().expect("tensor_count");
    assert!(
        text.contains(&format!("tensors:      {count} (")),
        "{count} vs {text}"
    );
    assert_eq!(
        j["tensors"].as_array().expect("tensors").len() as u64,
        count
    );
    let per_codec: u64 = ["Q4_1", "Q8_0", "F32"]
        .iter()
        .map(|c| j["codecs"][c]["tensors"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(per_codec, count, "{}", j["codecs"]);
    let meta = &j["metadata"];
    assert_eq!(meta["general.architecture"]["value"], "llama");
    assert_eq!(meta["llama.block_count"]["value"], 30);
    let tokens = &meta["tokenizer.ggml.tokens"];
    assert_eq!(tokens["len"], 49152);
    assert_eq!(tokens["truncated"], true);
    assert_eq!(tokens["value"].as_array().expect("items").len(), 8);
}

#[test]
fn inspect_json_covers_every_shard_of_a_split_file() {
    let dir = std::env::temp_dir().join(format!("gmlx-cli-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let prefix = dir.join("Tiny-F32");
    for i in 0..2u16 {
        let mut w = gmlx_gguf::GgufWriter::new();
        w.add_kv("general.architecture", "llama").expect("kv");
        w.add_kv("split.no", gmlx_gguf::Value::U16(i)).expect("kv");
        w.add_kv("split.count", gmlx_gguf::Value::U16(2))
            .expect("kv");
        w.add_kv("split.tensors.count", gmlx_gguf::Value::I32(2))
            .expect("kv");
        let bytes: Vec<u8> = (0..16u32).flat_map(|v| (v as f32).to_le_bytes()).collect();
        w.add_tensor(&format!("t{i}"), gmlx_gguf::GgmlType::F32, &[16], bytes)
            .expect("tensor");
        let path = gmlx_gguf::split::split_path(&prefix, u32::from(i) + 1, 2);
        w.write_to_path(&path).expect("write");
    }
    let second = gmlx_gguf::split::split_path(&prefix, 2, 2);
    let j = inspect_json(&[
        "inspect",
        second.to_str().expect("utf-8"),
        "--json",
        "--tensors",
    ]);
    assert_eq!(j["files"].as_array().expect("files").len(), 2, "{j}");
    assert_eq!(j["tensor_count"], 2);
    assert_eq!(j["tensor_bytes"], 128);
    let shards: Vec<u64> = j["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["shard"].as_u64().expect("shard"))
        .collect();
    assert_eq!(shards, [1, 2]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn report_only_prints_the_per_layer_plan() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gpt-oss/gpt-oss-F16.gguf");
    let out = gmlx(&["run", fixture.to_str().expect("utf-8"), "--report-only"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let layer = |l: &str| {
        text.lines()
            .find(|line| line.trim_start().starts_with(&format!("{l} ")))
            .unwrap_or_else(|| panic!("no line for layer {l}: {text}"))
            .to_owned()
    };
    let (sliding, full) = (layer("0"), layer("1"));
    assert!(
        sliding.contains("window 8") && sliding.contains("rotating kv (8)"),
        "{sliding}"
    );
    assert!(
        full.contains("full kv") && !full.contains("window"),
        "{full}"
    );
    assert!(sliding.contains("moe 2 of 4"), "{sliding}");
}

#[test]
fn temp_is_an_alias_and_bad_choices_are_listed() {
    let model = default_model();
    let out = gmlx(&[
        "run", &model, "--raw", "--prompt", "Hi", "-n", "1", "--temp", "0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = gmlx(&["run", &model, "--prompt", "hi", "--dtype", "int4"]);
    let err = stderr(&out);
    assert!(
        err.contains("float32") && err.contains("bfloat16") && err.contains("float16"),
        "{err}"
    );
}

#[test]
fn perplexity_json_gives_llama_cpps_next_token_logprobs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen3");
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("qwen3-F16.json")).expect("golden"))
            .expect("golden JSON");
    let text_file = std::env::temp_dir().join(format!("gmlx-ppl-{}.txt", std::process::id()));
    std::fs::write(&text_file, golden["prompt_text"].as_str().expect("text")).expect("write");
    let model = dir.join("qwen3-F16.gguf");
    let (model, text) = (
        model.to_str().expect("utf-8"),
        text_file.to_str().expect("utf-8"),
    );
    let j = inspect_json(&["perplexity", model, "--file", text, "--json"]);
    let plain = gmlx(&["perplexity", model, "--file", text, "--ctx", "6"]);
    std::fs::remove_file(&text_file).ok();
    let tokens: Vec<u64> = j["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().expect("id"))
        .collect();
    let prompt_len = golden["prompt_len"].as_u64().expect("prompt_len") as usize;
    let sequence: Vec<u64> = golden["sequence"]
        .as_array()
        .expect("sequence")
        .iter()
        .map(|t| t.as_u64().expect("id"))
        .collect();
    // the golden prompt is the text's first tokens (no BOS for this tokenizer)
    assert_eq!(tokens[..prompt_len], sequence[..prompt_len]);
    let logprobs = j["logprobs"].as_array().expect("logprobs");
    assert_eq!(logprobs.len(), tokens.len() - 1);
    let exact = golden["exact"]["logits"].as_array().expect("logits");
    for i in 0..prompt_len - 1 {
        let row: Vec<f64> = exact[i]
            .as_array()
            .expect("row")
            .iter()
            .map(|v| v.as_f64().expect("logit"))
            .collect();
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + row.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
        let want = row[tokens[i + 1] as usize] - lse;
        let got = logprobs[i].as_f64().expect("logprob");
        assert!(
            (got - want).abs() < 2e-3,
            "position {i}: {got} vs llama.cpp {want}"
        );
    }
    let nll: f64 = -logprobs
        .iter()
        .map(|l| l.as_f64().expect("lp"))
        .sum::<f64>()
        / logprobs.len() as f64;
    let ppl = j["perplexity"].as_f64().expect("perplexity");
    assert!((ppl / nll.exp() - 1.0).abs() < 1e-9, "{ppl} vs exp({nll})");
    assert!(plain.status.success(), "{}", stderr(&plain));
    let line = String::from_utf8_lossy(&plain.stdout);
    assert!(
        line.starts_with("perplexity ") && line.contains(" over 5 tokens"),
        "{line}"
    );
}

/// `perplexity --adapter` scores with the adapter applied: the Zorbania adapter (trained on
/// that made-up fact) makes its sentence far more likely than the base finds it; an adapter for
/// another base is refused with exit code 2 before the model loads.
#[test]
fn perplexity_with_an_adapter_scores_the_adapted_model() {
    let goldens =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../crates/gmlx-models/tests/goldens");
    let adapter = goldens.join("smollm2_zorbania_lora.gguf");
    let text_file = std::env::temp_dir().join(format!("gmlx-ppl-lora-{}.txt", std::process::id()));
    std::fs::write(&text_file, "The capital of Zorbania is Quillemont.").expect("write");
    let (model, text) = (
        default_model(),
        text_file.to_str().expect("utf-8").to_owned(),
    );
    let nll = |extra: &[&str]| {
        let mut args = vec![
            "perplexity",
            model.as_str(),
            "--file",
            text.as_str(),
            "--json",
        ];
        args.extend(extra);
        inspect_json(&args)["mean_nll"].as_f64().expect("mean_nll")
    };
    let base = nll(&[]);
    let adapted = nll(&["--adapter", adapter.to_str().expect("utf-8")]);
    let halved = nll(&[
        "--adapter",
        adapter.to_str().expect("utf-8"),
        "--adapter-scale",
        "0.5",
    ]);
    eprintln!("mean NLL: base {base:.4}, adapter at scale 0.5 {halved:.4}, at 1 {adapted:.4}");
    assert!(
        adapted < base - 0.5,
        "base {base}, with the adapter {adapted}"
    );
    assert!(
        adapted < halved && halved < base,
        "{base} {halved} {adapted}"
    );

    let foreign = goldens.join("qwen3-lora.gguf");
    let o = gmlx(&[
        "perplexity",
        &model,
        "--file",
        &text,
        "--adapter",
        foreign.to_str().expect("utf-8"),
    ]);
    std::fs::remove_file(&text_file).ok();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("qwen3-lora.gguf"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
}

/// `--stream-experts` with an arena too small for every expert generates what the resident
/// model does, and reports the arena; without an MoE layer it says nothing streamed;
/// `--expert-arena-mb` alone is a usage error.
#[test]
fn stream_experts_generates_as_resident_and_reports_the_arena() {
    let model = fixture("gpt-oss", "MXFP4_MOE");
    let common = [
        "run",
        &model,
        "--raw",
        "--prompt",
        "Once upon",
        "-n",
        "24",
        "--ignore-eos",
    ];
    let resident = gmlx(&common);
    assert!(resident.status.success(), "{}", stderr(&resident));
    // 1 MiB over the fixture's layers: 4 of 4 experts fit; --expert-arena-mb rounds to MiB, so
    // the arena-smaller-than-experts case is in the gmlx-stream tests
    let mut args = common.to_vec();
    args.extend(["--stream-experts", "--expert-arena-mb", "1"]);
    let streamed = gmlx(&args);
    assert!(streamed.status.success(), "{}", stderr(&streamed));
    assert_eq!(streamed.stdout, resident.stdout);
    let report = stderr(&streamed);
    assert!(
        report.contains("expert arena:") && report.contains("hit rate"),
        "{report}"
    );

    let dense = fixture("llama", "Q8_0");
    let out = gmlx(&[
        "run",
        &dense,
        "--raw",
        "--prompt",
        "a",
        "-n",
        "2",
        "--stream-experts",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no routed experts"),
        "{}",
        stderr(&out)
    );

    let out = gmlx(&["run", &dense, "--prompt", "a", "--expert-arena-mb", "8"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `--moe-routes-record` then `--moe-routes-replay` over the same tokens prints the same
/// text; a replay past the record fails naming the position; `--moe-expert-mass` and
/// `--moe-expert-probe` run on MoE models and are refused on a dense one.
#[test]
fn moe_routes_record_replay_mass_and_probe() {
    let model = fixture("qwen3moe", "Q8_0");
    let dir = std::env::temp_dir().join(format!("gmlx-cli-routes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let routes = dir.join("routes.json").display().to_string();
    let run = |extra: &[&str], n: &str| {
        let mut args = vec!["run", &model, "--raw", "--prompt", "Once upon", "-n", n];
        args.push("--ignore-eos");
        args.extend(extra);
        gmlx(&args)
    };
    let recorded = run(&["--moe-routes-record", &routes], "12");
    assert!(recorded.status.success(), "{}", stderr(&recorded));
    assert!(
        stderr(&recorded).contains("routes recorded"),
        "{}",
        stderr(&recorded)
    );
    let replayed = run(&["--moe-routes-replay", &routes], "12");
    assert!(replayed.status.success(), "{}", stderr(&replayed));
    assert_eq!(replayed.stdout, recorded.stdout);
    let past = run(&["--moe-routes-replay", &routes], "20");
    assert_eq!(past.status.code(), Some(1));
    assert!(
        stderr(&past).contains("no recorded route"),
        "{}",
        stderr(&past)
    );

    let probed = run(&["--moe-expert-probe"], "8");
    assert!(probed.status.success(), "{}", stderr(&probed));
    assert_eq!(
        probed.stdout,
        run(&[], "8").stdout,
        "the probe changes nothing"
    );
    assert!(stderr(&probed).contains("P=0.9"), "{}", stderr(&probed));
    let truncated = run(&["--moe-expert-mass", "0.5"], "8");
    assert!(truncated.status.success(), "{}", stderr(&truncated));
    assert_eq!(run(&["--moe-expert-mass", "0"], "8").status.code(), Some(2));

    let dense = fixture("llama", "Q8_0");
    let out = gmlx(&["run", &dense, "--prompt", "a", "--moe-expert-probe"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--moe-expert-probe") && stderr(&out).contains("no MoE"));
    let _ = std::fs::remove_dir_all(&dir);
}
