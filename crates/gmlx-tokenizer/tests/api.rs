//! Builder errors, BOS/EOS/space-prefix switches, decoding, the streaming decoder and
//! the alignment exports on llama.cpp's vocabularies.
#![allow(clippy::unwrap_used)]

mod util;

use std::path::PathBuf;

use gmlx_tokenizer::{vocab_map_hash, Error, Tokenizer, TokenizerSpec};

fn vocab(name: &str) -> PathBuf {
    util::llama_cpp_dir()
        .join("models")
        .join(format!("ggml-vocab-{name}.gguf"))
}

fn spec(name: &str) -> TokenizerSpec {
    let file = gmlx_gguf::GgufFile::open(vocab(name)).unwrap();
    TokenizerSpec::from_metadata(file.metadata()).unwrap()
}

fn tokenizer(name: &str) -> Tokenizer {
    Tokenizer::from_spec(&spec(name)).unwrap()
}

/// Texts of the suite plus some that split UTF-8 characters over byte tokens.
fn sample_texts(name: &str) -> Vec<String> {
    let inp = std::fs::read_to_string(format!("{}.inp", vocab(name).display())).unwrap();
    let mut texts: Vec<String> = inp
        .split("\n__ggml_vocab_test__\n")
        .map(str::to_owned)
        .collect();
    texts.push("ỗ𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦙🦙 ⚡️ 😶‍🌫️ ᄀᄁ ⁂ \u{200d}\u{fe0f}".to_owned());
    texts
}

#[test]
fn unknown_model_and_pre_tokenizer_are_named() {
    let mut s = spec("gpt-2");
    s.model = "rwkv".into();
    match Tokenizer::from_spec(&s) {
        Err(Error::UnsupportedModel { model }) => assert_eq!(model, "rwkv"),
        other => panic!("{other:?}"),
    }
    let mut s = spec("gpt-2");
    s.pre = Some("made-up".into());
    let err = Tokenizer::from_spec(&s).unwrap_err();
    assert!(err.to_string().contains("`made-up`"), "{err}");
    // A missing pre-tokenizer is llama.cpp's `default`.
    let mut s = spec("gpt-2");
    s.pre = None;
    assert_eq!(
        Tokenizer::from_spec(&s).unwrap().pre_tokenizer(),
        Some("default")
    );
}

#[test]
fn bos_eos_and_space_prefix_are_honoured() {
    let spm = tokenizer("llama-spm");
    assert!(spm.add_bos() && !spm.add_eos() && spm.add_space_prefix());
    assert_eq!(spm.encode("Hello", true, false).unwrap(), [1, 15043]);
    assert_eq!(spm.encode("Hello", false, false).unwrap(), [15043]);

    let mut s = spec("llama-spm");
    s.add_eos = Some(true);
    s.add_bos = Some(false);
    s.add_space_prefix = Some(false);
    let t = Tokenizer::from_spec(&s).unwrap();
    let ids = t.encode("Hello", true, false).unwrap();
    assert_eq!(ids.last(), Some(&2));
    assert_ne!(ids.first(), Some(&1));
    assert_ne!(ids[0], 15043, "no space prefix: not ▁Hello");

    // llama-bpe adds BOS by default (pre-tokenizer llama3), gpt-2 does not.
    assert_eq!(
        tokenizer("llama-bpe").encode("Hi", true, false).unwrap()[0],
        128000
    );
    assert!(!tokenizer("gpt-2").add_bos());
}

#[test]
fn special_tokens_and_eog() {
    let qwen = tokenizer("qwen2");
    let im_start = qwen.token_id("<|im_start|>").unwrap();
    let im_end = qwen.token_id("<|im_end|>").unwrap();
    assert_eq!(
        qwen.encode("<|im_start|>", false, true).unwrap(),
        [im_start]
    );
    assert_ne!(
        qwen.encode("<|im_start|>", false, false).unwrap(),
        [im_start]
    );
    // User-defined tokens are matched even without special parsing.
    let pad = qwen.token_id("[PAD151646]").unwrap();
    assert_eq!(qwen.encode("a[PAD151646]", false, false).unwrap()[1], pad);
    assert!(qwen.is_eog(im_end) && qwen.is_eog(qwen.eos_id().unwrap()));
    assert!(!qwen.is_eog(im_start));
    // Control tokens are skipped on request, user-defined ones never.
    assert_eq!(qwen.decode(&[im_start, pad], true).unwrap(), "[PAD151646]");
    assert_eq!(
        qwen.decode(&[im_start, pad], false).unwrap(),
        "<|im_start|>[PAD151646]"
    );
    assert!(matches!(
        qwen.decode(&[u32::MAX], false),
        Err(Error::TokenOutOfRange { .. })
    ));
}

#[test]
fn decode_inverts_encode() {
    for name in [
        "gpt-2",
        "llama-bpe",
        "qwen2",
        "gemma-4",
        "phi-3",
        "deepseek-llm",
    ] {
        let tok = tokenizer(name);
        for text in sample_texts(name) {
            let ids = tok.encode(&text, false, false).unwrap();
            let mut back = tok.decode(&ids, false).unwrap();
            if tok.add_space_prefix() && !text.is_empty() {
                back.remove(0);
            }
            assert_eq!(back, text, "{name}");
        }
    }
}

