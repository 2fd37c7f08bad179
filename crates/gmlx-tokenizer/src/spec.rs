//! [`TokenizerSpec`]: the plain data a tokenizer is built from, as the GGUF's
//! `tokenizer.*` keys store it.

use crate::TokenId;

/// A token's type, as `tokenizer.ggml.token_type` stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0, or any value outside 1..=6.
    Undefined,
    /// 1: an ordinary vocabulary entry.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token (BOS, EOS, turn markers); matched in text only on request.
    Control,
    /// 4: a user-defined token; always matched as a whole in text.
    UserDefined,
    /// 5: an unused slot.
    Unused,
    /// 6: a byte token `<0xNN>`.
    Byte,
}

impl TokenType {
    /// The type a `tokenizer.ggml.token_type` entry encodes.
    pub fn from_gguf(value: i32) -> TokenType {
        match value {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Everything a [`crate::Tokenizer`] is built from: the `tokenizer.*` metadata of a GGUF.
///
/// Optional fields are `None` when the key is absent; the builder then applies
/// llama.cpp's defaults for the tokenizer model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE), `llama` (SentencePiece) or `gemma4`.
    pub model: String,
    /// `tokenizer.ggml.pre`: the BPE pre-tokenizer name.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, indexed by token id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type` (empty: every token is normal).
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.scores` (empty: all zero). SentencePiece merge priorities.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.merges`: BPE merges `"left right"`, highest priority first.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_id: Option<TokenId>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_id: Option<TokenId>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot_id: Option<TokenId>,
    /// `tokenizer.ggml.eom_token_id`.
    pub eom_id: Option<TokenId>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk_id: Option<TokenId>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad_id: Option<TokenId>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`.
    pub add_space_prefix: Option<bool>,
    /// `general.name`; llama.cpp keys a few per-model token attributes on it (Phi-3).
    pub model_name: Option<String>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
    /// Named variants: `tokenizer.chat_template.<name>` for each name in
    /// `tokenizer.chat_templates`.
    pub chat_templates: Vec<(String, String)>,
}
