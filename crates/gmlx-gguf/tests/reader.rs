//! Reader: versions, typed accessors, and every validation error on hand-made hostile headers.

mod common;

use common::{random_blocks, scratch, Rng};
use gmlx_gguf::names::{Kv, Tensor};
use gmlx_gguf::{parse_header, Error, GgmlType, GgufFile, GgufWriter, Limits, Value};

/// A raw header builder for hostile inputs.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn new(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw::default();
        r.0.extend_from_slice(b"GGUF");
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn pad(&mut self, n: usize) -> &mut Self {
        self.0.extend(std::iter::repeat_n(0u8, n));
        self
    }
    fn parse(&self) -> gmlx_gguf::Result<gmlx_gguf::Header> {
        parse_header(&self.0, &Limits::default())
    }
}

fn err_of(r: gmlx_gguf::Result<gmlx_gguf::Header>) -> Error {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

fn small_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama").expect("kv");
    w.add_kv("llama.block_count", 2u32).expect("kv");
    w.add_kv("llama.rope.freq_base", 10000.0f32).expect("kv");
    w.add_kv("llama.attention.head_count", vec![4u32, 8])
        .expect("kv");
    w.add_kv("big", u64::MAX).expect("kv");
    w.add_kv("tokenizer.ggml.tokens", vec!["a", "b"])
        .expect("kv");
    let mut rng = Rng(3);
    w.add_tensor(
        &Tensor::AttnQ.weight(0),
        GgmlType::Q8_0,
        &[64, 2],
        random_blocks(GgmlType::Q8_0, 4, &mut rng),
    )
    .expect("tensor");
    w.add_f32(&Tensor::OutputNorm.weight(0), &[3], &[1.0, 2.0, 3.0])
        .expect("tensor");
    w.to_bytes()
}

#[test]
fn reads_v3_and_v2() {
    let bytes = small_file();
    let h = parse_header(&bytes, &Limits::default()).expect("v3");
    assert_eq!(h.version, 3);
    assert_eq!(h.tensors.len(), 2);
    let mut v2 = bytes.clone();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    let h2 = parse_header(&v2, &Limits::default()).expect("v2");
    assert_eq!(h2.version, 2);
    assert_eq!(h2.tensors, h.tensors);
}

