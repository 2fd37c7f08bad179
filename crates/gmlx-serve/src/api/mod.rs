//! Endpoint handlers: parse the wire request, validate it, hand it to the engine, shape the
//! reply (whole JSON or SSE).
pub mod reasoning;
pub mod sse;
pub mod types;

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use gmlx_models::FinishReason;
use hyper::Response;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::{Done, Event, TokenLogprob};
use crate::error::{Error, Result};
use crate::http::State;
use crate::validate::{self, Valid};
use reasoning::ReasoningSplitter;
use sse::Body;
use types::*;

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

fn usage(d: &Done) -> Usage {
    Usage {
        prompt_tokens: d.prompt_tokens,
        completion_tokens: d.completion_tokens,
        total_tokens: d.prompt_tokens + d.completion_tokens,
    }
}

fn chat_logprob(l: TokenLogprob) -> ChatTokenLogprob {
    ChatTokenLogprob {
        token: l.token,
        logprob: l.logprob,
        bytes: l.bytes,
        top_logprobs: l
            .top
            .into_iter()
            .map(|(token, bytes, logprob)| TopLogprob {
                token,
                logprob,
                bytes,
            })
            .collect(),
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| Error::BadJson {
        reason: e.to_string(),
    })
}

fn submit(valid: &mut Valid, prefix: &str) -> Result<(String, UnboundedReceiver<Event>)> {
    let id = request_id(prefix);
    valid.request.id = id.clone();
    let events = valid.info.engine.submit(valid.request.clone())?;
    Ok((id, events))
}

pub async fn chat(state: &State, body: Bytes) -> Result<Response<Body>> {
    let wire: ChatCompletionRequest = parse(&body)?;
    let mut valid = state.with_context(|ctx| validate::chat(wire, ctx))?;
    let (id, mut events) = submit(&mut valid, "chatcmpl")?;
    let created = now_s();
    let mut split = valid.reasoning.map(ReasoningSplitter::new);
    if !valid.stream {
        let (mut content, mut thinking) = (String::new(), String::new());
        let mut logprobs = Vec::new();
        let done = loop {
            match events.recv().await {
                Some(Event::Token(t)) => {
                    if let Some(s) = &mut split {
                        let (r, c) = s.push(&t.text);
                        thinking += &r;
                        content += &c;
                    } else {
                        content += &t.text;
                    }
                    logprobs.extend(t.logprob.map(chat_logprob));
                }
                Some(Event::Done(d)) => break d,
                Some(Event::Failed(e)) => return Err(e),
                None => return Err(Error::ShuttingDown),
            }
        };
        if let Some(s) = &mut split {
            let (r, c) = s.finish();
            thinking += &r;
            content += &c;
        }
        let reply = ChatCompletion {
            id,
            object: "chat.completion",
            created,
            model: valid.model,
            choices: vec![ChatChoice {
                index: 0,
                message: Message {
                    role: "assistant",
                    content,
                    reasoning_content: split.is_some().then_some(thinking),
                },
                logprobs: valid
                    .request
                    .logprobs
                    .map(|_| ChatLogprobs { content: logprobs }),
                finish_reason: finish_reason(done.finish),
            }],
            usage: usage(&done),
        };
        return Ok(sse::json(200, &reply));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let model = valid.model.clone();
    let include_usage = valid.include_usage;
    let want_logprobs = valid.request.logprobs.is_some();
    tokio::spawn(async move {
        let chunk = |delta: Delta, logprobs, finish: Option<&'static str>| ChatChunk {
            id: id.clone(),
            object: "chat.completion.chunk",
            created,
            model: model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                logprobs,
                finish_reason: finish,
            }],
            usage: None,
        };
        let first = Delta {
            role: Some("assistant"),
            content: Some(String::new()),
            ..Delta::default()
        };
        if tx
            .send(sse::event(&chunk(first, None, None)))
            .await
            .is_err()
        {
            return;
        }
        let delta = |r: String, c: String| Delta {
            role: None,
            content: (!c.is_empty()).then_some(c),
            reasoning_content: (!r.is_empty()).then_some(r),
        };
        loop {
            let out = match events.recv().await {
                Some(Event::Token(t)) => {
                    let (r, c) = match &mut split {
                        Some(s) => s.push(&t.text),
                        None => (String::new(), t.text),
                    };
                    let lp = t.logprob.filter(|_| want_logprobs).map(|l| ChatLogprobs {
                        content: vec![chat_logprob(l)],
                    });
                    if r.is_empty() && c.is_empty() && lp.is_none() {
                        continue;
                    }
                    sse::event(&chunk(delta(r, c), lp, None))
                }
                Some(Event::Done(d)) => {
                    let (r, c) = split.as_mut().map(|s| s.finish()).unwrap_or_default();
                    if !(r.is_empty() && c.is_empty()) {
                        let _ = tx.send(sse::event(&chunk(delta(r, c), None, None))).await;
                    }
                    let _ = tx
                        .send(sse::event(&chunk(
                            Delta::default(),
                            None,
                            Some(finish_reason(d.finish)),
                        )))
                        .await;
                    if include_usage {
                        let mut u = chunk(Delta::default(), None, None);
                        u.choices.clear();
                        u.usage = Some(usage(&d));
                        let _ = tx.send(sse::event(&u)).await;
                    }
                    let _ = tx.send(Bytes::from_static(sse::DONE)).await;
                    return;
                }
                Some(Event::Failed(e)) => {
                    let _ = tx.send(sse::event(&e.body())).await;
                    return;
                }
                None => return,
            };
            if tx.send(out).await.is_err() {
                return; // the client went away; dropping `events` frees the row
            }
        }
    });
    Ok(sse::stream(rx))
}

