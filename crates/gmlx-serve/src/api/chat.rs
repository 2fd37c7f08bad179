//! `POST /v1/chat/completions`: whole replies and SSE streams, with reasoning and tool calls
//! split out of each choice's text.
use bytes::Bytes;
use hyper::Response;

use super::reasoning::ReasoningSplitter;
use super::sse::{self, Body};
use super::types::*;
use super::{finish_reason, now_s, parse, request_id, submit, usage_of};
use crate::access::Access;
use crate::engine::{Done, Event, TokenLogprob};
use crate::error::{Error, Result};
use crate::state::State;
use crate::tools::{CallSplitter, ParsedCall, Tools};
use crate::validate::{self, Valid};

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

/// One choice's text on its way out: reasoning split off, then calls held back.
struct ChoiceText {
    split: Option<ReasoningSplitter>,
    calls: Option<CallSplitter>,
}

impl ChoiceText {
    fn new(valid: &Valid) -> ChoiceText {
        ChoiceText {
            split: valid.reasoning.map(ReasoningSplitter::new),
            calls: valid
                .tools
                .as_ref()
                .map(|t| CallSplitter::new(t.format, valid.forced_prefix.as_deref())),
        }
    }

    /// The (reasoning, content) `text` releases.
    fn push(&mut self, text: &str) -> (String, String) {
        let (r, c) = match &mut self.split {
            Some(s) => s.push(text),
            None => (String::new(), text.to_owned()),
        };
        match &mut self.calls {
            Some(k) => (r, k.push(&c)),
            None => (r, c),
        }
    }

    /// What is still held at the end, and the calls.
    fn finish(&mut self, tools: Option<&Tools>) -> (String, String, Vec<ParsedCall>) {
        let (r, c) = self
            .split
            .as_mut()
            .map(ReasoningSplitter::finish)
            .unwrap_or_default();
        match (&mut self.calls, tools) {
            (Some(k), Some(t)) => {
                let mut content = k.push(&c);
                let (rest, calls) = k.finish(&t.list, t.parallel);
                content += &rest;
                (r, content, calls)
            }
            _ => (r, c, Vec::new()),
        }
    }
}

fn wire_calls(calls: Vec<ParsedCall>, streamed: bool) -> Option<Vec<ToolCall>> {
    (!calls.is_empty()).then(|| {
        calls
            .into_iter()
            .enumerate()
            .map(|(k, c)| ToolCall {
                index: streamed.then_some(k as u32),
                id: request_id("call"),
                kind: "function",
                function: FunctionCall {
                    name: c.name,
                    arguments: c.arguments.to_string(),
                },
            })
            .collect()
    })
}

fn chat_finish(done: &Done, calls: bool) -> &'static str {
    match finish_reason(done.finish) {
        "stop" if calls => "tool_calls",
        other => other,
    }
}

/// Every choice of a whole reply.
#[derive(Default)]
struct Whole {
    content: String,
    thinking: String,
    logprobs: Vec<ChatTokenLogprob>,
    done: Option<Done>,
}

