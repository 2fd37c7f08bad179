//! Property-based fuzzing of the reader (and of the codecs and repacker on what it accepts).
//!
//! Inputs: valid files from the writer, mutated (bit flips, interesting integers written over
//! counts and lengths, truncation, insertion, deletion, splices) plus random bytes behind a
//! valid magic. Properties, for every input:
//! - `parse_header` returns `Ok` or `Err`, never panics;
//! - parsing allocates at most `64 * input length + 64 KiB` at its peak (a counting global
//!   allocator measures it), so a hostile 1 KB header cannot allocate gigabytes;
//! - when it returns `Ok`, every tensor lies inside the input, and dequantizing, repacking,
//!   reading every metadata key with every getter and (for one accepted input in 64) the
//!   `inspect` report return values or errors, never panic.
//!
//! `cargo test -p gmlx-gguf --test fuzz` runs 100 000 cases (about 2 s). Longer runs:
//! `GMLX_FUZZ_CASES=5000000 GMLX_FUZZ_SEED=1 cargo test --release -p gmlx-gguf --test fuzz -- --nocapture`.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::{random_blocks, Rng};
use gmlx_gguf::inspect::{report, Options};
use gmlx_gguf::repack::affine_layout;
use gmlx_gguf::{parse_header, Array, GgmlType, GgufFile, GgufWriter, Limits, Value};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only adds relaxed counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn seeds() -> Vec<Vec<u8>> {
    let mut rng = Rng(99);
    let mut out = Vec::new();
    // One file per decodable codec, plus one rich in metadata.
    for (i, ty) in GgmlType::all().enumerate() {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "llama").ok();
        if i % 3 == 0 {
            w.add_kv("general.alignment", Value::U32(16)).ok();
        }
        w.add_kv("llama.block_count", Value::U32(1)).ok();
        let bs = ty.block_size() as u64;
        let dims = if bs == 1 { vec![4, 2] } else { vec![bs, 2] };
        let n = (dims[0] * dims[1] / bs) as usize;
        w.add_tensor(
            "blk.0.attn_q.weight",
            ty,
            &dims,
            random_blocks(ty, n, &mut rng),
        )
        .ok();
        out.push(w.to_bytes());
    }
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "qwen3").ok();
    w.add_kv("tokenizer.ggml.tokens", vec!["a", "bb", "ccc"])
        .ok();
    w.add_kv("tokenizer.ggml.scores", vec![0.5f32, -1.0, 2.0])
        .ok();
    w.add_kv("qwen3.attention.head_count", vec![4u32, 4, 8])
        .ok();
    w.add_kv(
        "nested",
        vec![Array::U64(vec![1, 2]), Array::String(vec!["x".into()])],
    )
    .ok();
    w.add_kv("f64", 1.5f64).ok();
    w.add_kv("b", true).ok();
    w.add_f32("output_norm.weight", &[3], &[1.0, 2.0, 3.0]).ok();
    w.add_f32("x", &[1, 1, 1, 1], &[1.0]).ok();
    out.push(w.to_bytes());
    out
}

const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    9,
    12,
    13,
    16,
    31,
    32,
    33,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0xFFFF,
    0x1_0000,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    1 << 32,
    1 << 40,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
    u64::MAX - 31,
];

fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = seed.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let len = b.len().max(1) as u64;
        match rng.below(9) {
            0 | 1 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(len) as usize;
                    if let Some(x) = b.get_mut(i) {
                        *x ^= 1 << rng.below(8);
                    }
                }
            }
            2 | 3 => {
                // An interesting integer over a (probably) count, length, type or offset field,
                // biased towards the header and tables.
                let v = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
                let limit = len.min(if rng.below(2) == 0 { 256 } else { len });
                let i = rng.below(limit) as usize;
                let width = [1usize, 2, 4, 8][rng.below(4) as usize];
                let bytes = v.to_le_bytes();
                for (k, &byte) in bytes.iter().take(width).enumerate() {
                    if let Some(x) = b.get_mut(i + k) {
                        *x = byte;
                    }
                }
            }
            4 => b.truncate(rng.below(len + 1) as usize),
            5 => {
                let i = rng.below(len + 1) as usize;
                let n = 1 + rng.below(16) as usize;
                let ins = rng.bytes(n);
                let i = i.min(b.len());
                b.splice(i..i, ins);
            }
            6 => {
                let i = rng.below(len) as usize;
                let n = (1 + rng.below(16) as usize).min(b.len().saturating_sub(i));
                b.drain(i..i + n);
            }
            7 => {
                let i = rng.below(len) as usize;
                let n = 1 + rng.below(64) as usize;
                for k in 0..n {
                    if let Some(x) = b.get_mut(i + k) {
                        *x = rng.next_u64() as u8;
                    }
                }
            }
            _ => {
                // Fresh random bytes behind a valid magic and version.
                let n = rng.below(2048) as usize;
                b = b"GGUF\x03\0\0\0".to_vec();
                b.extend(rng.bytes(n));
            }
        }
    }
    b
}