#[test]
fn typed_accessors_resolve_arch_and_name_key_and_type_in_errors() {
    let dir = scratch("accessors");
    let p = dir.join("a.gguf");
    std::fs::write(&p, small_file()).expect("write");
    let f = GgufFile::open(&p).expect("open");
    let md = f.metadata();
    assert_eq!(md.get_u32(&Kv::BlockCount).expect("u32"), 2);
    assert_eq!(md.get_u64("{arch}.block_count").expect("u64"), 2);
    assert_eq!(md.get_usize("llama.block_count").expect("usize"), 2);
    assert_eq!(md.get_f32(&Kv::RopeFreqBase).expect("f32"), 10000.0);
    assert_eq!(
        md.get_u32_per_layer(&Kv::AttentionHeadCount, 2)
            .expect("per layer"),
        vec![4, 8]
    );
    assert_eq!(
        md.get_u32_per_layer(&Kv::BlockCount, 3).expect("broadcast"),
        vec![2, 2, 2]
    );
    assert_eq!(
        md.get_str_array(&Kv::TokenizerTokens).expect("tokens"),
        &["a".to_string(), "b".to_string()]
    );
    assert_eq!(md.opt_u32(&Kv::ExpertCount).expect("opt"), None);

    let e = md.get_u32(&Kv::TokenizerTokens).expect_err("wrong type");
    let msg = e.to_string();
    assert!(
        msg.contains("tokenizer.ggml.tokens") && msg.contains("array of string"),
        "{msg}"
    );
    let e = md.get_u32("big").expect_err("out of range").to_string();
    assert!(e.contains("big") && e.contains("u32"), "{e}");
    let e = md
        .get_u32(&Kv::ContextLength)
        .expect_err("missing")
        .to_string();
    assert!(e.contains("llama.context_length"), "{e}");
    let e = md.get_str(&Kv::BlockCount).expect_err("wrong").to_string();
    assert!(e.contains("llama.block_count") && e.contains("u32"), "{e}");

    assert_eq!(
        f.tensor(&Tensor::OutputNorm.weight(0)).expect("t").dims,
        [3]
    );
    assert_eq!(
        f.dequantize(&Tensor::OutputNorm.weight(0)).expect("deq"),
        [1.0, 2.0, 3.0]
    );
    let e = f.tensor("nope").expect_err("missing tensor").to_string();
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn no_arch_is_an_error_naming_the_key() {
    let mut w = GgufWriter::new();
    w.add_kv("x", 1u32).expect("kv");
    let h = parse_header(&w.to_bytes(), &Limits::default()).expect("parse");
    let e = h.metadata.get_u32(&Kv::BlockCount).expect_err("no arch");
    assert!(matches!(e, Error::NoArchitecture { .. }), "{e}");
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = small_file();
    let h = parse_header(&bytes, &Limits::default()).expect("full");
    for n in 0..bytes.len() {
        match parse_header(&bytes[..n], &Limits::default()) {
            Err(e) => assert!(!e.to_string().is_empty()),
            // Cutting only padding or data: fine as long as every tensor is still inside.
            Ok(h2) => assert!(
                n as u64
                    >= h.data_offset
                        + h.tensors
                            .iter()
                            .map(|t| t.offset + t.n_bytes)
                            .max()
                            .unwrap_or(0),
                "accepted a file cut at {n}: {h2:?}"
            ),
        }
    }
}

#[test]
fn header_errors() {
    let e = err_of(parse_header(b"GGML\x03\0\0\0", &Limits::default()));
    assert!(matches!(e, Error::BadMagic { .. }), "{e}");
    let e = err_of(Raw::new(1, 0, 0).parse());
    assert!(matches!(e, Error::UnsupportedVersion { version: 1 }), "{e}");
    let e = err_of(Raw::new(3u32.swap_bytes(), 0, 0).parse());
    assert!(matches!(e, Error::BigEndian { swapped: 3 }), "{e}");
    let e = err_of(Raw::new(3, u64::MAX, 0).parse());
    assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
    let e = err_of(Raw::new(3, 1000, 0).parse());
    assert!(matches!(e, Error::Truncated { .. }), "{e}");
    let e = err_of(Raw::new(3, 0, 1 << 19).parse());
    assert!(matches!(e, Error::Truncated { .. }), "{e}");
}

#[test]
fn hostile_lengths_do_not_allocate() {
    // A key claiming a 2^62-byte string.
    let mut r = Raw::new(3, 0, 1);
    r.u64(1 << 62).pad(16);
    let e = err_of(r.parse());
    assert!(e.to_string().contains("key of metadata entry #0"), "{e}");
    // An array claiming 2^40 u64 elements.
    let mut r = Raw::new(3, 0, 1);
    r.str("k").u32(9).u32(10).u64(1 << 40).pad(64);
    let e = err_of(r.parse());
    assert!(e.to_string().contains("'k'"), "{e}");
    // An array of 2^27 strings of which only a few bytes exist.
    let mut r = Raw::new(3, 0, 1);
    r.str("s").u32(9).u32(8).u64(1 << 27).pad(64);
    assert!(matches!(err_of(r.parse()), Error::Truncated { .. }));
    // Deeply nested arrays: stops at the depth limit, no stack overflow.
    let mut r = Raw::new(3, 0, 1);
    r.str("deep").u32(9);
    for _ in 0..10_000 {
        r.u32(9).u64(1);
    }
    let e = err_of(r.parse());
    assert!(e.to_string().contains("nesting"), "{e}");
    // Unknown value type.
    let mut r = Raw::new(3, 0, 1);
    r.str("k").u32(13).pad(8);
    assert!(matches!(
        err_of(r.parse()),
        Error::UnknownValueType { type_id: 13, .. }
    ));
    // Invalid UTF-8 in a key.
    let mut r = Raw::new(3, 0, 1);
    r.u64(2);
    r.0.extend_from_slice(&[0xFF, 0xFE]);
    r.u32(0).pad(1);
    assert!(matches!(err_of(r.parse()), Error::InvalidUtf8 { .. }));
    // Duplicate key.
    let mut r = Raw::new(3, 0, 2);
    r.str("k").u32(4).u32(1).str("k").u32(4).u32(2);
    assert!(matches!(err_of(r.parse()), Error::DuplicateKey { .. }));
}

fn one_tensor(name: &str, dims: &[u64], ty: u32, offset: u64, data_len: usize) -> Raw {
    let mut r = Raw::new(3, 1, 0);
    r.str(name).u32(dims.len() as u32);
    for d in dims {
        r.u64(*d);
    }
    r.u32(ty).u64(offset);
    let pad = (32 - r.0.len() % 32) % 32;
    r.pad(pad + data_len);
    r
}

#[test]
fn tensor_table_errors() {
    assert!(one_tensor("t", &[4, 2], 0, 0, 32).parse().is_ok());
    let e = err_of(one_tensor("t", &[4, 2], 0, 0, 31).parse());
    assert!(matches!(e, Error::TensorOutOfBounds { .. }), "{e}");
    assert!(e.to_string().contains("'t'"), "{e}");
    let e = err_of(one_tensor("t", &[4, 2], 0, 16, 64).parse());
    assert!(matches!(e, Error::MisalignedTensor { .. }), "{e}");
    let e = err_of(one_tensor("t", &[4, 2], 0, u64::MAX - 31, 64).parse());
    assert!(matches!(e, Error::TensorOutOfBounds { .. }), "{e}");
    let e = err_of(one_tensor("t", &[1 << 32, 1 << 32], 0, 0, 64).parse());
    assert!(e.to_string().contains("overflow"), "{e}");
    let e = err_of(one_tensor("t", &[u64::MAX], 0, 0, 64).parse());
    assert!(matches!(e, Error::BadShape { .. }), "{e}");
    let e = err_of(one_tensor("t", &[1, 1, 1, 1, 1], 0, 0, 64).parse());
    assert!(e.to_string().contains("5 dimensions"), "{e}");
    let e = err_of(one_tensor("t", &[16], 2, 0, 64).parse());
    assert!(e.to_string().contains("block size 32"), "{e}");
    let e = err_of(one_tensor("t", &[32], 31, 0, 64).parse());
    assert!(
        matches!(e, Error::UnknownGgmlType { type_id: 31, .. }),
        "{e}"
    );
    // Bad alignment values.
    for a in [0u32, 3, 48] {
        let mut r = Raw::new(3, 0, 1);
        r.str("general.alignment").u32(4).u32(a);
        assert!(
            matches!(err_of(r.parse()), Error::BadAlignment { .. }),
            "{a}"
        );
    }
}

#[test]
fn unsupported_codecs_are_refused_with_name_and_count() {
    let dir = scratch("unsupported");
    let p = dir.join("q8k.gguf");
    let mut w = GgufWriter::new();
    for i in 0..2 {
        let n = GgmlType::Q8_K.type_size();
        w.add_tensor(&format!("t{i}"), GgmlType::Q8_K, &[256], vec![0u8; n])
            .expect("tensor");
    }
    w.add_f32("ok", &[1], &[0.0]).expect("tensor");
    w.write_to_path(&p).expect("write");
    let f = GgufFile::open(&p).expect("open");
    let e = f.check_codecs().expect_err("refused").to_string();
    assert_eq!(e, "codec Q8_K is not supported (2 tensor(s) use it)");
    assert!(f.dequantize("t0").is_err());
}

#[test]
fn writer_rejects_bad_input() {
    let mut w = GgufWriter::new();
    w.add_kv("a", 1u8).expect("kv");
    assert!(w.add_kv("a", 2u8).is_err());
    assert!(w.add_kv("general.alignment", 3u32).is_err());
    assert!(w.add_kv("general.alignment", Value::U64(64)).is_err());
    assert!(w
        .add_tensor("t", GgmlType::Q4_0, &[32], vec![0u8; 17])
        .is_err());
    assert!(w
        .add_tensor("t", GgmlType::Q4_0, &[16], vec![0u8; 9])
        .is_err());
    w.add_tensor("t", GgmlType::Q4_0, &[32], vec![0u8; 18])
        .expect("ok");
    assert!(w
        .add_tensor("t", GgmlType::Q4_0, &[32], vec![0u8; 18])
        .is_err());
}
