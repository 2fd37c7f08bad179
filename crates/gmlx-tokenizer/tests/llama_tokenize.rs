//! Special-token parsing, BOS/EOS insertion and the SentencePiece space prefix against
//! llama.cpp's `llama-tokenize` (goldens from `tests/python/make_llama_tokenize_goldens.py`).
#![allow(clippy::unwrap_used)]

mod util;

use gmlx_tokenizer::Tokenizer;
use serde_json::Value;

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn check(name: &str, tok: &Tokenizer, rows: &[Value]) -> Vec<String> {
    let mut failures = Vec::new();
    for row in rows {
        let text = row["text"].as_str().unwrap();
        let add = row["add_special"].as_bool().unwrap();
        let parse = row["parse_special"].as_bool().unwrap();
        let want: Vec<u32> = row["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        match tok.encode(text, add, parse) {
            Ok(got) if got == want => {}
            other => failures.push(format!(
                "{name}: {text:?} add_special={add} parse_special={parse}\n    llama.cpp {want:?}\n    gmlx      {other:?}"
            )),
        }
    }
    failures
}

fn goldens() -> serde_json::Map<String, Value> {
    let g = util::read_json(&util::data_file("llama_tokenize_goldens.json"));
    g["vocabs"].as_object().unwrap().clone()
}

#[test]
fn suite_vocabs_match_llama_tokenize() {
    let models = util::llama_cpp_dir().join("models");
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, rows) in goldens() {
        if name == SMOLLM2 {
            continue;
        }
        let tok = Tokenizer::from_gguf_path(models.join(&name)).unwrap();
        let rows = rows.as_array().unwrap();
        checked += rows.len();
        failures.extend(check(&name, &tok, rows));
    }
    eprintln!("{checked} encodings compared, {} differ", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn smollm2_matches_llama_tokenize() {
    let tok = Tokenizer::from_gguf_path(util::smollm2_path()).unwrap();
    assert_eq!(tok.pre_tokenizer(), Some("smollm"));
    assert!(!tok.add_bos());
    let g = goldens();
    let failures = check(SMOLLM2, &tok, g[SMOLLM2].as_array().unwrap());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // TESTING.md: llama.cpp's greedy continuation of "The capital of France is".
    let ids = [7042, 30, 198, 198, 504, 1797];
    assert_eq!(tok.decode(&ids, true).unwrap(), " Paris.\n\nThe United");
    // Its chat template renders.
    let t = tok.chat_template("default", Default::default()).unwrap();
    let prompt = t
        .render(&gmlx_tokenizer::ChatRequest::new(vec![
            serde_json::json!({"role": "user", "content": "Hi"}),
        ]))
        .unwrap();
    assert!(
        prompt.contains("<|im_start|>user\nHi<|im_end|>"),
        "{prompt}"
    );
    assert!(tok.is_eog(tok.token_id("<|im_end|>").unwrap()));
}
