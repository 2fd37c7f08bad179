//! Pre-tokenizers: the regex splits that `tokenizer.ggml.pre` names.
//!
//! Each pre-tokenizer is a list of regexes applied in turn, as llama.cpp does: every
//! regex splits each piece left by the previous one into its matches and the text
//! between them, all kept. The regexes are llama.cpp's (`src/llama-vocab.cpp`), which
//! are the Hugging Face `tokenizer.json` ones with case-insensitive groups spelled out.

use fancy_regex::Regex;

use crate::error::{Error, Result};

/// GPT-2's split.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's split (digits in groups of up to three).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's split (single digits).
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 3.5's split (combining marks join letters).
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o / Llama 4 split (case-aware words).
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's Tekken split.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek V3's main split.
const DEEPSEEK3: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
/// DeepSeek LLM's letter class.
const DEEPSEEK_LLM_LETTERS: &str = r"\s?[A-Za-z\x{b5}\x{c0}-\x{d6}\x{d8}-\x{f6}\x{f8}-\x{1ba}\x{1bc}-\x{1bf}\x{1c4}-\x{293}\x{295}-\x{2af}\x{370}-\x{373}\x{376}\x{377}\x{37b}-\x{37d}\x{37f}\x{386}\x{388}-\x{38a}\x{38c}\x{38e}-\x{3a1}\x{3a3}-\x{3f5}\x{3f7}-\x{481}\x{48a}-\x{52f}\x{531}-\x{556}\x{10a0}-\x{10c5}\x{13a0}-\x{13f5}\x{13f8}-\x{13fd}\x{1c90}-\x{1cba}\x{1cbd}-\x{1cbf}\x{1d00}-\x{1d2b}\x{1d6b}-\x{1d77}\x{1d79}-\x{1d9a}\x{1e00}-\x{1f15}\x{1f18}-\x{1f1d}\x{1f20}-\x{1f45}\x{1f48}-\x{1f4d}\x{1f50}-\x{1f57}\x{1f59}\x{1f5b}\x{1f5d}\x{1f5f}-\x{1f7d}\x{1f80}-\x{1fb4}\x{1fb6}-\x{1fbc}\x{1fbe}\x{1fc2}-\x{1fc4}\x{1fc6}-\x{1fcc}\x{1fd0}-\x{1fd3}\x{1fd6}-\x{1fdb}\x{1fe0}-\x{1fec}\x{1ff2}-\x{1ff4}\x{1ff6}-\x{1ffc}\x{2102}\x{2107}\x{210a}-\x{2113}\x{2115}\x{2119}-\x{211d}\x{2124}\x{2126}\x{2128}\x{212a}-\x{212d}\x{212f}-\x{2134}\x{2139}\x{213c}-\x{213f}\x{2145}-\x{2149}\x{214e}\x{2183}\x{2184}\x{2c00}-\x{2c7b}\x{2c7e}-\x{2ce4}\x{2ceb}-\x{2cee}\x{2cf2}\x{2cf3}\x{a640}-\x{a66d}\x{a680}-\x{a69b}\x{a722}-\x{a76f}\x{a771}-\x{a787}\x{a78b}-\x{a78e}\x{ab70}-\x{abbf}\x{fb00}-\x{fb06}\x{fb13}-\x{fb17}\x{ff21}-\x{ff3a}\x{ff41}-\x{ff5a}\x{10400}-\x{1044f}\x{104b0}-\x{104d3}\x{104d8}-\x{104fb}\x{10c80}-\x{10cb2}\x{10cc0}-\x{10cf2}\x{118a0}-\x{118df}\x{1e900}-\x{1e943}]+";
/// CJK runs for the DeepSeek pre-tokenizers.
const CJK: &str = r"[\x{4e00}-\x{9fa5}\x{800}-\x{4e00}\x{ac00}-\x{d7ff}]+";
/// Only newlines split (SPM-style BPE such as Gemma 4).
const NEWLINES: &str = r"[^\n]+|[\n]+";
/// BLOOM-style split.
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";

