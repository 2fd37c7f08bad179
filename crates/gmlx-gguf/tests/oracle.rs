//! Comparisons with the Python reference (gguf-py 0.19.0 + NumPy), run through `$GMLX_PYTHON`.
//! These tests fail (never skip) when the oracle is missing.

mod common;

use std::fmt::Write as _;

use common::{random_blocks, run_oracle, scratch, Rng};
use gmlx_gguf::{Array, GgmlType, GgufFile, GgufWriter, Value};
use serde_json::Value as Json;

/// Codecs the installed gguf-py cannot dequantize; every other decodable codec must be compared.
const NO_ORACLE: &[GgmlType] = &[GgmlType::Q1_0, GgmlType::Q2_0];

/// Blocks per codec (elements for the plain scalar types).
fn n_blocks(ty: GgmlType) -> usize {
    if ty.block_size() == 1 {
        1 << 16
    } else {
        (1 << 19) / ty.block_size()
    }
}

#[test]
fn every_codec_matches_gguf_py_bit_for_bit() {
    let dir = scratch("codec-oracle");
    let mut rng = Rng(0x5EED_0001);
    let mut manifest = String::new();
    let mut jobs = Vec::new();
    for ty in GgmlType::all().filter(|t| t.can_dequantize()) {
        let n = n_blocks(ty);
        let bytes = random_blocks(ty, n, &mut rng);
        let inp = dir.join(format!("{}.in", ty.name()));
        let outp = dir.join(format!("{}.out", ty.name()));
        std::fs::write(&inp, &bytes).expect("write blocks");
        writeln!(
            manifest,
            "{} {} {}",
            ty.name(),
            inp.display(),
            outp.display()
        )
        .ok();
        jobs.push((ty, n, bytes, outp));
    }
    let manifest_path = dir.join("manifest.txt");
    std::fs::write(&manifest_path, manifest).expect("write manifest");
    let stdout = run_oracle("dequant.py", &[&manifest_path]);
    let verdicts: Vec<(&str, &str)> = stdout.lines().filter_map(|l| l.split_once(' ')).collect();
    assert_eq!(verdicts.len(), jobs.len(), "oracle output: {stdout}");

    let mut report = String::new();
    for ((ty, n, bytes, outp), (verdict, name)) in jobs.iter().zip(&verdicts) {
        assert_eq!(*name, ty.name());
        if *verdict == "unsupported" {
            assert!(NO_ORACLE.contains(ty), "gguf-py cannot dequantize {ty}");
            writeln!(report, "{ty:<8} no oracle in gguf-py").ok();
            continue;
        }
        assert!(
            !NO_ORACLE.contains(ty),
            "{ty} now has an oracle; update NO_ORACLE"
        );
        let n_el = (n * ty.block_size()) as u64;
        let ours = gmlx_gguf::dequantize(*ty, bytes, n_el).expect("dequantize");
        let theirs = std::fs::read(outp).expect("oracle output");
        assert_eq!(theirs.len(), ours.len() * 4, "{ty}: length");
        let mut mismatches = 0usize;
        let mut first = None;
        for (i, (a, b)) in ours.iter().zip(theirs.chunks_exact(4)).enumerate() {
            let b = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if a.to_bits() != b {
                mismatches += 1;
                first.get_or_insert((i, *a, f32::from_bits(b)));
            }
        }
        assert_eq!(
            mismatches, 0,
            "{ty}: {mismatches} of {} values differ from gguf.quants ({verdict}); first (index, ours, theirs) = {first:?}",
            ours.len()
        );
        writeln!(
            report,
            "{ty:<8} {n} blocks, {} values bit-identical ({verdict})",
            ours.len()
        )
        .ok();
    }
    println!("{report}");
}

fn gguf_py_type_name(t: gmlx_gguf::ValueType) -> &'static str {
    use gmlx_gguf::ValueType as V;
    match t {
        V::U8 => "UINT8",
        V::I8 => "INT8",
        V::U16 => "UINT16",
        V::I16 => "INT16",
        V::U32 => "UINT32",
        V::I32 => "INT32",
        V::F32 => "FLOAT32",
        V::Bool => "BOOL",
        V::String => "STRING",
        V::Array => "ARRAY",
        V::U64 => "UINT64",
        V::I64 => "INT64",
        V::F64 => "FLOAT64",
        _ => "?",
    }
}

/// GGUFReader's `types` list: the value's type, then (for arrays) the types of the first element.
fn py_types(v: &Value, out: &mut Vec<&'static str>) {
    out.push(gguf_py_type_name(v.value_type()));
    if let Value::Array(a) = v {
        if let Some(first) = a.get(0) {
            py_types(&first, out);
        }
    }
}

