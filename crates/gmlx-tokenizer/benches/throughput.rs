//! Encode and decode throughput (MB/s of UTF-8 text) on a few MB of mixed text: C++
//! source, Markdown, Jinja templates and the multilingual inputs of llama.cpp's
//! tokenizer suite, from `$GMLX_LLAMA_CPP`.
//!
//! `cargo bench -p gmlx-tokenizer --bench throughput` (optionally `-- gpt-2 llama-spm`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use gmlx_tokenizer::Tokenizer;

const TARGET_BYTES: usize = 4 << 20;
const DEFAULT_VOCABS: &[&str] = &["gpt-2", "llama-bpe", "qwen2", "llama-spm", "gemma-4"];

fn llama_cpp_dir() -> PathBuf {
    match std::env::var_os("GMLX_LLAMA_CPP") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/gmlx/llama-cpp-python-0.3.36/vendor/llama.cpp"),
    }
}

fn push_files(dir: &Path, ext: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.extension().and_then(|e| e.to_str()) == Some(ext) {
            if let Ok(text) = std::fs::read_to_string(&p) {
                out.push(text);
            }
        }
    }
}

/// A few MB of mixed text, the same on every run.
fn corpus(root: &Path) -> String {
    let mut parts = Vec::new();
    push_files(&root.join("src"), "cpp", &mut parts);
    push_files(&root.join("docs"), "md", &mut parts);
    push_files(&root.join("models/templates"), "jinja", &mut parts);
    push_files(&root.join("models"), "inp", &mut parts);
    let mut text = String::with_capacity(TARGET_BYTES + (1 << 20));
    'fill: loop {
        for p in &parts {
            text.push_str(p);
            if text.len() >= TARGET_BYTES {
                break 'fill;
            }
        }
        if parts.is_empty() {
            break;
        }
    }
    text
}

fn main() {
    let root = llama_cpp_dir();
    let text = corpus(&root);
    if text.is_empty() {
        eprintln!(
            "no corpus: llama.cpp sources not found at {} (set GMLX_LLAMA_CPP)",
            root.display()
        );
        std::process::exit(1);
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let vocabs: Vec<String> = if args.is_empty() {
        DEFAULT_VOCABS.iter().map(|s| s.to_string()).collect()
    } else {
        args
    };
    let mb = text.len() as f64 / 1e6;
    println!("corpus: {:.2} MB of mixed text", mb);
    println!(
        "{:<12} {:>10} {:>14} {:>14}",
        "vocab", "tokens", "encode MB/s", "decode MB/s"
    );
    for name in vocabs {
        let path = root.join("models").join(format!("ggml-vocab-{name}.gguf"));
        let start = Instant::now();
        let tok = match Tokenizer::from_gguf_path(&path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{name}: {e}");
                continue;
            }
        };
        let load_ms = start.elapsed().as_secs_f64() * 1e3;
        // One warm-up pass fills the BPE cache as a long-running server's would be.
        let _ = tok.encode(&text[..text.len().min(1 << 20)], false, false);
        let start = Instant::now();
        let ids = match tok.encode(&text, false, false) {
            Ok(ids) => ids,
            Err(e) => {
                eprintln!("{name}: {e}");
                continue;
            }
        };
        let encode_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let decoded = tok.decode(&ids, false).unwrap_or_default();
        let decode_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut stream = tok.stream_decoder(false);
        let mut streamed = 0usize;
        for &id in &ids {
            streamed += stream.push(id).map(|s| s.len()).unwrap_or(0);
        }
        streamed += stream.finish().len();
        let stream_s = start.elapsed().as_secs_f64();
        assert_eq!(
            streamed,
            decoded.len(),
            "{name}: streaming and full decode differ"
        );
        println!(
            "{:<12} {:>10} {:>14.1} {:>14.1}   (streaming decode {:.1} MB/s; built in {:.0} ms)",
            name,
            ids.len(),
            mb / encode_s,
            mb / decode_s,
            mb / stream_s,
            load_ms
        );
    }
}
