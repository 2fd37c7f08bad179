//! `POST /tokenize` and `POST /detokenize`, in llama-server's shapes.
use bytes::Bytes;
use hyper::Response;
use serde::Deserialize;

use super::parse;
use super::sse::{self, Body};
use crate::error::{Error, Result};
use crate::state::State;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
    #[serde(default)]
    with_pieces: bool,
    model: Option<String>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
    model: Option<String>,
}

fn model(state: &State, name: Option<&str>) -> Result<std::sync::Arc<crate::validate::ModelInfo>> {
    state.model(name).ok_or_else(|| Error::UnknownModel {
        model: name.unwrap_or_default().to_owned(),
    })
}

/// `{"tokens": [ids]}`, or with `with_pieces` `{"tokens": [{"id", "piece"}]}` where a piece
/// that is not valid UTF-8 is its list of bytes.
pub fn tokenize(state: &State, body: Bytes) -> Result<Response<Body>> {
    let r: TokenizeRequest = parse(&body)?;
    let info = model(state, r.model.as_deref())?;
    let ids = info
        .tokenizer
        .encode(&r.content, r.add_special, r.parse_special)
        .map_err(|e| Error::BadParam {
            param: "content".to_owned(),
            reason: e.to_string(),
        })?;
    let tokens: Vec<serde_json::Value> = if r.with_pieces {
        ids.iter()
            .map(|&id| {
                let bytes = info
                    .tokenizer
                    .decode_bytes(&[id], false)
                    .unwrap_or_default();
                let piece = match String::from_utf8(bytes) {
                    Ok(text) => serde_json::json!(text),
                    Err(e) => serde_json::json!(e.into_bytes()),
                };
                serde_json::json!({"id": id, "piece": piece})
            })
            .collect()
    } else {
        ids.iter().map(|&id| serde_json::json!(id)).collect()
    };
    Ok(sse::json(200, &serde_json::json!({ "tokens": tokens })))
}

/// `{"content": text}`.
pub fn detokenize(state: &State, body: Bytes) -> Result<Response<Body>> {
    let r: DetokenizeRequest = parse(&body)?;
    let info = model(state, r.model.as_deref())?;
    // an id outside the vocabulary is the tokenizer's own error
    let content = info
        .tokenizer
        .decode(&r.tokens, false)
        .map_err(|e| Error::BadParam {
            param: "tokens".to_owned(),
            reason: e.to_string(),
        })?;
    Ok(sse::json(200, &serde_json::json!({ "content": content })))
}
