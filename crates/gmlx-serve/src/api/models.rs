//! `GET /v1/models`, `GET /v1/models/{id}`, `/health`, `/v1/metrics`.
use std::collections::BTreeMap;

use hyper::Response;

use super::sse::{self, Body};
use super::types::*;
use crate::error::{Error, Result};
use crate::state::State;

/// `GET /v1/models/{id}`: the card of one model id or alias.
pub fn model(state: &State, id: &str) -> Result<Response<Body>> {
    if state.model(Some(id)).is_none() {
        return Err(Error::UnknownModel {
            model: id.to_owned(),
        });
    }
    Ok(sse::json(
        200,
        &ModelCard {
            id: id.to_owned(),
            object: "model",
            created: 0,
            owned_by: "gmlx",
        },
    ))
}

pub fn models(state: &State) -> Response<Body> {
    let config = state.config();
    let mut data = Vec::new();
    for m in &config.models {
        if !state.models().contains_key(&m.id) {
            continue;
        }
        for name in std::iter::once(&m.id).chain(&m.aliases) {
            data.push(ModelCard {
                id: name.clone(),
                object: "model",
                created: 0,
                owned_by: "gmlx",
            });
        }
    }
    sse::json(
        200,
        &ModelList {
            object: "list",
            data,
        },
    )
}

/// 200 `{"status": "ok"}` once every model is loaded, 503 `{"status": "loading"}` before.
pub fn health(state: &State) -> Response<Body> {
    if state.is_ready() {
        sse::json(200, &serde_json::json!({"status": "ok"}))
    } else {
        let mut r = sse::json(503, &serde_json::json!({"status": "loading"}));
        r.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from(1),
        );
        r
    }
}

pub fn metrics(state: &State) -> Response<Body> {
    let models: BTreeMap<&String, _> = state
        .models()
        .iter()
        .map(|(id, m)| (id, m.engine.stats()))
        .collect();
    let queue_depth: usize = models.values().map(|s| s.queue_depth).sum();
    let active_rows: usize = models.values().map(|s| s.active_rows).sum();
    let tokens_per_s: f64 = models.values().map(|s| s.decode_tokens_per_s).sum();
    sse::json(
        200,
        &serde_json::json!({
            "queue_depth": queue_depth,
            "active_rows": active_rows,
            "decode_tokens_per_s": tokens_per_s,
            "rss_bytes": crate::metrics::rss_bytes(),
            "models": models,
        }),
    )
}
