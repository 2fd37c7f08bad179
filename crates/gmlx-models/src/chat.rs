//! Prompts through the model's own chat template.
use gmlx_tokenizer::{ChatRequest, Clock, TokenId, Tokenizer};

use crate::error::Result;

/// Renders `messages` (`{"role", "content"}` objects) with the model's default template,
/// opening an assistant turn; `kwargs` are extra template variables (`enable_thinking`).
pub fn render(
    tokenizer: &Tokenizer,
    messages: Vec<serde_json::Value>,
    kwargs: serde_json::Map<String, serde_json::Value>,
) -> Result<String> {
    let template = tokenizer.chat_template("default", Clock::SystemUtc)?;
    let request = ChatRequest {
        messages,
        tools: None,
        documents: None,
        add_generation_prompt: true,
        kwargs,
    };
    Ok(template.render(&request)?)
}

/// Token ids for one user turn (with an optional system turn) in the model's chat format.
pub fn user_prompt(
    tokenizer: &Tokenizer,
    system: Option<&str>,
    user: &str,
) -> Result<Vec<TokenId>> {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(serde_json::json!({"role": "system", "content": system}));
    }
    messages.push(serde_json::json!({"role": "user", "content": user}));
    let text = render(tokenizer, messages, serde_json::Map::new())?;
    // The template writes the special tokens as text; they must come back as single tokens.
    Ok(tokenizer.encode(&text, true, true)?)
}

/// Token ids for raw text, with BOS/EOS as the model's metadata asks.
pub fn raw_prompt(tokenizer: &Tokenizer, text: &str) -> Result<Vec<TokenId>> {
    Ok(tokenizer.encode(text, true, false)?)
}
