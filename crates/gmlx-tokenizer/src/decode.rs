//! Decoding: the bytes each token stands for, full decodes and a streaming decoder.

use crate::bytelevel;
use crate::vocab::{Attr, Vocab};

/// How token texts map back to bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PieceStyle {
    /// SentencePiece: U+2581 is a space, `<0xNN>` is a byte.
    Spm,
    /// GPT-2 byte-level characters.
    ByteLevel,
    /// SPM-style BPE (Gemma 4): like SentencePiece.
    EscapedBpe,
}

/// The bytes token `id` decodes to (llama.cpp's `token_to_piece` with specials rendered):
/// control, unknown and user-defined tokens give their text; normal tokens their text
/// with the byte-level mapping undone or U+2581 as a space; byte tokens their byte;
/// unused and undefined tokens nothing.
pub(crate) fn piece_bytes(vocab: &Vocab, id: usize, style: PieceStyle) -> Vec<u8> {
    let text = vocab.texts[id].as_str();
    let attr = vocab.attrs[id];
    if attr.is_special() || attr.has(Attr::USER_DEFINED) {
        return text.as_bytes().to_vec();
    }
    if attr.has(Attr::NORMAL) {
        return match style {
            PieceStyle::Spm | PieceStyle::EscapedBpe => text.replace('\u{2581}', " ").into_bytes(),
            PieceStyle::ByteLevel => {
                let mut out = Vec::with_capacity(text.len());
                bytelevel::decode_into(text, &mut out);
                out
            }
        };
    }
    if attr.has(Attr::BYTE) {
        if let Some(b) = parse_byte_token(text) {
            return vec![b];
        }
        let mut out = Vec::new();
        bytelevel::decode_into(text, &mut out);
        return out;
    }
    Vec::new()
}

/// `<0xNN>` → the byte.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Incremental decoding for streaming: feed token ids one at a time and get text that
/// never ends inside a UTF-8 character. The concatenation of everything [`push`] and
/// [`finish`] return equals [`crate::Tokenizer::decode`] of the same ids (invalid
/// bytes become U+FFFD exactly as `String::from_utf8_lossy` does).
///
/// [`push`]: StreamDecoder::push
/// [`finish`]: StreamDecoder::finish
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a crate::Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    pub(crate) fn new(tokenizer: &'a crate::Tokenizer, skip_special: bool) -> StreamDecoder<'a> {
        StreamDecoder {
            tokenizer,
            skip_special,
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the text that became complete (possibly empty).
    pub fn push(&mut self, id: crate::TokenId) -> crate::Result<String> {
        let piece = self.tokenizer.piece(id, self.skip_special)?;
        self.pending.extend_from_slice(piece);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix is valid UTF-8 by construction.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        // An incomplete character at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        Some(n) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + n);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Ends the stream; returns any held-back bytes (an incomplete character becomes U+FFFD).
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}