/// How a BPE vocabulary pre-tokenizes and treats its pieces, from `tokenizer.ggml.pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PreConfig {
    /// The regexes, applied in order.
    pub regexes: &'static [&'static str],
    /// A piece that is itself a token is emitted whole, without merges.
    pub ignore_merges: bool,
    /// Whether BOS is added by default (before `tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Pieces are GPT-2 byte-level encoded (false: raw UTF-8 with `<0xNN>` fallback).
    pub byte_encode: bool,
    /// Spaces become U+2581 before tokenizing (SPM-style BPE).
    pub escape_whitespace: bool,
}

const fn cfg(regexes: &'static [&'static str]) -> PreConfig {
    PreConfig {
        regexes,
        ignore_merges: false,
        add_bos: false,
        byte_encode: true,
        escape_whitespace: false,
    }
}

const fn ignore_merges(mut c: PreConfig) -> PreConfig {
    c.ignore_merges = true;
    c
}

const fn add_bos(mut c: PreConfig) -> PreConfig {
    c.add_bos = true;
    c
}

const fn spm_style(mut c: PreConfig) -> PreConfig {
    c.byte_encode = false;
    c.escape_whitespace = true;
    c
}

/// Every `tokenizer.ggml.pre` value this crate knows, with its configuration.
/// `default` is also what a BPE vocabulary without the key gets.
pub(crate) const PRE_TOKENIZERS: &[(&str, PreConfig)] = &[
    (
        "default",
        cfg(&[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]),
    ),
    ("gpt-2", cfg(&[GPT2])),
    ("phi-2", cfg(&[GPT2])),
    ("mpt", cfg(&[GPT2])),
    ("olmo", cfg(&[GPT2])),
    ("jais", cfg(&[GPT2])),
    ("exaone4", cfg(&[GPT2])),
    ("trillion", cfg(&[GPT2])),
    ("granite-docling", cfg(&[GPT2])),
    ("starcoder", cfg(&[r"\p{N}", GPT2])),
    ("refact", cfg(&[r"\p{N}", GPT2])),
    ("command-r", cfg(&[r"\p{N}", GPT2])),
    ("smollm", cfg(&[r"\p{N}", GPT2])),
    ("codeshell", cfg(&[r"\p{N}", GPT2])),
    ("exaone", cfg(&[r"\p{N}", GPT2])),
    ("minerva-7b", cfg(&[r"\p{N}", GPT2])),
    (
        "falcon",
        cfg(&[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"]),
    ),
    ("llama3", add_bos(ignore_merges(cfg(&[LLAMA3])))),
    ("llama-v3", add_bos(ignore_merges(cfg(&[LLAMA3])))),
    ("llama-bpe", add_bos(ignore_merges(cfg(&[LLAMA3])))),
    ("falcon3", add_bos(ignore_merges(cfg(&[LLAMA3])))),
    ("pixtral", add_bos(ignore_merges(cfg(&[LLAMA3])))),
    ("dbrx", cfg(&[LLAMA3])),
    ("smaug-bpe", cfg(&[LLAMA3])),
    ("chatglm-bpe", cfg(&[LLAMA3])),
    ("glm4", ignore_merges(cfg(&[LLAMA3]))),
    ("qwen2", cfg(&[QWEN2])),
    ("deepseek-r1-qwen", cfg(&[QWEN2])),
    ("stablelm2", cfg(&[QWEN2])),
    ("megrez", cfg(&[QWEN2])),
    ("hunyuan", cfg(&[QWEN2])),
    ("qwen35", cfg(&[QWEN35])),
    ("gpt-4o", cfg(&[GPT4O])),
    ("llama4", cfg(&[GPT4O])),
    ("minimax-m2", cfg(&[GPT4O])),
    ("tekken", add_bos(ignore_merges(cfg(&[TEKKEN])))),
    (
        "deepseek-llm",
        cfg(&[
            r"[\r\n]",
            DEEPSEEK_LLM_LETTERS,
            r"\s?[!-/:-~\x{ff01}-\x{ff0f}\x{ff1a}-\x{ff5e}\x{2018}-\x{201f}\x{3000}-\x{3002}]+",
            r"\s+$",
            CJK,
            r"\p{N}+",
        ]),
    ),
    (
        "deepseek-coder",
        cfg(&[r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"]),
    ),
    (
        "deepseek-v3",
        cfg(&[
            r"\p{N}{1,3}",
            r"[\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+",
            DEEPSEEK3,
        ]),
    ),
    ("poro-chat", cfg(&[BLOOM])),
    ("bloom", cfg(&[BLOOM])),
    ("gpt3-finnish", cfg(&[BLOOM])),
    ("viking", cfg(&[BLOOM, r"\p{N}"])),
    ("gemma4", spm_style(cfg(&[NEWLINES]))),
];

/// The configuration `pre` names, or an error naming it.
pub(crate) fn lookup(model: &str, pre: &str) -> Result<PreConfig> {
    PRE_TOKENIZERS
        .iter()
        .find(|(name, _)| *name == pre)
        .map(|(_, c)| *c)
        .ok_or_else(|| Error::UnsupportedPreTokenizer {
            model: model.to_owned(),
            pre: pre.to_owned(),
        })
}

/// One compiled split regex.
#[derive(Debug)]
enum Splitter {
    /// Any regex, on fancy-regex's backtracking engine (lookarounds).
    Fancy(Regex),
    /// A regex of the form `A|\s+(?!\S)` or `A|\s+(?!\S)|\s+` with no lookaround in
    /// `A`, run as `(?:A)|(\s+)` on the `regex` crate's automata, with the lookahead
    /// applied afterwards: a whitespace run matched by the last group and followed by
    /// non-whitespace gives back its last character (or, if it is a single character and
    /// there is no plain `\s+` alternative, does not match there at all).
    Fast {
        /// `(?:A)|\s+`.
        re: regex::Regex,
        /// `^(?:A)`: tells whether a whitespace match came from `A` or from `\s+`.
        a_anchored: regex::Regex,
        trailing_plain: bool,
    },
}

const LOOKAHEAD_WS: &str = r"|\s+(?!\S)";

impl Splitter {
    fn new(pattern: &str) -> Result<Splitter> {
        let fast = pattern
            .strip_suffix(r"|\s+")
            .and_then(|p| p.strip_suffix(LOOKAHEAD_WS))
            .map(|a| (a, true))
            .or_else(|| pattern.strip_suffix(LOOKAHEAD_WS).map(|a| (a, false)))
            .filter(|(a, _)| !a.contains("(?=") && !a.contains("(?!") && !a.contains("(?<"));
        if let Some((a, trailing_plain)) = fast {
            let re = regex::Regex::new(&format!(r"(?:{a})|\s+"));
            let a_anchored = regex::Regex::new(&format!(r"^(?:{a})"));
            if let (Ok(re), Ok(a_anchored)) = (re, a_anchored) {
                return Ok(Splitter::Fast {
                    re,
                    a_anchored,
                    trailing_plain,
                });
            }
        }
        Regex::new(pattern)
            .map(Splitter::Fancy)
            .map_err(|e| Error::Build {
                part: "pre-tokenizer regex",
                reason: format!("{pattern}: {e}"),
            })
    }

    /// Appends the pieces of `piece` (matches and the text between them) to `out`.
    fn split_into<'t>(&self, piece: &'t str, out: &mut Vec<&'t str>) -> Result<()> {
        let mut last = 0;
        let mut push = |start: usize, end: usize, last: &mut usize| {
            if start > *last {
                out.push(&piece[*last..start]);
            }
            if end > start {
                out.push(&piece[start..end]);
            }
            *last = end;
        };
        match self {
            Splitter::Fancy(re) => {
                for m in re.find_iter(piece) {
                    let m = m.map_err(|e| Error::Encode {
                        reason: format!("pre-tokenizer regex failed: {e}"),
                    })?;
                    push(m.start(), m.end(), &mut last);
                }
            }
            Splitter::Fast {
                re,
                a_anchored,
                trailing_plain,
            } => {
                let mut pos = 0;
                while pos < piece.len() {
                    let Some(m) = re.find_at(piece, pos) else {
                        break;
                    };
                    let (start, mut end) = (m.start(), m.end());
                    let from_fallback = end < piece.len()
                        && m.as_str().chars().all(char::is_whitespace)
                        && !a_anchored.is_match(&piece[start..]);
                    if from_fallback {
                        // The run is followed by non-whitespace.
                        let run = &piece[start..end];
                        match run.char_indices().last() {
                            Some((i, _)) if i > 0 => end = start + i,
                            _ if *trailing_plain => {}
                            _ => {
                                // `\s+(?!\S)` fails here: no match at this position.
                                pos = start + run.chars().next().map_or(1, char::len_utf8);
                                continue;
                            }
                        }
                    }
                    push(start, end, &mut last);
                    pos = if end > start {
                        end
                    } else {
                        end + piece[end..].chars().next().map_or(1, char::len_utf8)
                    };
                }
            }
        }
        if last < piece.len() {
            out.push(&piece[last..]);
        }
        Ok(())
    }
}

/// Compiled regexes of one pre-tokenizer.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    splitters: Vec<Splitter>,
}

impl PreTokenizer {
    pub(crate) fn new(config: &PreConfig) -> Result<PreTokenizer> {
        let splitters = config
            .regexes
            .iter()
            .map(|r| Splitter::new(r))
            .collect::<Result<Vec<_>>>()?;
        Ok(PreTokenizer { splitters })
    }

    /// Splits `text` into pieces, applying each regex to the pieces of the previous one
    /// and keeping both matches and the text between them.
    pub(crate) fn split<'t>(&self, text: &'t str) -> Result<Vec<&'t str>> {
        let mut pieces = vec![text];
        for splitter in &self.splitters {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                splitter.split_into(piece, &mut next)?;
            }
            pieces = next;
        }
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_regex_compiles() {
        for (name, config) in PRE_TOKENIZERS {
            if let Err(e) = PreTokenizer::new(config) {
                panic!("{name}: {e}");
            }
        }
    }

    #[test]
    fn gpt2_split() {
        let p = PreTokenizer::new(&cfg(&[GPT2])).ok();
        let pieces = p.and_then(|p| p.split("Hello world's  3 x").ok());
        assert_eq!(pieces, Some(vec!["Hello", " world", "'s", " ", " 3", " x"]));
    }

    /// The automaton path splits exactly like the backtracking one.
    #[test]
    fn fast_split_matches_fancy_regex() {
        let texts = [
            "Hello world's  3 x",
            "  \n  x\t\t y   \n\n\n z  ",
            " ",
            "a \u{3000}\u{3000}b\u{a0} c \r\n\r\n  d",
            "x  ",
            "\t\tfoo(bar)  {  }\n    return 1;\n",
            "123456 7 89  ,,, !? ¿qué? 🦙🦙  ok",
            "it's  I'LL  we'Ve\n\n\n\n  done",
        ];
        let mut fast_patterns = 0;
        for (name, config) in PRE_TOKENIZERS {
            for pattern in config.regexes {
                let Ok(Splitter::Fast { .. }) = Splitter::new(pattern) else {
                    continue;
                };
                fast_patterns += 1;
                let fancy =
                    Splitter::Fancy(Regex::new(pattern).ok().unwrap_or_else(|| panic!("{name}")));
                let fast = Splitter::new(pattern)
                    .ok()
                    .unwrap_or_else(|| panic!("{name}"));
                for text in texts {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    assert!(fancy.split_into(text, &mut a).is_ok());
                    assert!(fast.split_into(text, &mut b).is_ok());
                    assert_eq!(a, b, "{name}: {text:?}");
                }
            }
        }
        // GPT-2's, Llama 3's, Qwen 2's, Qwen 3.5's and DeepSeek V3's regexes take this path.
        assert!(fast_patterns >= 30, "{fast_patterns}");
    }

    #[test]
    fn unknown_pre_is_named() {
        let err = lookup("gpt2", "nope").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unsupported pre-tokenizer `nope` for tokenizer model `gpt2`")
        );
    }
}
