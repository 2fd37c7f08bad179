//! `gmlx run` and `gmlx inspect` end to end: output and exit codes.
use std::path::PathBuf;
use std::process::{Command, Output};

fn gmlx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gmlx"))
        .args(args)
        .output()
        .expect("run gmlx")
}

fn default_model() -> String {
    gmlx_models::default_model::fetch()
        .expect("the default model")
        .display()
        .to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
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
    assert!(
        stderr(&out).contains("finish: Some(Eos)"),
        "{}",
        stderr(&out)
    );
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