fn leaf_json(v: &Value, out: &mut Vec<Json>) {
    match v {
        Value::Array(a) => {
            for i in 0..a.len() {
                if let Some(e) = a.get(i) {
                    leaf_json(&e, out);
                }
            }
        }
        Value::String(s) => out.push(Json::from(s.as_str())),
        Value::Bool(b) => out.push(Json::from(*b)),
        Value::F32(x) => out.push(Json::from(f64::from(*x))),
        Value::F64(x) => out.push(Json::from(*x)),
        v => {
            let i = v.as_integer().expect("integer");
            out.push(if i < 0 {
                Json::from(i as i64)
            } else {
                Json::from(i as u64)
            });
        }
    }
}

/// GGUFReader's `contents()`: scalars as themselves, arrays flattened to their leaves.
fn py_contents(v: &Value) -> Json {
    let mut leaves = Vec::new();
    leaf_json(v, &mut leaves);
    match v {
        Value::Array(_) => Json::Array(leaves),
        _ => leaves.pop().unwrap_or(Json::Null),
    }
}

fn sample_metadata() -> Vec<(String, Value)> {
    vec![
        ("general.architecture".into(), "llama".into()),
        ("general.alignment".into(), Value::U32(64)),
        ("general.name".into(), "tiny ✓ unicode".into()),
        ("t.u8".into(), Value::U8(200)),
        ("t.i8".into(), Value::I8(-100)),
        ("t.u16".into(), Value::U16(60000)),
        ("t.i16".into(), Value::I16(-30000)),
        ("t.u32".into(), Value::U32(4_000_000_000)),
        ("t.i32".into(), Value::I32(-2_000_000_000)),
        ("t.f32".into(), Value::F32(0.1)),
        ("t.bool".into(), Value::Bool(true)),
        ("t.string".into(), "".into()),
        ("t.u64".into(), Value::U64(u64::MAX - 1)),
        ("t.i64".into(), Value::I64(i64::MIN + 1)),
        ("t.f64".into(), Value::F64(-1e300)),
        ("t.arr_u8".into(), vec![1u8, 2, 255].into()),
        ("t.arr_i32".into(), vec![-1i32, 0, 7].into()),
        ("t.arr_f32".into(), vec![1.5f32, -0.25, 3e-8].into()),
        ("t.arr_bool".into(), vec![true, false, true].into()),
        ("t.arr_str".into(), vec!["a", "", "ĉ ß"].into()),
        ("t.arr_u64".into(), vec![u64::MAX, 0].into()),
        ("t.arr_f64".into(), vec![0.5f64, -2.0].into()),
        ("t.arr_empty".into(), Value::Array(Array::U32(vec![]))),
        (
            "t.nested_i16".into(),
            vec![Array::I16(vec![1, -2]), Array::I16(vec![3])].into(),
        ),
        (
            "t.nested_str".into(),
            vec![
                Array::String(vec!["x".into()]),
                Array::String(vec!["y".into(), "z".into()]),
            ]
            .into(),
        ),
    ]
}

#[test]
fn writer_output_reads_back_identically_with_gguf_reader_and_ours() {
    let dir = scratch("writer-oracle");
    let path = dir.join("all.gguf");
    let mut rng = Rng(7);
    let md = sample_metadata();
    let mut w = GgufWriter::new();
    for (k, v) in &md {
        w.add_kv(k, v.clone()).expect("add kv");
    }
    let tensors: Vec<(String, GgmlType, Vec<u64>)> = vec![
        ("token_embd.weight".into(), GgmlType::F32, vec![8, 3]),
        ("scalar".into(), GgmlType::F32, vec![1]),
        ("f16.4d".into(), GgmlType::F16, vec![2, 3, 2, 2]),
        ("blk.0.attn_q.weight".into(), GgmlType::Q4_0, vec![64, 3]),
        ("blk.0.ffn_up.weight".into(), GgmlType::Q4_K, vec![256, 2]),
        (
            "blk.0.ffn_down.weight".into(),
            GgmlType::IQ2_XXS,
            vec![256, 1, 2],
        ),
        ("odd.i8".into(), GgmlType::I8, vec![5]),
    ];
    let mut datas = Vec::new();
    for (name, ty, dims) in &tensors {
        let n: u64 = dims.iter().product();
        let data = random_blocks(*ty, (n as usize) / ty.block_size(), &mut rng);
        w.add_tensor(name, *ty, dims, data.clone())
            .expect("add tensor");
        datas.push(data);
    }
    w.write_to_path(&path).expect("write");

    // Our reader.
    let f = GgufFile::open(&path).expect("open");
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.metadata().entries(), md.as_slice());
    for ((name, ty, dims), data) in tensors.iter().zip(&datas) {
        let t = f.tensor(name).expect("tensor");
        assert_eq!((&t.ggml_type, &t.dims), (ty, dims));
        assert_eq!(t.offset % 64, 0);
        assert_eq!(f.tensor_bytes(name).expect("bytes"), data.as_slice());
    }

    compare_with_gguf_reader(&path, &f);
    for ((name, _, _), data) in tensors.iter().zip(&datas) {
        assert_eq!(f.tensor_bytes(name).expect("bytes"), data.as_slice());
    }
}

