//! Splitting text at special tokens before the tokenizer model sees it.
//!
//! Control, unknown and user-defined tokens are matched as whole tokens, longest text
//! first (llama.cpp's `tokenizer_st_partition`). Control and unknown tokens are only
//! matched when special parsing is requested; user-defined tokens always are.

use aho_corasick::AhoCorasick;

use crate::error::{Error, Result};
use crate::vocab::{Attr, Vocab};
use crate::TokenId;

/// A piece of the input: raw text for the model, or a token matched whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    Text(&'t str),
    Token(TokenId),
}

#[derive(Debug)]
pub(crate) struct SpecialMatcher {
    /// Candidate tokens, longest text first (ties: lower id first).
    tokens: Vec<TokenId>,
    /// Finds which candidates occur in a text at all.
    finder: Option<AhoCorasick>,
}

impl SpecialMatcher {
    pub(crate) fn new(vocab: &Vocab) -> Result<SpecialMatcher> {
        let mut tokens: Vec<TokenId> = (0..vocab.len() as TokenId)
            .filter(|&id| {
                let a = vocab.attrs[id as usize];
                a.has(Attr::CONTROL) || a.has(Attr::USER_DEFINED) || a.has(Attr::UNKNOWN)
            })
            .collect();
        tokens.sort_by(|&a, &b| {
            vocab.texts[b as usize]
                .len()
                .cmp(&vocab.texts[a as usize].len())
                .then(a.cmp(&b))
        });
        let finder = if tokens.is_empty() {
            None
        } else {
            let patterns: Vec<&str> = tokens
                .iter()
                .map(|&id| vocab.texts[id as usize].as_str())
                .collect();
            Some(AhoCorasick::new(patterns).map_err(|e| Error::Build {
                part: "special token matcher",
                reason: e.to_string(),
            })?)
        };
        Ok(SpecialMatcher { tokens, finder })
    }

    /// Splits `text` into fragments.
    pub(crate) fn partition<'t>(
        &self,
        vocab: &Vocab,
        text: &'t str,
        parse_special: bool,
    ) -> Vec<Fragment<'t>> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut fragments = vec![Fragment::Text(text)];
        let Some(finder) = &self.finder else {
            return fragments;
        };
        // Which candidates occur at all (indices into `self.tokens`, which is sorted).
        let mut present: Vec<usize> = finder
            .find_overlapping_iter(text)
            .map(|m| m.pattern().as_usize())
            .collect();
        if present.is_empty() {
            return fragments;
        }
        present.sort_unstable();
        present.dedup();
        for index in present {
            let id = self.tokens[index];
            let attr = vocab.attrs[id as usize];
            if !parse_special && attr.is_special() {
                continue;
            }
            let needle = vocab.texts[id as usize].as_str();
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    next.push(fragment);
                    continue;
                };
                while let Some(pos) = rest.find(needle) {
                    let mut left = &rest[..pos];
                    if attr.has(Attr::LSTRIP) {
                        left = left.trim_end_matches(is_c_space);
                    }
                    if !left.is_empty() {
                        next.push(Fragment::Text(left));
                    }
                    next.push(Fragment::Token(id));
                    rest = &rest[pos + needle.len()..];
                    if attr.has(Attr::RSTRIP) {
                        rest = rest.trim_start_matches(is_c_space);
                    }
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }
}

/// C's `isspace` in the "C" locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}
