//! The vocabulary as a byte trie, so one walk from the matcher's state visits each shared
//! token prefix once.
use gmlx_tokenizer::{TokenId, TokenType, Tokenizer};

use super::matcher::{self, Stack};
use super::schema::Schema;

#[derive(Debug, Default)]
struct TrieNode {
    children: Vec<(u8, u32)>,
    tokens: Vec<TokenId>,
}

/// The ordinary tokens (and byte tokens) of a vocabulary by their bytes; control and
/// user-defined tokens never appear inside a constrained value.
#[derive(Debug)]
pub struct VocabTrie {
    nodes: Vec<TrieNode>,
}

/// Whether `id` may appear inside a constrained value: an ordinary or byte token with bytes,
/// not an end-of-generation token.
pub(super) fn in_values(tokenizer: &Tokenizer, id: TokenId) -> bool {
    matches!(
        tokenizer.token_type(id),
        Ok(TokenType::Normal | TokenType::Byte)
    ) && tokenizer
        .token_bytes()
        .get(id as usize)
        .is_some_and(|b| !b.is_empty())
        && !tokenizer.is_eog(id)
}

impl VocabTrie {
    pub fn new(tokenizer: &Tokenizer) -> VocabTrie {
        let mut nodes = vec![TrieNode::default()];
        for (id, bytes) in tokenizer.token_bytes().iter().enumerate() {
            let id = id as TokenId;
            if !in_values(tokenizer, id) {
                continue;
            }
            let mut at = 0usize;
            for &b in bytes {
                at = match nodes[at].children.iter().find(|c| c.0 == b) {
                    Some(&(_, child)) => child as usize,
                    None => {
                        nodes.push(TrieNode::default());
                        let child = nodes.len() - 1;
                        nodes[at].children.push((b, child as u32));
                        child
                    }
                };
            }
            nodes[at].tokens.push(id);
        }
        VocabTrie { nodes }
    }

    /// Marks every token the matcher in state `stack` can take whole; returns the count.
    pub(super) fn walk(&self, schema: &Schema, stack: &Stack, allowed: &mut [bool]) -> usize {
        let mut scratch: Vec<Stack> = Vec::new();
        self.visit(0, schema, stack, allowed, &mut scratch, 0)
    }

    fn visit(
        &self,
        node: usize,
        schema: &Schema,
        stack: &Stack,
        allowed: &mut [bool],
        scratch: &mut Vec<Stack>,
        depth: usize,
    ) -> usize {
        let mut n = 0;
        if scratch.len() <= depth {
            scratch.push(Vec::new());
        }
        for &(b, child) in &self.nodes[node].children {
            let mut next = std::mem::take(&mut scratch[depth]);
            next.clone_from(stack);
            if matcher::feed(schema, &mut next, b) {
                for &t in &self.nodes[child as usize].tokens {
                    if let Some(a) = allowed.get_mut(t as usize) {
                        *a = true;
                        n += 1;
                    }
                }
                n += self.visit(child as usize, schema, &next, allowed, scratch, depth + 1);
            }
            scratch[depth] = next;
        }
        n
    }
}