/// Exercise everything downstream of an accepted header.
fn exercise(bytes: &[u8], h: &gmlx_gguf::Header) {
    for t in &h.tensors {
        let start = h.data_offset + t.offset;
        let end = start + t.n_bytes;
        assert!(
            end <= bytes.len() as u64,
            "tensor {} outside the input",
            t.name
        );
        let data = &bytes[start as usize..end as usize];
        assert_eq!(t.row_len() * t.n_rows(), t.n_elements());
        assert_eq!(t.shape().len(), t.dims.len());
        if t.n_bytes <= 1 << 20 {
            let r = gmlx_gguf::dequantize(t.ggml_type, data, t.n_elements());
            assert_eq!(r.is_ok(), t.ggml_type.can_dequantize());
            if affine_layout(t.ggml_type).is_ok() {
                let aff = gmlx_gguf::repack_affine(t.ggml_type, data, &t.dims);
                assert!(aff.is_ok(), "{:?}", aff.err());
            }
        }
    }
    let md = &h.metadata;
    for (k, _) in md.entries() {
        let _ = md.get_u32(k.as_str());
        let _ = md.get_i64(k.as_str());
        let _ = md.get_f32(k.as_str());
        let _ = md.get_str(k.as_str());
        let _ = md.get_bool(k.as_str());
        let _ = md.get_str_array(k.as_str());
        let _ = md.get_u32_array(k.as_str());
        let _ = md.get_u32_per_layer(k.as_str(), 3);
        let _ = md.value(k.as_str()).map(|v| v.map(|v| v.to_string()));
    }
}

#[test]
fn fuzz_reader() {
    let cases: u64 = std::env::var("GMLX_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let seed: u64 = std::env::var("GMLX_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0xF022);
    let corpus = seeds();
    let limits = Limits::default();
    let started = Instant::now();
    let (mut accepted, mut max_ratio) = (0u64, 0f64);
    for case in 0..cases {
        let mut rng = Rng(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let input = mutate(&corpus[rng.below(corpus.len() as u64) as usize], &mut rng);
        let outcome = std::panic::catch_unwind(|| {
            let base = CURRENT.load(Ordering::Relaxed);
            PEAK.store(base, Ordering::Relaxed);
            let parsed = parse_header(&input, &limits);
            let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
            (parsed, peak)
        });
        let (parsed, peak) = match outcome {
            Ok(x) => x,
            Err(p) => {
                eprintln!(
                    "panic on case {case} (GMLX_FUZZ_SEED={seed}); input {:02x?}",
                    input
                );
                std::panic::resume_unwind(p);
            }
        };
        let budget = 64 * input.len() + (64 << 10);
        assert!(
            peak <= budget,
            "case {case} (seed {seed}): parsing {} bytes allocated {peak} bytes",
            input.len()
        );
        max_ratio = max_ratio.max(peak as f64 / input.len().max(1) as f64);
        if let Ok(h) = parsed {
            accepted += 1;
            exercise(&input, &h);
            if accepted % 64 == 1 {
                let file = GgufFile::from_bytes(input, &limits).expect("accepted once");
                let _ = file.check_codecs();
                let text = report(
                    &file,
                    &Options {
                        tensors: true,
                        ..Default::default()
                    },
                );
                assert!(text.contains("GGUF version"));
            }
        }
    }
    println!(
        "fuzz: {cases} cases (seed {seed}) in {:.1} s, {accepted} accepted, no panic, peak \
         parse allocation at most {max_ratio:.1} x input size",
        started.elapsed().as_secs_f64()
    );
}