/// Read `path` with gguf-py's GGUFReader and check it sees exactly what `f` holds: every
/// metadata key, type list and value, and every tensor's name, type, dims, size, offset and bytes.
fn compare_with_gguf_reader(path: &std::path::Path, f: &GgufFile) {
    let md = f.metadata().entries();
    let out = run_oracle("read_gguf.py", &[path]);
    let j: Json = serde_json::from_str(&out).expect("json");
    assert_eq!(j["alignment"].as_u64(), Some(f.alignment()));
    assert_eq!(j["data_offset"].as_u64(), Some(f.data_offset()));
    let kvs = j["kvs"].as_array().expect("kvs");
    assert_eq!(kvs.len(), md.len());
    for (kv, (k, v)) in kvs.iter().zip(md) {
        assert_eq!(kv["key"], k.as_str());
        let mut types = Vec::new();
        py_types(v, &mut types);
        let theirs: Vec<&str> = kv["types"]
            .as_array()
            .expect("types")
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        assert_eq!(theirs, types, "types of {k} in {}", path.display());
        let ours = py_contents(v);
        if kv["value"] != ours {
            let (a, b) = (kv["value"].as_array(), ours.as_array());
            let first = a
                .zip(b)
                .and_then(|(a, b)| a.iter().zip(b).enumerate().find(|(_, (x, y))| x != y));
            panic!(
                "value of {k} in {} differs; first differing element (index, gguf-py, ours): {first:?}",
                path.display()
            );
        }
    }
    let jt = j["tensors"].as_array().expect("tensors");
    assert_eq!(jt.len(), f.tensors().len());
    for (t, info) in jt.iter().zip(f.tensors()) {
        assert_eq!(t["name"], info.name.as_str());
        assert_eq!(t["type"].as_u64(), Some(u64::from(info.ggml_type.id())));
        let jd: Vec<u64> = t["dims"]
            .as_array()
            .expect("dims")
            .iter()
            .filter_map(|d| d.as_u64())
            .collect();
        assert_eq!(jd, info.dims);
        assert_eq!(t["n_bytes"].as_u64(), Some(info.n_bytes));
        assert_eq!(
            t["data_offset"].as_u64(),
            Some(f.data_offset() + info.offset)
        );
        let hex: String = f
            .tensor_data(info)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            t["data_hex"].as_str(),
            Some(hex.as_str()),
            "data of {}",
            info.name
        );
    }
}

/// llama.cpp's sources (`$GMLX_LLAMA_CPP`, else the `cargo xtask setup` cache location).
fn llama_cpp() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("GMLX_LLAMA_CPP") {
        return p.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    std::path::Path::new(&home).join(".cache/gmlx/llama-cpp-python-0.3.36/vendor/llama.cpp")
}

#[test]
fn llama_cpp_vocab_files_read_identically_with_gguf_reader_and_ours() {
    let dir = llama_cpp().join("models");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "llama.cpp sources missing at {} ({e}); run `cargo xtask setup` or set GMLX_LLAMA_CPP",
                dir.display()
            )
        })
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    // GGUFReader takes seconds per large vocabulary: by default compare the four smallest files
    // (SentencePiece, BPE and WordPiece vocabularies); GMLX_ORACLE_ALL_VOCABS=1 compares all.
    files.sort_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(u64::MAX));
    assert!(!files.is_empty(), "no .gguf in {}", dir.display());
    if std::env::var_os("GMLX_ORACLE_ALL_VOCABS").is_none() {
        files.truncate(4);
    }
    for p in &files {
        let f = GgufFile::open(p).unwrap_or_else(|e| panic!("{e}"));
        compare_with_gguf_reader(p, &f);
    }
    println!("{} llama.cpp vocab files read identically", files.len());
}