#[test]
fn stream_decoder_matches_full_decode() {
    for name in ["gpt-2", "llama-spm", "qwen35", "gemma-4", "command-r"] {
        let tok = tokenizer(name);
        let mut sequences: Vec<Vec<u32>> = sample_texts(name)
            .iter()
            .map(|t| tok.encode(t, true, false).unwrap())
            .collect();
        // Arbitrary id sequences: partial and invalid UTF-8 included.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200 {
            let seq = (0..24)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % tok.vocab_size() as u64) as u32
                })
                .collect();
            sequences.push(seq);
        }
        for ids in sequences {
            for skip in [false, true] {
                let mut stream = tok.stream_decoder(skip);
                let mut text = String::new();
                for &id in &ids {
                    text.push_str(&stream.push(id).unwrap());
                }
                text.push_str(&stream.finish());
                assert_eq!(text, tok.decode(&ids, skip).unwrap(), "{name} {ids:?}");
            }
        }
    }
}

#[test]
fn stream_decoder_holds_back_partial_characters() {
    let tok = tokenizer("llama-spm");
    // "🦙" is four byte tokens in this vocabulary.
    let ids = tok.encode("🦙", false, false).unwrap();
    let mut stream = tok.stream_decoder(true);
    let outputs: Vec<String> = ids.iter().map(|&i| stream.push(i).unwrap()).collect();
    assert_eq!(outputs.concat(), " 🦙");
    assert!(outputs
        .iter()
        .all(|o| o.is_empty() || o.ends_with('🦙') || o == " "));
    assert_eq!(stream.finish(), "");
}

#[test]
fn token_bytes_undo_the_vocabulary_encodings() {
    let gpt2 = tokenizer("gpt-2");
    let the = gpt2.token_id("Ġthe").unwrap();
    assert_eq!(gpt2.token_bytes()[the as usize], b" the");
    let mask = gpt2.whitespace_start_mask();
    assert!(mask[the as usize]);
    assert!(!mask[gpt2.token_id("the").unwrap() as usize]);
    assert_eq!(mask.len(), gpt2.vocab_size());

    let spm = tokenizer("llama-spm");
    let hello = spm.token_id("▁Hello").unwrap();
    assert_eq!(spm.token_bytes()[hello as usize], b" Hello");
    assert_eq!(
        spm.token_bytes()[spm.token_id("<0x0A>").unwrap() as usize],
        b"\n"
    );
    assert!(spm.whitespace_start_mask()[spm.token_id("<0x0A>").unwrap() as usize]);
}

#[test]
fn vocab_map_hash_is_stable_and_discriminating() {
    let a = tokenizer("gpt-2");
    // Pinned: the same on every run and machine.
    assert_eq!(a.vocab_map_hash(), GPT2_HASH);
    assert_eq!(tokenizer("gpt-2").vocab_map_hash(), GPT2_HASH);
    // A copy of the vocabulary (a copied file) hashes the same.
    let dir = std::env::temp_dir().join(format!("gmlx-tok-hash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("copy.gguf");
    std::fs::copy(vocab("gpt-2"), &copy).unwrap();
    assert_eq!(
        Tokenizer::from_gguf_path(&copy).unwrap().vocab_map_hash(),
        GPT2_HASH
    );
    std::fs::remove_dir_all(&dir).ok();
    // Same bytes, different spelling: SPM's ▁ vs a byte-level Ġ would still hash equal;
    // a different vocabulary does not.
    assert_ne!(tokenizer("mpt").vocab_map_hash(), GPT2_HASH);
    assert_ne!(
        tokenizer("llama-spm").vocab_map_hash(),
        tokenizer("phi-3").vocab_map_hash()
    );
    let mut s = spec("gpt-2");
    s.tokens.swap(100, 101);
    assert_ne!(
        Tokenizer::from_spec(&s).unwrap().vocab_map_hash(),
        GPT2_HASH
    );
    // The free function over the exported bytes is the same hash.
    assert_eq!(vocab_map_hash(a.token_bytes()), GPT2_HASH);
}

/// Also computed by `tests/python/vocab_map_hash.py` (an independent implementation).
const GPT2_HASH: &str = "62c812539eef78c1fb46502c40b07b1ee9e5ffffc738ab66f6769810deac9c37";

#[test]
fn shareable_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<gmlx_tokenizer::ChatTemplate>();
}

#[test]
fn named_chat_templates_are_read() {
    let tok = tokenizer("command-r");
    assert_eq!(tok.chat_template_names(), ["default", "tool_use", "rag"]);
    assert!(tok
        .chat_template_source("rag")
        .unwrap()
        .contains("{{ bos_token }}"));
    assert!(tok.chat_template("tool_use", Default::default()).is_ok());
    assert!(matches!(
        tok.chat_template("nope", Default::default()),
        Err(Error::NoChatTemplate { .. })
    ));
    let debug = format!("{tok:?}");
    assert!(
        debug.len() < 1000 && debug.contains("vocab_size: 256000"),
        "{debug}"
    );
}

#[test]
fn every_llama_cpp_vocab_loads_or_is_named_unsupported() {
    let models = util::llama_cpp_dir().join("models");
    let mut loaded = 0;
    for entry in std::fs::read_dir(&models).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.starts_with("ggml-vocab-") && name.ends_with(".gguf")) {
            continue;
        }
        match Tokenizer::from_gguf_path(&path) {
            Ok(tok) => {
                loaded += 1;
                let ids = tok.encode("Hello, world! 123", true, true).unwrap();
                assert!(!ids.is_empty(), "{name}");
            }
            Err(Error::UnsupportedModel { model }) => {
                assert!(["bert", "t5"].contains(&model.as_str()), "{name}: {model}")
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
    assert!(loaded >= 17, "{loaded}");
}
