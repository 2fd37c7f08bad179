//! GPT-2-style byte-level BPE (and SPM-style BPE such as Gemma 4's) on the
//! `tokenizers` crate's BPE model.

use tokenizers::models::bpe::BPE;
use tokenizers::Model;

use crate::bytelevel;
use crate::error::{Error, Result};
use crate::pretokenize::{PreConfig, PreTokenizer};
use crate::vocab::Vocab;
use crate::TokenId;

#[derive(Debug)]
pub(crate) struct BpeEncoder {
    model: BPE,
    pre: PreTokenizer,
    config: PreConfig,
}

impl BpeEncoder {
    pub(crate) fn new(vocab: &Vocab, merges: &[String], config: PreConfig) -> Result<BpeEncoder> {
        let mut pairs = Vec::with_capacity(merges.len());
        for merge in merges {
            // llama.cpp splits at the first space after the first byte.
            let Some(pos) = merge
                .as_bytes()
                .iter()
                .skip(1)
                .position(|&b| b == b' ')
                .map(|p| p + 1)
            else {
                continue;
            };
            let (left, right) = (&merge[..pos], &merge[pos + 1..]);
            // A merge whose parts or result are not tokens can never produce a token.
            let joined = format!("{left}{right}");
            if vocab.ids.contains_key(left)
                && vocab.ids.contains_key(right)
                && vocab.ids.contains_key(&joined)
            {
                pairs.push((left.to_owned(), right.to_owned()));
            }
        }
        let model = BPE::builder()
            .vocab_and_merges(model_vocab(vocab), pairs)
            .ignore_merges(config.ignore_merges)
            .byte_fallback(!config.byte_encode)
            .build()
            .map_err(|e| Error::Build {
                part: "BPE model",
                reason: e.to_string(),
            })?;
        Ok(BpeEncoder {
            model,
            pre: PreTokenizer::new(&config)?,
            config,
        })
    }

    pub(crate) fn config(&self) -> &PreConfig {
        &self.config
    }

    /// Tokenizes raw text (no special tokens in it) and appends the ids.
    pub(crate) fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<TokenId>) -> Result<()> {
        let escaped;
        let text = if self.config.escape_whitespace {
            escaped = text.replace(' ', "\u{2581}");
            escaped.as_str()
        } else {
            text
        };
        for piece in self.pre.split(text)? {
            if !self.config.byte_encode && piece.bytes().all(|b| b == b'\n') {
                // Gemma 4: a run of newlines that is itself a token stays whole.
                if let Some(&id) = vocab.ids.get(piece) {
                    out.push(id);
                    continue;
                }
            }
            let encoded;
            let piece = if self.config.byte_encode {
                encoded = bytelevel::encode(piece);
                encoded.as_str()
            } else {
                piece
            };
            let tokens = self.model.tokenize(piece).map_err(|e| Error::Encode {
                reason: e.to_string(),
            })?;
            out.extend(tokens.iter().map(|t| t.id));
        }
        Ok(())
    }
}

/// The vocabulary in the `tokenizers` BPE model's map type.
pub(crate) fn model_vocab(vocab: &Vocab) -> tokenizers::models::bpe::Vocab {
    vocab.ids.iter().map(|(k, v)| (k.clone(), *v)).collect()
}
