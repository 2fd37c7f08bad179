//! llama.cpp's tokenizer test suite (`models/ggml-vocab-*.gguf` with `.inp`/`.out`):
//! every BPE and SentencePiece vocabulary encodes every input to the expected ids
//! (`add_special = false`, `parse_special = false`, as `test-tokenizer-0` runs it),
//! and the alignment exports reproduce the inputs' bytes.
#![allow(clippy::unwrap_used)]

mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gmlx_tokenizer::{Error, Tokenizer, TokenizerKind};

/// Vocabularies of the suite this crate does not implement, with the reason.
const NOT_SUPPORTED: &[(&str, &str)] = &[(
    "ggml-vocab-bert-bge.gguf",
    "WordPiece (tokenizer.ggml.model = bert) is neither BPE nor SentencePiece",
)];

struct Case {
    input: String,
    expected: Vec<u32>,
}

/// Reads `<vocab>.inp` / `<vocab>.out` as `test-tokenizer-0.cpp` does.
fn read_cases(vocab: &Path) -> Vec<Case> {
    let inp = std::fs::read_to_string(format!("{}.inp", vocab.display())).unwrap();
    let out = std::fs::read_to_string(format!("{}.out", vocab.display())).unwrap();
    // Split as the C++ test does: a separator at the very end adds no empty case.
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs: Vec<&str> = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(pos) => {
                inputs.push(&rest[..pos]);
                rest = &rest[pos + sep.len()..];
            }
            None => {
                inputs.push(rest);
                rest = "";
            }
        }
    }
    let outputs: Vec<&str> = out.lines().collect();
    assert_eq!(inputs.len(), outputs.len(), "{}", vocab.display());
    // Like the C++ test's std::map: one case per distinct input, the last one wins.
    let mut cases = BTreeMap::new();
    for (input, output) in inputs.iter().zip(outputs) {
        let expected = output
            .split_whitespace()
            .map(|t| t.parse().unwrap())
            .collect();
        cases.insert(input.to_string(), expected);
    }
    cases
        .into_iter()
        .map(|(input, expected)| Case { input, expected })
        .collect()
}