pub async fn chat(state: &State, body: Bytes, access: &Access) -> Result<Response<Body>> {
    let wire: ChatCompletionRequest = parse(&body)?;
    let mut valid = state.with_context(|ctx| validate::chat(wire, ctx))?;
    let (id, mut events) = submit(&mut valid, "chatcmpl", access)?;
    let created = now_s();
    let n = valid.request.n;
    let mut texts: Vec<ChoiceText> = (0..n).map(|_| ChoiceText::new(&valid)).collect();
    if !valid.stream {
        let mut whole: Vec<Whole> = (0..n).map(|_| Whole::default()).collect();
        let mut left = n;
        while left > 0 {
            match events.recv().await {
                Some(Event::Token(t)) => {
                    let (i, w) = (t.index as usize, &mut whole[t.index as usize]);
                    let (r, c) = texts[i].push(&t.text);
                    w.thinking += &r;
                    w.content += &c;
                    w.logprobs.extend(t.logprob.map(chat_logprob));
                }
                Some(Event::Done(d)) => {
                    whole[d.index as usize].done = Some(d);
                    left -= 1;
                }
                Some(Event::Failed(e)) => return Err(e),
                None => return Err(Error::ShuttingDown),
            }
        }
        let tools = valid.tools.as_deref();
        let mut dones = Vec::with_capacity(n);
        let mut choices = Vec::with_capacity(n);
        for (i, (mut w, text)) in whole.into_iter().zip(&mut texts).enumerate() {
            let (r, c, calls) = text.finish(tools);
            w.thinking += &r;
            w.content += &c;
            let done = w.done.ok_or(Error::ShuttingDown)?;
            let has_calls = !calls.is_empty();
            choices.push(ChatChoice {
                index: i as u32,
                message: Message {
                    role: "assistant",
                    content: (!(has_calls && w.content.trim().is_empty())).then_some(w.content),
                    reasoning_content: valid.reasoning.is_some().then_some(w.thinking),
                    tool_calls: wire_calls(calls, false),
                },
                logprobs: valid.request.logprobs.map(|_| ChatLogprobs {
                    content: w.logprobs,
                }),
                finish_reason: chat_finish(&done, has_calls),
            });
            dones.push(done);
        }
        let reply = ChatCompletion {
            id,
            object: "chat.completion",
            created,
            model: valid.model,
            choices,
            usage: usage_of(&dones),
        };
        return Ok(sse::json(200, &reply));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let model = valid.model.clone();
    let include_usage = valid.include_usage;
    let want_logprobs = valid.request.logprobs.is_some();
    let tools = valid.tools.clone();
    tokio::spawn(async move {
        let chunk = |index: usize, delta: Delta, logprobs, finish: Option<&'static str>| {
            sse::event(&ChatChunk {
                id: id.clone(),
                object: "chat.completion.chunk",
                created,
                model: model.clone(),
                choices: vec![ChunkChoice {
                    index: index as u32,
                    delta,
                    logprobs,
                    finish_reason: finish,
                }],
                usage: None,
            })
        };
        for i in 0..n {
            let first = Delta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..Delta::default()
            };
            if tx.send(chunk(i, first, None, None)).await.is_err() {
                return;
            }
        }
        let delta = |r: String, c: String| Delta {
            content: (!c.is_empty()).then_some(c),
            reasoning_content: (!r.is_empty()).then_some(r),
            ..Delta::default()
        };
        let mut dones = Vec::with_capacity(n);
        while dones.len() < n {
            let out = match events.recv().await {
                Some(Event::Token(t)) => {
                    let i = t.index as usize;
                    let (r, c) = texts[i].push(&t.text);
                    let lp = t.logprob.filter(|_| want_logprobs).map(|l| ChatLogprobs {
                        content: vec![chat_logprob(l)],
                    });
                    if r.is_empty() && c.is_empty() && lp.is_none() {
                        continue;
                    }
                    chunk(i, delta(r, c), lp, None)
                }
                Some(Event::Done(d)) => {
                    let i = d.index as usize;
                    let (r, c, calls) = texts[i].finish(tools.as_deref());
                    if !(r.is_empty() && c.is_empty()) {
                        let _ = tx.send(chunk(i, delta(r, c), None, None)).await;
                    }
                    let has_calls = !calls.is_empty();
                    if let Some(calls) = wire_calls(calls, true) {
                        let calls = Delta {
                            tool_calls: Some(calls),
                            ..Delta::default()
                        };
                        let _ = tx.send(chunk(i, calls, None, None)).await;
                    }
                    dones.push(d);
                    chunk(i, Delta::default(), None, Some(chat_finish(&d, has_calls)))
                }
                Some(Event::Failed(e)) => return sse::end_with_error(&tx, &e).await,
                None => return,
            };
            if tx.send(out).await.is_err() {
                return; // the client went away; dropping `events` frees the rows
            }
        }
        if include_usage {
            let _ = tx
                .send(sse::event(&ChatChunk {
                    id: id.clone(),
                    object: "chat.completion.chunk",
                    created,
                    model: model.clone(),
                    choices: Vec::new(),
                    usage: Some(usage_of(&dones)),
                }))
                .await;
        }
        let _ = tx.send(Bytes::from_static(sse::DONE)).await;
    });
    Ok(sse::stream(rx))
}
