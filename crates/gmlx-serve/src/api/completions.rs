//! `POST /v1/completions`: whole replies and SSE streams.
use std::collections::BTreeMap;

use bytes::Bytes;
use hyper::Response;

use super::sse::{self, Body};
use super::types::*;
use super::{finish_reason, now_s, parse, submit, usage};
use crate::access::Access;
use crate::engine::{Event, TokenLogprob};
use crate::error::{Error, Result};
use crate::state::State;
use crate::validate;

pub async fn completion(state: &State, body: Bytes, access: &Access) -> Result<Response<Body>> {
    let wire: CompletionRequest = parse(&body)?;
    let mut valid = state.with_context(|ctx| validate::completion(wire, ctx))?;
    let (id, mut events) = submit(&mut valid, "cmpl", access)?;
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
                Some(Event::Failed(e)) => return sse::end_with_error(&tx, &e).await,
                None => return,
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
    });
    Ok(sse::stream(rx))
}
