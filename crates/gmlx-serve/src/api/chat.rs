//! `POST /v1/chat/completions`: whole replies and SSE streams, with reasoning split out.
use bytes::Bytes;
use hyper::Response;

use super::reasoning::ReasoningSplitter;
use super::sse::{self, Body};
use super::types::*;
use super::{finish_reason, now_s, parse, submit, usage};
use crate::access::Access;
use crate::engine::{Event, TokenLogprob};
use crate::error::{Error, Result};
use crate::state::State;
use crate::validate;

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

pub async fn chat(state: &State, body: Bytes, access: &Access) -> Result<Response<Body>> {
    let wire: ChatCompletionRequest = parse(&body)?;
    let mut valid = state.with_context(|ctx| validate::chat(wire, ctx))?;
    let (id, mut events) = submit(&mut valid, "chatcmpl", access)?;
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
                Some(Event::Failed(e)) => return sse::end_with_error(&tx, &e).await,
                None => return,
            };
            if tx.send(out).await.is_err() {
                return; // the client went away; dropping `events` frees the row
            }
        }
    });
    Ok(sse::stream(rx))
}
