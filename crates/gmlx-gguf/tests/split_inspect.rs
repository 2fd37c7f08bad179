//! Split models opened as one file, and the `gmlx inspect` report.

mod common;

use common::{random_blocks, scratch, Rng};
use gmlx_gguf::inspect::{report, Options};
use gmlx_gguf::split::split_path;
use gmlx_gguf::{Error, GgmlType, GgufFile, GgufWriter, Value};

/// Write `count` shards as llama-gguf-split does: split.no (u16, 0-based), split.count (u16),
/// split.tensors.count (i32), metadata on every shard, two tensors per shard.
fn write_split(dir: &std::path::Path, count: u16, bad_no: Option<u16>) -> Vec<Vec<u8>> {
    let prefix = dir.join("Model-Q4_0");
    let mut rng = Rng(42);
    let mut datas = Vec::new();
    for i in 0..count {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "llama").expect("kv");
        w.add_kv(
            "split.no",
            Value::U16(if bad_no == Some(i) { 7 } else { i }),
        )
        .expect("kv");
        w.add_kv("split.count", Value::U16(count)).expect("kv");
        w.add_kv("split.tensors.count", Value::I32(2 * i32::from(count)))
            .expect("kv");
        for k in 0..2 {
            let data = random_blocks(GgmlType::Q4_0, 2, &mut rng);
            w.add_tensor(&format!("t{i}.{k}"), GgmlType::Q4_0, &[64], data.clone())
                .expect("tensor");
            datas.push(data);
        }
        let path = split_path(&prefix, u32::from(i) + 1, u32::from(count));
        w.write_to_path(&path).expect("write");
    }
    datas
}

#[test]
fn split_model_opens_from_any_shard() {
    let dir = scratch("split-ok");
    let datas = write_split(&dir, 3, None);
    for shard in 1..=3 {
        let p = split_path(&dir.join("Model-Q4_0"), shard, 3);
        let f = GgufFile::open(&p).expect("open");
        assert_eq!(f.paths().len(), 3);
        assert_eq!(f.tensors().len(), 6);
        for (i, data) in datas.iter().enumerate() {
            let name = format!("t{}.{}", i / 2, i % 2);
            assert_eq!(f.tensor_bytes(&name).expect("bytes"), data.as_slice());
            assert_eq!(f.tensor(&name).expect("info").shard, i / 2);
        }
        let text = report(
            &f,
            &Options {
                tensors: true,
                ..Default::default()
            },
        );
        assert!(text.contains("[shard 3]"), "{text}");
    }
    // open_single sees one shard only.
    let one = GgufFile::open_single(split_path(&dir.join("Model-Q4_0"), 2, 3)).expect("single");
    assert_eq!(one.tensors().len(), 2);
}

#[test]
fn missing_shards_are_all_named() {
    let dir = scratch("split-missing");
    write_split(&dir, 3, None);
    let prefix = dir.join("Model-Q4_0");
    std::fs::remove_file(split_path(&prefix, 1, 3)).expect("rm");
    std::fs::remove_file(split_path(&prefix, 3, 3)).expect("rm");
    let e = GgufFile::open(split_path(&prefix, 2, 3)).expect_err("missing");
    match &e {
        Error::MissingShards { missing } => assert_eq!(missing.len(), 2),
        other => panic!("{other}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("Model-Q4_0-00001-of-00003.gguf")
            && msg.contains("Model-Q4_0-00003-of-00003.gguf"),
        "{msg}"
    );
}

#[test]
fn inconsistent_shards_are_errors() {
    let dir = scratch("split-bad");
    write_split(&dir, 2, Some(1));
    let e = GgufFile::open(split_path(&dir.join("Model-Q4_0"), 1, 2)).expect_err("bad no");
    assert!(e.to_string().contains("split.no is 7, expected 1"), "{e}");

    let dir = scratch("split-renamed");
    write_split(&dir, 2, None);
    let renamed = dir.join("renamed.gguf");
    std::fs::rename(split_path(&dir.join("Model-Q4_0"), 1, 2), &renamed).expect("mv");
    let e = GgufFile::open(&renamed).expect_err("not a split name");
    assert!(e.to_string().contains("NAME-00001-of-00003"), "{e}");
}

#[test]
fn inspect_report_summarises() {
    let dir = scratch("inspect");
    let p = dir.join("m.gguf");
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "qwen3").expect("kv");
    w.add_kv("qwen3.block_count", 2u32).expect("kv");
    let toks: Vec<String> = (0..1000).map(|i| format!("tok{i}")).collect();
    w.add_kv("tokenizer.ggml.tokens", toks).expect("kv");
    w.add_kv("tokenizer.chat_template", "x".repeat(500))
        .expect("kv");
    let mut rng = Rng(5);
    w.add_tensor(
        "a",
        GgmlType::Q8_0,
        &[32, 2],
        random_blocks(GgmlType::Q8_0, 2, &mut rng),
    )
    .expect("t");
    w.add_tensor(
        "b",
        GgmlType::Q8_0,
        &[32],
        random_blocks(GgmlType::Q8_0, 1, &mut rng),
    )
    .expect("t");
    w.add_tensor("c", GgmlType::Q8_K, &[256], vec![0u8; 292])
        .expect("t");
    w.write_to_path(&p).expect("write");
    let f = GgufFile::open(&p).expect("open");

    let short = report(&f, &Options::default());
    println!("{short}");
    assert!(short.contains("GGUF version: 3"));
    assert!(short.contains("architecture: qwen3"));
    assert!(short.contains("... (1000 items)]"), "{short}");
    assert!(short.contains("(500 chars)"));
    assert!(short.contains("Q8_0          2 tensors"), "{short}");
    assert!(short.contains("Q8_K          1 tensors") && short.contains("(unsupported)"));
    assert!(!short.contains("shape (ggml order)"));
    let long = report(
        &f,
        &Options {
            tensors: true,
            ..Default::default()
        },
    );
    assert!(long.contains("shape (ggml order)"));
    assert!(
        long.lines()
            .any(|l| l.starts_with('a') && l.contains("32 x 2")),
        "{long}"
    );
}