fn suite_vocabs() -> Vec<PathBuf> {
    let models = util::llama_cpp_dir().join("models");
    let mut vocabs: Vec<PathBuf> = std::fs::read_dir(&models)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("ggml-vocab-")
                && name.ends_with(".gguf")
                && Path::new(&format!("{}.inp", p.display())).exists()
        })
        .collect();
    vocabs.sort();
    assert!(
        !vocabs.is_empty(),
        "no ggml-vocab-*.gguf with .inp in {}",
        models.display()
    );
    vocabs
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn llama_cpp_vocab_suite() {
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for vocab in suite_vocabs() {
        let name = file_name(&vocab);
        if let Some((_, why)) = NOT_SUPPORTED.iter().find(|(n, _)| *n == name) {
            match Tokenizer::from_gguf_path(&vocab) {
                Err(Error::UnsupportedModel { .. }) => {}
                other => failures.push(format!("{name}: expected UnsupportedModel, got {other:?}")),
            }
            summary.push(format!("{name}: skipped ({why})"));
            continue;
        }
        let tok = match Tokenizer::from_gguf_path(&vocab) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: does not load: {e}"));
                continue;
            }
        };
        let cases = read_cases(&vocab);
        let mut passed = 0;
        for case in &cases {
            match tok.encode(&case.input, false, false) {
                Ok(ids) if ids == case.expected => passed += 1,
                Ok(ids) => failures.push(format!(
                    "{name}: {:?}\n    expected {:?}\n    got      {:?}",
                    case.input, case.expected, ids
                )),
                Err(e) => failures.push(format!("{name}: {:?}: {e}", case.input)),
            }
        }
        summary.push(format!(
            "{name}: {passed}/{} passed ({:?}, pre {:?})",
            cases.len(),
            tok.kind(),
            tok.pre_tokenizer()
        ));
    }
    for line in &summary {
        eprintln!("{line}");
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Concatenating `token_bytes` over an encoding gives back the input's bytes.
#[test]
fn token_bytes_reproduce_suite_inputs() {
    let mut failures = Vec::new();
    for vocab in suite_vocabs() {
        let name = file_name(&vocab);
        let Ok(tok) = Tokenizer::from_gguf_path(&vocab) else {
            continue; // unsupported models are checked by the suite test
        };
        let bytes = tok.token_bytes();
        for case in read_cases(&vocab) {
            let ids = tok.encode(&case.input, false, false).unwrap();
            let mut joined: Vec<u8> = ids
                .iter()
                .flat_map(|&i| bytes[i as usize].clone())
                .collect();
            if tok.kind() == TokenizerKind::SentencePiece
                && tok.add_space_prefix()
                && !case.input.is_empty()
            {
                // SentencePiece adds one space in front of the text.
                if joined.first() == Some(&b' ') {
                    joined.remove(0);
                }
            }
            if joined != case.input.as_bytes() {
                failures.push(format!(
                    "{name}: {:?} came back as {:?}",
                    case.input,
                    String::from_utf8_lossy(&joined)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Cross-tokenizer alignment (`align_by_bytes`) on the suite's texts, for pairs of BPE and
/// SentencePiece vocabularies: each side's spans tile its text; an aligned pair spans the same
/// bytes and decodes to them; a token of one side aligns to at most one of the other's; where a
/// text has whole words split alike the pair aligns, and texts that differ only by
/// SentencePiece's space prefix still align after it.
#[test]
fn tokenizations_of_the_suite_texts_align_by_bytes() {
    use gmlx_tokenizer::{align_by_bytes, spans, Tokens};
    let models = util::llama_cpp_dir().join("models");
    let load =
        |n: &str| Tokenizer::from_gguf_path(models.join(format!("ggml-vocab-{n}.gguf"))).unwrap();
    let pairs = [
        ("llama-spm", "gpt-2"),
        ("llama-bpe", "qwen2"),
        ("phi-3", "llama-bpe"),
    ];
    for (na, nb) in pairs {
        let (ta, tb) = (load(na), load(nb));
        let (wa, wb) = (ta.whitespace_start_mask(), tb.whitespace_start_mask());
        let (mut aligned, mut total) = (0usize, 0usize);
        for case in read_cases(&models.join(format!("ggml-vocab-{na}.gguf"))) {
            let ids_a = ta.encode(&case.input, false, false).unwrap();
            let ids_b = tb.encode(&case.input, false, false).unwrap();
            let (sa, text_a) = spans(&ids_a, ta.token_bytes());
            let (sb, text_b) = spans(&ids_b, tb.token_bytes());
            for (s, text) in [(&sa, &text_a), (&sb, &text_b)] {
                let tiled = s.windows(2).all(|w| w[0].1 == w[1].0)
                    && s.first().is_none_or(|f| f.0 == 0)
                    && s.last().is_none_or(|l| l.1 as usize == text.len());
                assert!(
                    tiled,
                    "{na}/{nb} {:?}: spans do not tile the text",
                    case.input
                );
            }
            let a = Tokens {
                ids: &ids_a,
                token_bytes: ta.token_bytes(),
                whitespace_start: &wa,
            };
            let b = Tokens {
                ids: &ids_b,
                token_bytes: tb.token_bytes(),
                whitespace_start: &wb,
            };
            let matched = align_by_bytes(a, b);
            assert_eq!(matched.len(), ids_b.len());
            let mut seen = std::collections::HashSet::new();
            for (j, m) in matched.iter().enumerate() {
                if let Some(i) = *m {
                    assert!(
                        seen.insert(i),
                        "{na}/{nb} {:?}: token {i} aligned twice",
                        case.input
                    );
                    assert_eq!(
                        ta.token_bytes()[ids_a[i] as usize],
                        tb.token_bytes()[ids_b[j] as usize],
                        "{na}/{nb} {:?}: aligned tokens spell different bytes",
                        case.input
                    );
                    aligned += 1;
                }
            }
            total += ids_b.len();
        }
        eprintln!("{na} -> {nb}: {aligned}/{total} tokens aligned");
        // measured: 238/473, 265/389, 206/355 (the suite's texts are mostly edge cases)
        assert!(
            aligned * 5 > total * 2,
            "{na}/{nb}: only {aligned} of {total} tokens align"
        );
    }
}
