//! [`Tokenizer`]: a vocabulary from a [`TokenizerSpec`], encode and decode.

use crate::align;
use crate::bpe::BpeEncoder;
use crate::decode::{piece_bytes, PieceStyle, StreamDecoder};
use crate::error::{Error, Result};
use crate::pretokenize;
use crate::spec::{TokenType, TokenizerSpec};
use crate::special::{Fragment, SpecialMatcher};
use crate::spm::SpmEncoder;
use crate::template::{ChatTemplate, Clock};
use crate::vocab::{Defaults, SpecialTokens, Vocab};
use crate::TokenId;

#[derive(Debug)]
enum Encoder {
    Spm(SpmEncoder),
    Bpe(BpeEncoder),
}

/// The tokenizer families this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// llama-style SentencePiece (`tokenizer.ggml.model = llama`).
    SentencePiece,
    /// Byte-level BPE (`gpt2`) or SPM-style BPE (`gemma4`).
    Bpe,
}

/// A tokenizer built from GGUF metadata: encode, decode, special tokens, chat templates.
///
/// `Send + Sync`: share one behind an `Arc` between request handlers.
pub struct Tokenizer {
    vocab: Vocab,
    encoder: Encoder,
    special_matcher: SpecialMatcher,
    pre: Option<String>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    /// Bytes of every token with specials rendered.
    pieces: Vec<Vec<u8>>,
    chat_templates: Vec<(String, String)>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind())
            .field("pre", &self.pre)
            .field("vocab_size", &self.vocab.len())
            .field("special", &self.vocab.special)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("add_space_prefix", &self.add_space_prefix)
            .field("chat_templates", &self.chat_template_names())
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer `spec` describes. An unknown model or pre-tokenizer is an
    /// error naming it.
    pub fn from_spec(spec: &TokenizerSpec) -> Result<Tokenizer> {
        if spec.tokens.is_empty() {
            return Err(Error::MissingKey {
                key: "tokenizer.ggml.tokens".into(),
            });
        }
        for (key, len) in [
            ("tokenizer.ggml.token_type", spec.token_types.len()),
            ("tokenizer.ggml.scores", spec.scores.len()),
        ] {
            if len != 0 && len < spec.tokens.len() {
                return Err(Error::InvalidMetadata {
                    key: key.into(),
                    reason: format!("{len} entries for {} tokens", spec.tokens.len()),
                });
            }
        }
        let (kind, pre_name, defaults) = match spec.model.as_str() {
            "llama" => (
                TokenizerKind::SentencePiece,
                None,
                Defaults {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                },
            ),
            "gpt2" => (
                TokenizerKind::Bpe,
                Some(spec.pre.clone().unwrap_or_else(|| "default".into())),
                Defaults {
                    bos: Some(11),
                    eos: Some(11),
                    unk: None,
                },
            ),
            "gemma4" => (
                TokenizerKind::Bpe,
                Some("gemma4".to_owned()),
                Defaults {
                    bos: None,
                    eos: None,
                    unk: None,
                },
            ),
            other => {
                return Err(Error::UnsupportedModel {
                    model: other.to_owned(),
                })
            }
        };
        let vocab = Vocab::new(spec, defaults);
        let (encoder, default_add_bos, default_space_prefix) = match kind {
            TokenizerKind::SentencePiece => (Encoder::Spm(SpmEncoder::new(&vocab)?), true, true),
            TokenizerKind::Bpe => {
                let name = pre_name.as_deref().unwrap_or("default");
                let config = pretokenize::lookup(&spec.model, name)?;
                if spec.merges.is_empty() {
                    return Err(Error::MissingKey {
                        key: "tokenizer.ggml.merges".into(),
                    });
                }
                let encoder = BpeEncoder::new(&vocab, &spec.merges, config)?;
                (Encoder::Bpe(encoder), config.add_bos, false)
            }
        };
        let mut add_bos = spec.add_bos.unwrap_or(default_add_bos);
        if spec.model == "gemma4" {
            add_bos = true; // llama.cpp overrides Gemma 4's flag
        }
        let add_eos = spec.add_eos.unwrap_or(false);
        let add_space_prefix = spec.add_space_prefix.unwrap_or(default_space_prefix);
        let style = match &encoder {
            Encoder::Spm(_) => PieceStyle::Spm,
            Encoder::Bpe(b) if b.config().byte_encode => PieceStyle::ByteLevel,
            Encoder::Bpe(_) => PieceStyle::EscapedBpe,
        };
        let pieces = (0..vocab.len())
            .map(|id| piece_bytes(&vocab, id, style))
            .collect();
        let special_matcher = SpecialMatcher::new(&vocab)?;
        let mut chat_templates = Vec::new();
        if let Some(t) = &spec.chat_template {
            chat_templates.push(("default".to_owned(), t.clone()));
        }
        chat_templates.extend(spec.chat_templates.iter().cloned());
        Ok(Tokenizer {
            vocab,
            encoder,
            special_matcher,
            pre: pre_name,
            add_bos,
            add_eos,
            add_space_prefix,
            pieces,
            chat_templates,
        })
    }

    /// Which family this tokenizer is.
    pub fn kind(&self) -> TokenizerKind {
        match self.encoder {
            Encoder::Spm(_) => TokenizerKind::SentencePiece,
            Encoder::Bpe(_) => TokenizerKind::Bpe,
        }
    }

    /// The pre-tokenizer in use (BPE only).
    pub fn pre_tokenizer(&self) -> Option<&str> {
        self.pre.as_deref()
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The special token ids (BOS, EOS, EOT, ..., and the end-of-generation set).
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.vocab.special
    }

    /// The BOS id, if the vocabulary has one.
    pub fn bos_id(&self) -> Option<TokenId> {
        self.vocab.special.bos
    }

    /// The EOS id, if the vocabulary has one.
    pub fn eos_id(&self) -> Option<TokenId> {
        self.vocab.special.eos
    }

    /// Every token that ends generation (EOS, EOT, EOM and the tokens llama.cpp
    /// recognises by text, such as `<|im_end|>`).
    pub fn eog_ids(&self) -> &[TokenId] {
        &self.vocab.special.eog
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: TokenId) -> bool {
        self.vocab.special.eog.binary_search(&id).is_ok()
    }

    /// Whether encoding with `add_special` starts with BOS (`tokenizer.ggml.add_bos_token`).
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether encoding with `add_special` ends with EOS (`tokenizer.ggml.add_eos_token`).
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether SentencePiece text gets a leading space (`tokenizer.ggml.add_space_prefix`).
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// The text of token `id` as stored in the vocabulary.
    pub fn token_text(&self, id: TokenId) -> Result<&str> {
        self.check(id)?;
        Ok(&self.vocab.texts[id as usize])
    }

    /// The type of token `id` (after llama.cpp's adjustments, e.g. EOG tokens are control).
    pub fn token_type(&self, id: TokenId) -> Result<TokenType> {
        use crate::vocab::Attr;
        self.check(id)?;
        let a = self.vocab.attrs[id as usize];
        Ok(if a.has(Attr::CONTROL) {
            TokenType::Control
        } else if a.has(Attr::USER_DEFINED) {
            TokenType::UserDefined
        } else if a.has(Attr::UNKNOWN) {
            TokenType::Unknown
        } else if a.has(Attr::BYTE) {
            TokenType::Byte
        } else if a.has(Attr::UNUSED) {
            TokenType::Unused
        } else if a.has(Attr::NORMAL) {
            TokenType::Normal
        } else {
            TokenType::Undefined
        })
    }

    /// The id of the token whose text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<TokenId> {
        self.vocab.ids.get(text).copied()
    }

    fn check(&self, id: TokenId) -> Result<()> {
        if (id as usize) < self.vocab.len() {
            Ok(())
        } else {
            Err(Error::TokenOutOfRange {
                id,
                vocab_size: self.vocab.len(),
            })
        }
    }

    /// Encodes `text` as llama.cpp's `llama_tokenize` does.
    ///
    /// `add_special`: add BOS/EOS where the model asks for them ([`Self::add_bos`],
    /// [`Self::add_eos`]). `parse_special`: match control tokens written in the text
    /// (`<|im_start|>`) as single tokens; user-defined tokens are always matched.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<TokenId>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.push(
                self.vocab
                    .special
                    .bos
                    .ok_or(Error::MissingSpecialToken { role: "bos" })?,
            );
        }
        let fragments = self
            .special_matcher
            .partition(&self.vocab, text, parse_special);
        match &self.encoder {
            Encoder::Spm(spm) => {
                let mut prev_special = true;
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(t) => {
                            let mut s = String::with_capacity(t.len() + 3);
                            if self.add_space_prefix && prev_special {
                                s.push(' ');
                            }
                            s.push_str(t);
                            spm.tokenize(&s.replace(' ', "\u{2581}"), &mut out)?;
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Encoder::Bpe(bpe) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(t) => bpe.tokenize(&self.vocab, t, &mut out)?,
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.push(
                self.vocab
                    .special
                    .eos
                    .ok_or(Error::MissingSpecialToken { role: "eos" })?,
            );
        }
        Ok(out)
    }

    pub(crate) fn piece(&self, id: TokenId, skip_special: bool) -> Result<&[u8]> {
        self.check(id)?;
        if skip_special && self.vocab.attrs[id as usize].is_special() {
            return Ok(&[]);
        }
        Ok(&self.pieces[id as usize])
    }

    /// The bytes `ids` decode to: each token's [`Self::token_bytes`] entry concatenated,
    /// with control and unknown tokens left out when `skip_special`.
    pub fn decode_bytes(&self, ids: &[TokenId], skip_special: bool) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.piece(id, skip_special)?);
        }
        Ok(out)
    }

    /// Decodes `ids` to text (invalid UTF-8 becomes U+FFFD). No spaces are removed or
    /// added: this is exactly what a stream of [`Self::stream_decoder`] outputs.
    pub fn decode(&self, ids: &[TokenId], skip_special: bool) -> Result<String> {
        let bytes = self.decode_bytes(ids, skip_special)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// An incremental decoder for streaming output.
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special)
    }

    /// For each token id, the exact bytes it decodes to: the byte-level mapping undone,
    /// SentencePiece's U+2581 as a space, `<0xNN>` as the byte; control, unknown and
    /// user-defined tokens as their text; unused tokens as nothing.
    pub fn token_bytes(&self) -> &[Vec<u8>] {
        &self.pieces
    }

    /// For each token id, whether its [`Self::token_bytes`] begin with whitespace.
    pub fn whitespace_start_mask(&self) -> Vec<bool> {
        align::whitespace_start_mask(&self.pieces)
    }

    /// The stable hash of the id → bytes map ([`crate::vocab_map_hash`]).
    pub fn vocab_map_hash(&self) -> String {
        align::vocab_map_hash(&self.pieces)
    }

    /// Names of the chat templates the model carries (`default` first when present).
    pub fn chat_template_names(&self) -> Vec<&str> {
        self.chat_templates
            .iter()
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// The source of chat template `name` (`default` is `tokenizer.chat_template`).
    pub fn chat_template_source(&self, name: &str) -> Option<&str> {
        self.chat_templates
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.as_str())
    }

    /// Compiles chat template `name` with this vocabulary's BOS/EOS texts.
    pub fn chat_template(&self, name: &str, clock: Clock) -> Result<ChatTemplate> {
        let source = self
            .chat_template_source(name)
            .ok_or_else(|| Error::NoChatTemplate {
                name: name.to_owned(),
            })?;
        let text = |id: Option<TokenId>| {
            id.map(|i| self.vocab.texts[i as usize].as_str())
                .unwrap_or("")
        };
        ChatTemplate::new(
            name,
            source,
            text(self.vocab.special.bos),
            text(self.vocab.special.eos),
            clock,
        )
    }
}
