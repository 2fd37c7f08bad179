//! Constrained decoding: a reply that must be one JSON value of a schema (`response_format`
//! `json_object` / `json_schema`), or a [`Grammar`] of texts, control tokens and JSON values
//! (a forced tool call in a model's format). Before each sample, every token whose
//! bytes the schema's matcher cannot take is masked out; end-of-generation is allowed only
//! once the value is complete, and is the only choice when nothing may follow.
mod matcher;
mod schema;
#[cfg(test)]
mod tests;
mod trie;

use std::sync::Arc;

use gmlx_tokenizer::{TokenId, Tokenizer};

pub use schema::{Grammar, NodeId, Schema, SchemaError};
pub use trie::VocabTrie;

/// What a sequence is constrained to: one value of `schema`, over `trie`'s tokens.
#[derive(Debug, Clone)]
pub struct Constraint {
    pub schema: Arc<Schema>,
    pub trie: Arc<VocabTrie>,
}

/// The state of one constrained sequence.
#[derive(Debug, Clone)]
pub struct Matcher {
    constraint: Constraint,
    stack: matcher::Stack,
}

impl Matcher {
    pub fn new(constraint: Constraint) -> Matcher {
        let stack = matcher::start(&constraint.schema);
        Matcher { constraint, stack }
    }

    /// Takes a token's bytes; `false` (and the state unchanged) if the value cannot go on so.
    pub fn accept(&mut self, bytes: &[u8]) -> bool {
        let mut next = self.stack.clone();
        for &b in bytes {
            if !matcher::feed(&self.constraint.schema, &mut next, b) {
                return false;
            }
        }
        self.stack = next;
        true
    }

    /// Whether the value is complete here (end-of-generation may come next).
    pub fn can_finish(&self) -> bool {
        matcher::can_finish(&self.constraint.schema, &self.stack)
    }

    /// Sets `allowed[id]` for every ordinary token that may come next, and for the
    /// end-of-generation tokens when the value may end; returns how many are allowed.
    pub fn allowed(&self, tokenizer: &Tokenizer, allowed: &mut [bool]) -> usize {
        allowed.iter_mut().for_each(|a| *a = false);
        let mut n = self
            .constraint
            .trie
            .walk(&self.constraint.schema, &self.stack, allowed);
        if let Some(id) = matcher::pending_token(&self.constraint.schema, &self.stack) {
            if let Some(a) = allowed.get_mut(id as usize) {
                n += usize::from(!*a);
                *a = true;
            }
        }
        if self.can_finish() {
            for &id in tokenizer.eog_ids() {
                if let Some(a) = allowed.get_mut(id as usize) {
                    n += usize::from(!*a);
                    *a = true;
                }
            }
        }
        n
    }

    /// Masks the logits of every token [`Self::allowed`] refuses; `false` if none is left.
    pub fn mask(&self, tokenizer: &Tokenizer, logits: &mut [f32]) -> bool {
        let mut allowed = vec![false; logits.len()];
        if self.allowed(tokenizer, &mut allowed) == 0 {
            return false;
        }
        for (l, ok) in logits.iter_mut().zip(&allowed) {
            if !ok {
                *l = f32::NEG_INFINITY;
            }
        }
        true
    }

    /// Whether `token` may come next ([`Self::allowed`] for one token).
    pub fn allows(&self, tokenizer: &Tokenizer, token: TokenId) -> bool {
        self.clone().advance(tokenizer, token)
    }

    /// Advances past a sampled token (end-of-generation tokens leave the state as it is);
    /// `false` for a token the mask would have refused.
    pub fn advance(&mut self, tokenizer: &Tokenizer, token: TokenId) -> bool {
        if tokenizer.is_eog(token) {
            return self.can_finish();
        }
        if let Some(next) = matcher::take_token(&self.constraint.schema, &self.stack, token) {
            self.stack = next;
            return true;
        }
        // the tokens the mask can offer: ordinary ones with bytes, never a control token
        // whose text would fit inside a string
        if !trie::in_values(tokenizer, token) {
            return false;
        }
        self.accept(&tokenizer.token_bytes()[token as usize])
    }
}
