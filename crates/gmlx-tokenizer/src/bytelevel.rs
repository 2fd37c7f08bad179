//! GPT-2's byte-level alphabet: every byte is shown as a printable character so that
//! byte-level BPE vocabularies can be stored as text.
//!
//! Bytes `!`..=`~`, `¡`..=`¬` and `®`..=`ÿ` stand for themselves; the other 68 bytes
//! map, in increasing order, to U+0100, U+0101, ...

use std::sync::OnceLock;

struct Tables {
    byte_to_char: [char; 256],
    char_to_byte: std::collections::HashMap<char, u8>,
}

fn is_self_mapped(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut byte_to_char = ['\0'; 256];
        let mut char_to_byte = std::collections::HashMap::with_capacity(256);
        let mut next = 256u32;
        for b in 0..=255u8 {
            let c = if is_self_mapped(b) {
                char::from(b)
            } else {
                let c = char::from_u32(next).unwrap_or('\u{FFFD}');
                next += 1;
                c
            };
            byte_to_char[usize::from(b)] = c;
            char_to_byte.insert(c, b);
        }
        Tables {
            byte_to_char,
            char_to_byte,
        }
    })
}

/// Encodes raw text bytes as byte-level characters.
pub(crate) fn encode(text: &str) -> String {
    let t = tables();
    text.bytes()
        .map(|b| t.byte_to_char[usize::from(b)])
        .collect()
}

/// Decodes a byte-level token text back to bytes. A character outside the alphabet
/// (which a well-formed vocabulary never has) contributes its own UTF-8 bytes.
pub(crate) fn decode_into(token: &str, out: &mut Vec<u8>) {
    let t = tables();
    for c in token.chars() {
        match t.char_to_byte.get(&c) {
            Some(b) => out.push(*b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let t = tables();
        let text: String = all
            .iter()
            .map(|b| t.byte_to_char[usize::from(*b)])
            .collect();
        let mut back = Vec::new();
        decode_into(&text, &mut back);
        assert_eq!(back, all);
        assert_eq!(encode(" "), "Ġ");
        assert_eq!(encode("\n"), "Ċ");
    }
}
