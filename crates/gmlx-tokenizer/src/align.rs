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
    fn whitespace_mask() {
        let map: [&[u8]; 5] = [b" x", b"x ", b"\n", b"\xe3\x80\x80y", b""];
        assert_eq!(
            whitespace_start_mask(&map),
            vec![true, false, true, true, false]
        );
    }
}
