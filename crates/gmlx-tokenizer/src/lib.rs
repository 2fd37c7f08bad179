//! gmlx-tokenizer: tokenizers built from GGUF metadata (`tokenizer.ggml.*`), chat
//! templates, and the alignment exports.
//!
//! ```
//! use gmlx_tokenizer::{ChatRequest, Tokenizer, TokenizerSpec};
//!
//! // A tiny byte-level BPE vocabulary ("Ġ" is the space byte).
//! let spec = TokenizerSpec {
//!     model: "gpt2".into(),
//!     pre: Some("gpt-2".into()),
//!     tokens: ["h", "i", "Ġ", "hi", "Ġhi", "<|end|>"].map(String::from).to_vec(),
//!     token_types: vec![1, 1, 1, 1, 1, 3],
//!     merges: vec!["h i".into(), "Ġ hi".into()],
//!     eos_id: Some(5),
//!     chat_template: Some("{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}".into()),
//!     ..TokenizerSpec::default()
//! };
//! let tok = Tokenizer::from_spec(&spec)?;
//! let ids = tok.encode("hi hi<|end|>", false, true)?;
//! assert_eq!(ids, [3, 4, 5]);
//! assert_eq!(tok.decode(&ids, true)?, "hi hi");
//! assert!(tok.is_eog(5));
//!
//! let template = tok.chat_template("default", Default::default())?;
//! let prompt = template.render(&ChatRequest::new(vec![
//!     serde_json::json!({"role": "user", "content": "hi"}),
//! ]))?;
//! assert_eq!(prompt, "hi<|end|>");
//! # Ok::<(), gmlx_tokenizer::Error>(())
//! ```

mod align;
mod bpe;
mod bytelevel;
mod decode;
mod error;
mod gguf;
mod pretokenize;
mod spec;
mod special;
mod spm;
mod template;
mod tokenizer;
mod vocab;

/// A token id.
pub type TokenId = u32;

pub use align::{
    align_by_bytes, same_bytes_map, spans, vocab_map_hash, whitespace_start_mask, Tokens,
};
pub use decode::StreamDecoder;
pub use error::{Error, Result};
pub use spec::{TokenType, TokenizerSpec};
pub use template::{ChatRequest, ChatTemplate, Clock, DateTime};
pub use tokenizer::{Tokenizer, TokenizerKind};
pub use vocab::SpecialTokens;

/// The `tokenizer.ggml.pre` values this crate supports.
pub fn supported_pre_tokenizers() -> impl Iterator<Item = &'static str> {
    pretokenize::PRE_TOKENIZERS.iter().map(|(name, _)| *name)
}
