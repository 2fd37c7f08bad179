//! The alignment exports: what each token id decodes to, as bytes, and a hash of that map.
//!
//! `vocab_map_hash` (version 1) is SHA-256 over
//!
//! ```text
//! "gmlx-vocab-map-v1\n"
//! u64 little-endian: number of tokens N
//! for id in 0..N: u64 little-endian byte length of token_bytes[id], then the bytes
//! ```
//!
//! written as 64 lowercase hex digits. Two tokenizers hash equal exactly when they
//! have the same number of tokens and every id decodes to the same bytes.

use sha2::{Digest, Sha256};

const HASH_DOMAIN: &[u8] = b"gmlx-vocab-map-v1\n";

/// The stable hash of an id → bytes map (see the module docs for the algorithm).
pub fn vocab_map_hash<B: AsRef<[u8]>>(token_bytes: &[B]) -> String {
    let mut h = Sha256::new();
    h.update(HASH_DOMAIN);
    h.update((token_bytes.len() as u64).to_le_bytes());
    for bytes in token_bytes {
        let bytes = bytes.as_ref();
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// For each token, whether its bytes begin with whitespace: the first character, decoded
/// as UTF-8, is Unicode `White_Space`; when the bytes do not start with a whole UTF-8
/// character, whether the first byte is ASCII whitespace. Empty tokens are `false`.
pub fn whitespace_start_mask<B: AsRef<[u8]>>(token_bytes: &[B]) -> Vec<bool> {
    token_bytes
        .iter()
        .map(|b| starts_with_whitespace(b.as_ref()))
        .collect()
}

fn starts_with_whitespace(bytes: &[u8]) -> bool {
    let Some(&first) = bytes.first() else {
        return false;
    };
    let head = &bytes[..bytes.len().min(4)];
    let valid = match std::str::from_utf8(head) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or(""),
    };
    match valid.chars().next() {
        Some(c) => c.is_whitespace(),
        None => first.is_ascii_whitespace() || first == 0x0b,
    }
}

/// Two tokenizations of one text, matched token for token by the bytes they cover: for each
/// token of `b`, the index of the token of `a` that spans exactly the same bytes, or `None`
/// (the two split that stretch differently). Each side is given as the ids of its tokens with
/// its vocabulary's [`Tokenizer::token_bytes`](crate::Tokenizer::token_bytes) and
/// [`whitespace_start_mask`]. SentencePiece's space prefix (one tokenization's first token
/// starting with a space the other's text lacks) is undone before matching, the mask telling
/// which side added it; texts that still differ match nothing.
pub fn align_by_bytes<B: AsRef<[u8]>, C: AsRef<[u8]>>(
    a: Tokens<'_, B>,
    b: Tokens<'_, C>,
) -> Vec<Option<usize>> {
    let (mut spans_a, text_a) = spans(a.ids, a.token_bytes);
    let (mut spans_b, text_b) = spans(b.ids, b.token_bytes);
    let prefixed = |ids: &[u32], mask: &[bool]| {
        ids.first()
            .is_some_and(|&i| mask.get(i as usize).copied().unwrap_or(false))
    };
    if text_a != text_b {
        if prefixed(b.ids, b.whitespace_start)
            && text_b.len() == text_a.len() + 1
            && text_b[1..] == text_a[..]
        {
            shift(&mut spans_b);
        } else if prefixed(a.ids, a.whitespace_start)
            && text_a.len() == text_b.len() + 1
            && text_a[1..] == text_b[..]
        {
            shift(&mut spans_a);
        } else {
            return vec![None; b.ids.len()];
        }
    }
    let mut out = Vec::with_capacity(spans_b.len());
    let mut i = 0;
    for sb in &spans_b {
        while i < spans_a.len() && spans_a[i].0 < sb.0 {
            i += 1;
        }
        out.push((i < spans_a.len() && spans_a[i] == *sb && sb.0 < sb.1).then_some(i));
    }
    out
}

/// One side of [`align_by_bytes`].
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a, B> {
    pub ids: &'a [u32],
    pub token_bytes: &'a [B],
    pub whitespace_start: &'a [bool],
}

/// The `[start, end)` byte span of each token in the concatenation of their bytes, and that
/// concatenation.
pub fn spans<B: AsRef<[u8]>>(ids: &[u32], token_bytes: &[B]) -> (Vec<(i64, i64)>, Vec<u8>) {
    let mut text = Vec::new();
    let spans = ids
        .iter()
        .map(|&id| {
            let start = text.len() as i64;
            if let Some(bytes) = token_bytes.get(id as usize) {
                text.extend_from_slice(bytes.as_ref());
            }
            (start, text.len() as i64)
        })
        .collect();
    (spans, text)
}

/// Drops a one-byte prefix from spans: the first token keeps what is left of it.
fn shift(spans: &mut [(i64, i64)]) {
    for s in spans.iter_mut() {
        *s = ((s.0 - 1).max(0), s.1 - 1);
    }
    // the first token lost its space: it no longer spans the bytes it decodes to
    if let Some(first) = spans.first_mut() {
        first.0 = -1;
    }
}

/// For each token of vocabulary `from`, the token of `to` with exactly the same bytes (the
/// first such id), if any: how a distribution over one vocabulary's candidates carries over
/// to the other's.
pub fn same_bytes_map<B: AsRef<[u8]>, C: AsRef<[u8]>>(from: &[B], to: &[C]) -> Vec<Option<u32>> {
    let mut by_bytes: std::collections::HashMap<&[u8], u32> = std::collections::HashMap::new();
    for (id, bytes) in to.iter().enumerate() {
        let bytes = bytes.as_ref();
        if !bytes.is_empty() {
            by_bytes.entry(bytes).or_insert(id as u32);
        }
    }
    from.iter()
        .map(|b| by_bytes.get(b.as_ref()).copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_pinned() {
        // Pinned so that any change to the algorithm is noticed.
        let map: [&[u8]; 3] = [b"a", b" b", b"\xe2"];
        // The same value as Python's hashlib over the documented byte stream.
        assert_eq!(
            vocab_map_hash(&map),
            "c5c3a87fa3df57fea181b855da359412f70e0bd9c004f0c873f34d5d09b9890f"
        );
        assert_eq!(
            vocab_map_hash(&map),
            vocab_map_hash(&[b"a".to_vec(), b" b".to_vec(), vec![0xe2]])
        );
        assert_ne!(vocab_map_hash(&map), vocab_map_hash(&map[..2]));
        let moved: [&[u8]; 3] = [b"a ", b"b", b"\xe2"];
        assert_ne!(vocab_map_hash(&map), vocab_map_hash(&moved));
    }

    #[test]
    fn tokenizations_match_where_they_cover_the_same_bytes() {
        let a_vocab: [&[u8]; 5] = [b"The", b" cat", b" c", b"at", b"s"];
        let b_vocab: [&[u8]; 5] = [b" The", b" c", b"ats", b"The", b" cat"];
        let ws_a = whitespace_start_mask(&a_vocab);
        let ws_b = whitespace_start_mask(&b_vocab);
        let a = Tokens {
            ids: &[0, 1, 4],
            token_bytes: &a_vocab,
            whitespace_start: &ws_a,
        };
        // "The" + " c" + "ats": the first token agrees, " cat|s" against " c|ats" does not
        let b = Tokens {
            ids: &[3, 1, 2],
            token_bytes: &b_vocab,
            whitespace_start: &ws_b,
        };
        assert_eq!(align_by_bytes(a, b), [Some(0), None, None]);
        // SentencePiece's space prefix: " The" + " cat" + ... against "The" + " cat" + "s"
        let spm = Tokens {
            ids: &[0, 4],
            token_bytes: &b_vocab,
            whitespace_start: &ws_b,
        };
        let bpe = Tokens {
            ids: &[0, 1],
            token_bytes: &a_vocab,
            whitespace_start: &ws_a,
        };
        assert_eq!(align_by_bytes(bpe, spm), [None, Some(1)]);
        assert_eq!(align_by_bytes(spm, bpe), [None, Some(1)]);
        // different texts match nothing
        let other = Tokens {
            ids: &[2],
            token_bytes: &a_vocab,
            whitespace_start: &ws_a,
        };
        assert_eq!(align_by_bytes(a, other), [None]);
        assert_eq!(
            same_bytes_map(&a_vocab, &b_vocab),
            [Some(3), Some(4), Some(1), None, None]
        );
    }

    #[test]
    fn whitespace_mask() {
        let map: [&[u8]; 5] = [b" x", b"x ", b"\n", b"\xe3\x80\x80y", b""];
        assert_eq!(
            whitespace_start_mask(&map),
            vec![true, false, true, true, false]
        );
    }
}
