//! llama-style SentencePiece (BPE over scores, with `<0xNN>` byte fallback) on the
//! `tokenizers` crate's BPE model.
//!
//! SentencePiece merges the adjacent pair whose concatenation is the highest-scoring
//! token. That is BPE with one merge `(left, right)` for every token that splits into
//! two tokens, ranked by the merged token's score (ties: lower id first), which is how
//! Hugging Face converts these vocabularies too.

use tokenizers::models::bpe::BPE;
use tokenizers::Model;

use crate::bpe::model_vocab;
use crate::error::{Error, Result};
use crate::vocab::Vocab;
use crate::TokenId;

/// SentencePiece's escaped space.
const SPACE: char = '\u{2581}';

#[derive(Debug)]
pub(crate) struct SpmEncoder {
    model: BPE,
    /// No token has U+2581 right after another character, so no merge can cross the
    /// start of a `▁`-run that follows other text: the text is tokenized in such
    /// segments (same result, far faster on long inputs, and the BPE cache applies).
    split_at_spaces: bool,
}

impl SpmEncoder {
    pub(crate) fn new(vocab: &Vocab) -> Result<SpmEncoder> {
        let mut merges: Vec<(f32, TokenId, usize, &str, &str)> = Vec::new();
        for (id, text) in vocab.texts.iter().enumerate() {
            if vocab.ids.get(text) != Some(&(id as TokenId)) {
                continue; // a duplicate text; the later id is the token
            }
            for (split, _) in text.char_indices().skip(1) {
                let (left, right) = text.split_at(split);
                if vocab.ids.contains_key(left) && vocab.ids.contains_key(right) {
                    merges.push((vocab.scores[id], id as TokenId, split, left, right));
                }
            }
        }
        merges.sort_by(|a, b| {
            b.0.partial_cmp(&a.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
        });
        let pairs: Vec<(String, String)> = merges
            .into_iter()
            .map(|(_, _, _, l, r)| (l.to_owned(), r.to_owned()))
            .collect();
        let mut builder = BPE::builder()
            .vocab_and_merges(model_vocab(vocab), pairs)
            .byte_fallback(true);
        if let Some(unk) = vocab.special.unk {
            builder = builder.unk_token(vocab.texts[unk as usize].clone());
        }
        let model = builder.build().map_err(|e| Error::Build {
            part: "SentencePiece model",
            reason: e.to_string(),
        })?;
        let split_at_spaces = !vocab.texts.iter().any(|t| {
            let mut prev: Option<char> = None;
            t.chars().any(|c| {
                let crossing = c == SPACE && prev.is_some_and(|p| p != SPACE);
                prev = Some(c);
                crossing
            })
        });
        Ok(SpmEncoder {
            model,
            split_at_spaces,
        })
    }

    /// Tokenizes text whose spaces are already escaped as U+2581.
    pub(crate) fn tokenize(&self, text: &str, out: &mut Vec<TokenId>) -> Result<()> {
        if !self.split_at_spaces {
            return self.tokenize_segment(text, out);
        }
        let mut start = 0;
        let mut prev: Option<char> = None;
        for (i, c) in text.char_indices() {
            if c == SPACE && prev.is_some_and(|p| p != SPACE) {
                self.tokenize_segment(&text[start..i], out)?;
                start = i;
            }
            prev = Some(c);
        }
        self.tokenize_segment(&text[start..], out)
    }

    fn tokenize_segment(&self, text: &str, out: &mut Vec<TokenId>) -> Result<()> {
        let tokens = self.model.tokenize(text).map_err(|e| Error::Encode {
            reason: e.to_string(),
        })?;
        out.extend(tokens.iter().map(|t| t.id));
        Ok(())
    }
}
