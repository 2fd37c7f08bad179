//! Endpoint handlers: parse the wire request, validate it, hand it to the engine, shape the
//! reply (whole JSON or SSE). One module per endpoint family; the helpers they share are here.
mod chat;
mod completions;
mod models;
mod prometheus;
pub mod reasoning;
pub mod sse;
mod tokens;
pub mod types;

pub use chat::chat;
pub use completions::completion;
pub use models::{health, metrics, model, models};
pub use prometheus::prometheus;
pub use tokens::{detokenize, tokenize};

use std::time::{SystemTime, UNIX_EPOCH};

use crate::access::{Access, Tracked};
use crate::engine::Done;
use crate::error::{Error, Result};
use crate::validate::Valid;
use bytes::Bytes;
use gmlx_models::FinishReason;
use types::Usage;

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn request_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{prefix}-{:x}{:06x}",
        now_s(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

/// The usage of a request's choices: the prompt counted once, every choice's tokens.
fn usage_of(done: &[Done]) -> Usage {
    let prompt_tokens = done.first().map_or(0, |d| d.prompt_tokens);
    let completion_tokens = done.iter().map(|d| d.completion_tokens).sum();
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| Error::BadJson {
        reason: e.to_string(),
    })
}

fn submit(valid: &mut Valid, prefix: &str, access: &Access) -> Result<(String, Tracked)> {
    let id = request_id(prefix);
    valid.request.id = id.clone();
    valid.request.span = tracing::info_span!("request", request_id = %id, model = %valid.model);
    let events = valid.info.engine.submit(valid.request.clone())?;
    let events = access.track(&id, events);
    Ok((id, events))
}
