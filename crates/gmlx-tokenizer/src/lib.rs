//! gmlx-tokenizer: tokenizers built from GGUF metadata, chat templates, and the
//! alignment exports.
//!
//! ```
//! use gmlx_tokenizer::{ChatRequest, ChatTemplate, Clock};
//!
//! let template = ChatTemplate::new(
//!     "default",
//!     "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}\
//!      {% if add_generation_prompt %}<|assistant|>{% endif %}",
//!     "<s>",
//!     "</s>",
//!     Clock::default(),
//! )?;
//! let request = ChatRequest::new(vec![serde_json::json!({"role": "user", "content": "Hi"})]);
//! assert_eq!(template.render(&request)?, "<|user|>Hi\n<|assistant|>");
//! # Ok::<(), gmlx_tokenizer::Error>(())
//! ```

mod error;
mod template;

pub use error::{Error, Result};
pub use template::{ChatRequest, ChatTemplate, Clock, DateTime};
