//! `POST /v1/completions`: whole replies and SSE streams.
use std::collections::BTreeMap;

use bytes::Bytes;
use hyper::Response;

use super::sse::{self, Body};
use super::types::*;
use super::{finish_reason, now_s, parse, submit, usage_of};
use crate::access::Access;
use crate::engine::{Done, Event, TokenLogprob};
use crate::error::{Error, Result};
use crate::state::State;
use crate::validate;

fn legacy(l: &TokenLogprob) -> (String, f32, BTreeMap<String, f32>) {
    (
        l.token.clone(),
        l.logprob,
        l.top.iter().map(|(t, _, p)| (t.clone(), *p)).collect(),
    )
}

/// One choice of a whole reply.
struct Whole {
    text: String,
    logprobs: CompletionLogprobs,
    done: Option<Done>,
}

pub async fn completion(state: &State, body: Bytes, access: &Access) -> Result<Response<Body>> {
    let wire: CompletionRequest = parse(&body)?;
    let mut valid = state.with_context(|ctx| validate::completion(wire, ctx))?;
    let (id, mut events) = submit(&mut valid, "cmpl", access)?;
    let created = now_s();
    let n = valid.request.n;
    if !valid.stream {
        let mut whole: Vec<Whole> = (0..n)
            .map(|_| Whole {
                text: String::new(),
                logprobs: CompletionLogprobs {
                    tokens: Vec::new(),
                    token_logprobs: Vec::new(),
                    top_logprobs: Vec::new(),
                    text_offset: Vec::new(),
                },
                done: None,
            })
            .collect();
        let mut left = n;
        while left > 0 {
            match events.recv().await {
                Some(Event::Token(t)) => {
                    let w = &mut whole[t.index as usize];
                    if let Some(l) = &t.logprob {
                        let (tok, p, top) = legacy(l);
                        w.logprobs.text_offset.push(w.text.len());
                        w.logprobs.tokens.push(tok);
                        w.logprobs.token_logprobs.push(p);
                        w.logprobs.top_logprobs.push(top);
                    }
                    w.text += &t.text;
                }
                Some(Event::Done(d)) => {
                    whole[d.index as usize].done = Some(d);
                    left -= 1;
                }
                Some(Event::Failed(e)) => return Err(e),
                None => return Err(Error::ShuttingDown),
            }
        }
        let mut dones = Vec::with_capacity(n);
        let mut choices = Vec::with_capacity(n);
        for (i, w) in whole.into_iter().enumerate() {
            let done = w.done.ok_or(Error::ShuttingDown)?;
            choices.push(CompletionChoice {
                index: i as u32,
                text: w.text,
                logprobs: valid.request.logprobs.map(|_| w.logprobs),
                finish_reason: Some(finish_reason(done.finish)),
            });
            dones.push(done);
        }
        let reply = Completion {
            id,
            object: "text_completion",
            created,
            model: valid.model,
            choices,
            usage: Some(usage_of(&dones)),
        };
        return Ok(sse::json(200, &reply));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let model = valid.model.clone();
    let include_usage = valid.include_usage;
    tokio::spawn(async move {
        let chunk = |choices: Vec<CompletionChoice>, usage| Completion {
            id: id.clone(),
            object: "text_completion",
            created,
            model: model.clone(),
            choices,
            usage,
        };
        let one = |index: u32, text: String, logprobs, finish| CompletionChoice {
            index,
            text,
            logprobs,
            finish_reason: finish,
        };
        let mut dones = Vec::with_capacity(n);
        while dones.len() < n {
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
                    sse::event(&chunk(vec![one(t.index, t.text, lp, None)], None))
                }
                Some(Event::Done(d)) => {
                    dones.push(d);
                    let last = one(d.index, String::new(), None, Some(finish_reason(d.finish)));
                    let usage = (include_usage && dones.len() == n).then(|| usage_of(&dones));
                    sse::event(&chunk(vec![last], usage))
                }
                Some(Event::Failed(e)) => return sse::end_with_error(&tx, &e).await,
                None => return,
            };
            if tx.send(out).await.is_err() {
                return;
            }
        }
        let _ = tx.send(Bytes::from_static(sse::DONE)).await;
    });
    Ok(sse::stream(rx))
}
