//! `gmlx distill` end to end: refusals before either model loads, SmolLM2-135M-Instruct
//! teaching itself five made-up facts it then answers without the documents (held-out
//! paraphrases, against the base model), and a teacher with another tokenizer (the qwen3
//! fixture) whose answers the student learns by byte alignment.
mod common;

use common::{assert_refused, default_model, gmlx, stderr};
use std::path::{Path, PathBuf};
use std::process::Output;

fn facts_dir() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/distill-facts").to_owned()
}

/// A fresh, empty scratch folder for one test.
fn scratch(name: &str) -> PathBuf {
    common::scratch("distill", name)
}

fn distill(teacher: &str, student: &str, data: &str, out: &Path, extra: &[&str]) -> Output {
    let out = out.to_string_lossy().into_owned();
    let mut args = vec!["distill", "--teacher", teacher, "--student", student];
    args.extend(["--data", data, "--adapter-out", &out]);
    args.extend(extra);
    gmlx(&args)
}

#[test]
fn refusals_come_before_either_model_loads() {
    let dir = scratch("refusals");
    let out = dir.join("out/adapter.gguf");
    // a teacher that is not there would fail to load: every refusal below comes first
    let missing = dir.join("missing.gguf").to_string_lossy().into_owned();
    let facts = facts_dir();
    let cases: [(&[&str], &str, &str); 4] = [
        (&["--rank", "0"], &facts, "rank"),
        (&["--teacher-top-k", "0"], &facts, "--teacher-top-k"),
        (&["--dropout", "1"], &facts, "dropout"),
        (
            &[],
            "/nonexistent/distill-data",
            "/nonexistent/distill-data",
        ),
    ];
    for (extra, data, needle) in cases {
        let o = distill(&missing, &missing, data, &out, extra);
        assert_refused(&o, needle);
        assert!(!dir.join("out").exists(), "{extra:?} left output behind");
    }
    // a data file that is not documents with questions
    let bad = dir.join("bad");
    std::fs::create_dir_all(&bad).expect("mkdir");
    let bad_s = bad.to_string_lossy().into_owned();
    std::fs::write(bad.join("train.jsonl"), "{\"document\": 3}\n").expect("write");
    assert_refused(
        &distill(&missing, &missing, &bad_s, &out, &[]),
        "must be a string",
    );
    // documents without questions, and no questions for the teacher to write
    std::fs::write(bad.join("train.jsonl"), "{\"document\": \"x\"}\n").expect("write");
    assert_refused(
        &distill(&missing, &missing, &bad_s, &out, &[]),
        "--teacher-questions",
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The greedy answer of `model` (with `extra` flags) to `question` through its chat template.
fn answer(model: &str, question: &str, extra: &[&str]) -> String {
    let mut args = vec!["run", model, "--prompt", question];
    args.extend(["-n", "32", "--temperature", "0"]);
    args.extend(extra);
    let o = gmlx(&args);
    assert!(o.status.success(), "{question}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Questions worded unlike any in the training data, with the word each fact's answer holds.
const HELD_OUT: [(&str, &str); 5] = [
    ("Tell me the capital of Velmora.", "brisktown"),
    ("Who was the queen that founded Velmora?", "ilsa"),
    ("What do people in Velmora pay with?", "tallon"),
    (
        "Tell me the name of the tallest mountain in Velmora.",
        "caradin",
    ),
    (
        "Which sport do people in Velmora call their national sport?",
        "skyball",
    ),
];

fn facts_answered(model: &str, extra: &[&str]) -> (usize, Vec<String>) {
    let answers: Vec<String> = HELD_OUT
        .iter()
        .map(|(q, _)| answer(model, q, extra))
        .collect();
    let known = HELD_OUT
        .iter()
        .zip(&answers)
        .filter(|((_, fact), a)| a.to_lowercase().contains(fact))
        .count();
    (known, answers)
}

/// The `train loss` figures of the progress lines, in order.
fn train_losses(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains(" step "))
        .filter_map(|l| l.split("train loss ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn the_student_answers_from_documents_it_no_longer_sees() {
    let model = default_model();
    let dir = scratch("facts");
    let o = distill(
        &model,
        &model,
        &facts_dir(),
        &dir,
        &[
            "--iters",
            "40",
            "--batch-size",
            "4",
            "--learning-rate",
            "5e-3",
        ],
    );
    let log = stderr(&o);
    assert!(o.status.success(), "{log}");
    eprintln!("{log}");
    assert!(log.contains("(same vocabulary)"), "{log}");
    let losses = train_losses(&log);
    assert!(
        losses.len() >= 2 && losses[losses.len() - 1] < 0.5 * losses[0],
        "{losses:?}"
    );
    let adapter = dir.join("adapter.gguf");
    assert!(adapter.is_file());
    assert!(dir.join("teacher.jsonl").is_file(), "the teacher's cache");

    let with = ["--adapter", adapter.to_str().expect("utf-8")];
    let (learned, answers) = facts_answered(&model, &with);
    let (base, base_answers) = facts_answered(&model, &[]);
    eprintln!("with the adapter ({learned}/5): {answers:#?}");
    eprintln!("base model ({base}/5): {base_answers:#?}");
    assert!(learned >= 3, "{learned}/5 facts: {answers:#?}");
    assert!(base < 3, "the base model knew {base}/5: {base_answers:#?}");

    // a second run asks the teacher nothing: every answer comes from the cache
    let again = distill(&model, &model, &facts_dir(), &dir, &["--iters", "1"]);
    let log = stderr(&again);
    assert!(again.status.success(), "{log}");
    assert!(log.contains("20 answers (20 from"), "{log}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn across_tokenizers_the_distillation_loss_falls() {
    let teacher = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/qwen3/qwen3-Q8_0.gguf"
    );
    let dir = scratch("cross");
    let o = distill(
        teacher,
        &default_model(),
        &facts_dir(),
        &dir,
        &[
            "--max-answer-tokens",
            "12",
            "--iters",
            "12",
            "--batch-size",
            "4",
            "--learning-rate",
            "1e-2",
        ],
    );
    let log = stderr(&o);
    assert!(o.status.success(), "{log}");
    eprintln!("{log}");
    let line = log
        .lines()
        .find(|l| l.contains("aligned by bytes across the two tokenizers"))
        .unwrap_or_else(|| panic!("no alignment line: {log}"));
    // "R rows; N of M answer positions (P%)". The fixture's random weights answer in stray
    // bytes that are not UTF-8 text, so the student's re-tokenized answer (U+FFFD where the
    // bytes are invalid) matches few or none of them: those positions learn the answer text.
    let counts: Vec<usize> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(counts.len() >= 3 && counts[0] == 20, "{line}");
    assert!(counts[2] >= 20 && counts[1] <= counts[2], "{line}");
    let losses = train_losses(&log);
    assert!(
        losses.len() >= 2 && losses[losses.len() - 1] < losses[0],
        "{losses:?}"
    );
    assert!(dir.join("adapter.gguf").is_file());
    std::fs::remove_dir_all(&dir).ok();
}