pub async fn completion(state: &State, body: Bytes) -> Result<Response<Body>> {
    let wire: CompletionRequest = parse(&body)?;
    let mut valid = state.with_context(|ctx| validate::completion(wire, ctx))?;
    let (id, mut events) = submit(&mut valid, "cmpl")?;
    let created = now_s();
    let legacy = |l: &TokenLogprob| {
        (
            l.token.clone(),
            l.logprob,
            l.top
                .iter()
                .map(|(t, _, p)| (t.clone(), *p))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    if !valid.stream {
        let mut text = String::new();
        let mut lp = CompletionLogprobs {
            tokens: Vec::new(),
            token_logprobs: Vec::new(),
            top_logprobs: Vec::new(),
            text_offset: Vec::new(),
        };
        let done = loop {
            match events.recv().await {
                Some(Event::Token(t)) => {
                    if let Some(l) = &t.logprob {
                        let (tok, p, top) = legacy(l);
                        lp.text_offset.push(text.len());
                        lp.tokens.push(tok);
                        lp.token_logprobs.push(p);
                        lp.top_logprobs.push(top);
                    }
                    text += &t.text;
                }
                Some(Event::Done(d)) => break d,
                Some(Event::Failed(e)) => return Err(e),
                None => return Err(Error::ShuttingDown),
            }
        };
        let reply = Completion {
            id,
            object: "text_completion",
            created,
            model: valid.model,
            choices: vec![CompletionChoice {
                index: 0,
                text,
                logprobs: valid.request.logprobs.map(|_| lp),
                finish_reason: Some(finish_reason(done.finish)),
            }],
            usage: Some(usage(&done)),
        };
        return Ok(sse::json(200, &reply));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let model = valid.model.clone();
    let include_usage = valid.include_usage;
    tokio::spawn(async move {
        let chunk = |text: String, logprobs, finish, usage| Completion {
            id: id.clone(),
            object: "text_completion",
            created,
            model: model.clone(),
            choices: vec![CompletionChoice {
                index: 0,
                text,
                logprobs,
                finish_reason: finish,
            }],
            usage,
        };
        loop {
            let out = match events.recv().await {
                Some(Event::Token(t)) => {
                    let lp = t.logprob.as_ref().map(|l| {
                        let (tok, p, top) = legacy(l);
                        CompletionLogprobs {
                            tokens: vec![tok],
                            token_logprobs: vec![p],
                            top_logprobs: vec![top],
                            text_offset: vec![0],
                        }
                    });
                    if t.text.is_empty() && lp.is_none() {
                        continue;
                    }
                    sse::event(&chunk(t.text, lp, None, None))
                }
                Some(Event::Done(d)) => {
                    let u = include_usage.then(|| usage(&d));
                    let last = chunk(String::new(), None, Some(finish_reason(d.finish)), u);
                    let _ = tx.send(sse::event(&last)).await;
                    let _ = tx.send(Bytes::from_static(sse::DONE)).await;
                    return;
                }
                Some(Event::Failed(e)) => {
                    let _ = tx.send(sse::event(&e.body())).await;
                    return;
                }
                None => return,
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
    });
    Ok(sse::stream(rx))
}

pub fn models(state: &State) -> Response<Body> {
    let config = state.config();
    let mut data = Vec::new();
    for m in &config.models {
        if !state.models.contains_key(&m.id) {
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

pub fn health() -> Response<Body> {
    sse::json(200, &serde_json::json!({"status": "ok"}))
}

pub fn metrics(state: &State) -> Response<Body> {
    let models: BTreeMap<&String, _> = state
        .models
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
