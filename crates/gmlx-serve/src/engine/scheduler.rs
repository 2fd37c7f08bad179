//! The batch loop: admits waiting requests into free rows, runs one prompt chunk of one
//! admitted request between decode steps (so running streams keep streaming however long a
//! new prompt is), then decodes every prefilled row in one batched forward pass.
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

use gmlx_mlx::Array;
use gmlx_models::generate::{device_sampling, device_token, host_step, prefill_on_device};
use gmlx_models::{Loaded, Sequence, SequenceCache, SequenceOptions, Step, TokenId};
use tokio::sync::mpsc::UnboundedSender;

use super::request::{Done, Event, TokenOut, ValidRequest};
use super::{Command, EngineOptions, Shared};
use crate::error::{Error, Result};

/// Prompt tokens per prefill forward pass: the longest pause a new prompt puts between two
/// decode steps of the running streams.
const PREFILL_CHUNK: usize = 128;

/// One request being decoded.
struct Row<'t> {
    request: ValidRequest,
    sink: UnboundedSender<Event>,
    cache: SequenceCache,
    sequence: Sequence<'t>,
    /// Prompt tokens already run through the model; the row decodes once all are.
    prefilled: usize,
    /// Logits for the next token, on the device (once prefilled), where its draw is still to
    /// be planned.
    logits: Option<Array>,
    /// The next token, drawn on the device and submitted with the step that read it ahead,
    /// not read yet (instead of `logits`).
    token: Option<Array>,
    /// Which of the request's choices this row generates.
    index: u32,
    /// Choices still to fork from this row once its prompt is prefilled.
    forks_due: usize,
}

/// Rows taken, counting those the prefilling requests will fork.
fn occupancy(rows: &[Row<'_>]) -> usize {
    rows.len() + rows.iter().map(|r| r.forks_due).sum::<usize>()
}

pub(crate) fn run(
    loaded: &Loaded,
    commands: Receiver<Command>,
    shared: &Shared,
    options: EngineOptions,
) {
    let mut waiting: VecDeque<(Box<ValidRequest>, UnboundedSender<Event>)> = VecDeque::new();
    let mut rows: Vec<Row<'_>> = Vec::new();
    let mut open = true;
    while open || !rows.is_empty() || !waiting.is_empty() {
        if rows.is_empty() && waiting.is_empty() {
            match commands.recv() {
                Ok(Command::Submit(r, s)) => waiting.push_back((r, s)),
                Ok(Command::Shutdown) | Err(_) => break,
            }
        }
        loop {
            match commands.try_recv() {
                Ok(Command::Submit(r, s)) => waiting.push_back((r, s)),
                Ok(Command::Shutdown) => {
                    cancel(
                        rows.drain(..).map(|r| r.sink),
                        waiting.drain(..).map(|(_, s)| s),
                    );
                    return;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        // Requests take free rows at once; their prompts run a chunk per step, in order.
        while let Some(n) = waiting.front().map(|(r, _)| r.n) {
            if occupancy(&rows) + n > options.batch_width {
                break;
            }
            let Some((request, sink)) = waiting.pop_front() else {
                break;
            };
            shared.waiting.fetch_sub(1, Ordering::SeqCst);
            if !sink.is_closed() {
                match admit(loaded, *request, sink.clone()) {
                    Ok(row) => rows.push(row),
                    Err(e) => {
                        let _ = sink.send(Event::Failed(e));
                    }
                }
            }
        }
        shared.active.store(rows.len(), Ordering::SeqCst);
        if rows.is_empty() {
            continue;
        }
        if let Some(i) = rows.iter().position(|r| !r.is_prefilled()) {
            if rows[i].sink.is_closed() {
                rows.remove(i); // its client went away before its first token
            } else if let Err(e) = prefill_chunk(&loaded.model, &mut rows[i]) {
                let row = rows.remove(i);
                let _ = row.sink.send(Event::Failed(e));
            } else if rows[i].is_prefilled() && rows[i].forks_due > 0 {
                match fork(loaded, &mut rows[i]) {
                    Ok(forks) => rows.extend(forks),
                    Err(e) => {
                        let row = rows.remove(i);
                        let _ = row.sink.send(Event::Failed(e));
                    }
                }
            }
        }
        let start = Instant::now();
        let emitted = rows.iter().filter(|r| r.is_prefilled()).count();
        if emitted == 0 {
            continue;
        }
        if let Err(e) = step(loaded, &mut rows, shared, options.read_ahead.applies()) {
            let source = Arc::new(e);
            for row in rows.drain(..) {
                let _ = row.sink.send(Event::Failed(Error::Batch {
                    source: Arc::clone(&source),
                }));
            }
        }
        shared.active.store(rows.len(), Ordering::SeqCst);
        publish(shared, emitted, start);
    }
}

/// Tells every running and waiting request that the engine stopped.
fn cancel(
    running: impl Iterator<Item = UnboundedSender<Event>>,
    waiting: impl Iterator<Item = UnboundedSender<Event>>,
) {
    for sink in running.chain(waiting) {
        let _ = sink.send(Event::Failed(Error::ShuttingDown));
    }
}

fn publish(shared: &Shared, tokens: usize, start: Instant) {
    let rate = tokens as f64 / start.elapsed().as_secs_f64().max(1e-9);
    let old = f64::from_bits(shared.tokens_per_s.load(Ordering::Relaxed));
    let smoothed = if old == 0.0 {
        rate
    } else {
        0.8 * old + 0.2 * rate
    };
    shared
        .tokens_per_s
        .store(smoothed.to_bits(), Ordering::Relaxed);
    if let Ok(m) = gmlx_mlx::memory::stats() {
        shared
            .mlx_active_bytes
            .store(m.active_bytes as u64, Ordering::Relaxed);
        shared
            .mlx_peak_bytes
            .store(m.peak_bytes as u64, Ordering::Relaxed);
    }
}

impl Row<'_> {
    fn is_prefilled(&self) -> bool {
        self.prefilled == self.request.prompt.len()
    }
}

/// Runs the next chunk of `row`'s prompt; the last chunk leaves the logits of its first token.
fn prefill_chunk(model: &gmlx_models::Model, row: &mut Row<'_>) -> Result<()> {
    let _request = row.request.span.clone().entered();
    let prompt = &row.request.prompt;
    let end = (row.prefilled + PREFILL_CHUNK).min(prompt.len());
    let chunk = &prompt[row.prefilled..end];
    let _prefill =
        tracing::debug_span!("prefill", from = row.prefilled, tokens = chunk.len()).entered();
    let logits = prefill_on_device(model, &mut row.cache, chunk, chunk.len())?;
    row.prefilled = end;
    if row.is_prefilled() {
        row.logits = Some(logits);
    }
    Ok(())
}

fn sequence<'t>(loaded: &'t Loaded, request: &ValidRequest) -> Result<Sequence<'t>> {
    let config = loaded.model.config();
    let options = SequenceOptions {
        max_tokens: request.max_tokens,
        sampling: request.sampling.clone(),
        stop: request.stop.clone(),
        ignore_eos: request.ignore_eos,
        logprobs: request.logprobs,
        prefill_chunk: PREFILL_CHUNK,
        constraint: request.constraint.clone(),
    };
    Ok(Sequence::new(
        &loaded.tokenizer,
        &request.prompt,
        options,
        config.context_length,
        config.vocab as usize,
    )?)
}

/// A fresh row for `request`; its prompt is run later, a chunk per step.
fn admit<'t>(
    loaded: &'t Loaded,
    request: ValidRequest,
    sink: UnboundedSender<Event>,
) -> Result<Row<'t>> {
    let sequence = sequence(loaded, &request)?;
    request.span.in_scope(|| {
        tracing::debug!(prompt_tokens = request.prompt.len(), "admitted");
    });
    Ok(Row {
        cache: loaded.model.new_cache(),
        sequence,
        prefilled: 0,
        logits: None,
        token: None,
        index: 0,
        forks_due: request.n.saturating_sub(1),
        request,
        sink,
    })
}

/// The other choices of a prefilled row: each shares its cache (the prompt runs once) and
/// samples with the next seed.
fn fork<'t>(loaded: &'t Loaded, row: &mut Row<'t>) -> Result<Vec<Row<'t>>> {
    let n = std::mem::take(&mut row.forks_due);
    (1..=n)
        .map(|i| {
            let mut request = row.request.clone();
            request.sampling.seed = request.sampling.seed.map(|s| s.wrapping_add(i as u64));
            Ok(Row {
                sequence: sequence(loaded, &request)?,
                cache: row.cache.clone(),
                prefilled: row.prefilled,
                logits: row.logits.clone(),
                token: None,
                index: i as u32,
                forks_due: 0,
                sink: row.sink.clone(),
                request,
            })
        })
        .collect()
}

/// Samples one token for every prefilled row, streams it, drops finished or abandoned rows,
/// and runs the survivors' tokens through the model together. With `read_ahead` (where every
/// running row allows it, [`ReadAhead`](super::ReadAhead)) the survivors' next step is
/// submitted before this one's tokens are read: its input is those tokens as the device drew
/// them, and each row's next draw is planned before its token is accepted (the sampler's plans
/// do not depend on the tokens then).
fn step(loaded: &Loaded, rows: &mut Vec<Row<'_>>, shared: &Shared, read_ahead: bool) -> Result<()> {
    // the prefilled rows take a step: each draws its token on the device where it can
    let on_device = device_sampling();
    let mut stepping = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter_mut().enumerate() {
        if row.token.is_none() {
            let Some(logits) = row.logits.take() else {
                continue;
            };
            let token = match on_device {
                true => device_token(&mut row.sequence, &logits)?,
                false => None,
            };
            match token {
                Some(token) => row.token = Some(token),
                None => row.logits = Some(logits),
            }
        }
        stepping.push(i);
    }
    let ahead = read_ahead
        && stepping.iter().all(|&i| {
            let row = &rows[i];
            row.token.is_some()
                && row.sequence.remaining() > 1
                && !row.sequence.draw_needs_history()
        });
    let following = match ahead {
        true => {
            shared.read_ahead_steps.fetch_add(1, Ordering::Relaxed);
            submit_ahead(loaded, rows, &stepping)?
        }
        false => Vec::new(),
    };
    let drawn: Vec<&Array> = stepping
        .iter()
        .filter_map(|&i| rows[i].token.as_ref())
        .collect();
    gmlx_mlx::mlx_rs::transforms::eval(drawn).map_err(gmlx_models::Error::from)?;
    let mut keep = vec![true; rows.len()];
    let mut next: Vec<TokenId> = Vec::with_capacity(stepping.len());
    for (j, &i) in stepping.iter().enumerate() {
        let row = &mut rows[i];
        let step = take_step(row)?;
        let token = step.token;
        if !stream(row, step, shared) {
            keep[i] = false;
            continue;
        }
        match following.get(j) {
            Some(following) => row.token = Some(following.clone()),
            None => next.push(token),
        }
    }
    let mut i = 0;
    rows.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    if ahead {
        return Ok(());
    }
    let mut decoding: Vec<&mut Row<'_>> = rows.iter_mut().filter(|r| r.is_prefilled()).collect();
    if decoding.is_empty() {
        return Ok(());
    }
    let _step = tracing::debug_span!("decode_step", rows = decoding.len()).entered();
    let mut caches: Vec<&mut SequenceCache> = decoding.iter_mut().map(|r| &mut r.cache).collect();
    let logits = loaded.model.forward_rows(&next, &mut caches)?;
    for (i, row) in decoding.iter_mut().enumerate() {
        let own = gmlx_mlx::slicing::slice_axis(&logits, 0, i as i32, i as i32 + 1);
        row.logits = Some(own.map_err(gmlx_models::Error::from)?);
    }
    Ok(())
}

/// The next step of rows `stepping` (each holding its token as the device drew it, not read),
/// built from those tokens and submitted; each row's next token, drawn on the device.
fn submit_ahead(loaded: &Loaded, rows: &mut [Row<'_>], stepping: &[usize]) -> Result<Vec<Array>> {
    let tokens = stepping
        .iter()
        .filter_map(|&i| rows[i].token.as_ref())
        .map(|t| t.reshape(&[1, 1]))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(gmlx_models::Error::from)?;
    let ids = gmlx_mlx::ops::concatenate(&tokens, 0).map_err(gmlx_models::Error::from)?;
    let _step = tracing::debug_span!("decode_step_ahead", rows = stepping.len()).entered();
    let logits = {
        let mut caches: Vec<&mut SequenceCache> = rows
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| stepping.contains(i))
            .map(|(_, r)| &mut r.cache)
            .collect();
        loaded.model.forward_row_ids(&ids, &mut caches)?
    };
    let mut following = Vec::with_capacity(stepping.len());
    for (j, &i) in stepping.iter().enumerate() {
        let own = gmlx_mlx::slicing::slice_axis(&logits, 0, j as i32, j as i32 + 1)
            .map_err(gmlx_models::Error::from)?;
        let Some(token) = device_token(&mut rows[i].sequence, &own)? else {
            return Err(Error::Internal("a row read ahead without a device draw"));
        };
        following.push(token);
    }
    gmlx_mlx::mlx_rs::transforms::async_eval(following.iter()).map_err(gmlx_models::Error::from)?;
    Ok(following)
}

/// The row's step: its device-drawn token read and accepted, or its token picked from its
/// logits on the host.
fn take_step(row: &mut Row<'_>) -> Result<Step> {
    if let Some(token) = row.token.take() {
        return Ok(row.sequence.accept(token.as_slice::<u32>()[0])?);
    }
    let logits = row
        .logits
        .take()
        .ok_or_else(|| Error::Internal("a stepping row without a token or logits"))?;
    Ok(host_step(&mut row.sequence, &logits)?)
}

/// Sends the row's step to its client (and its end where it finished); whether the row goes on.
fn stream(row: &mut Row<'_>, step: Step, shared: &Shared) -> bool {
    let (token, finish) = (step.token, step.finish);
    shared.generated_tokens.fetch_add(1, Ordering::Relaxed);
    let sent = row.sink.send(Event::Token(TokenOut {
        index: row.index,
        token,
        text: step.text,
        logprob: step.logprob,
    }));
    match (sent, finish) {
        (Err(_), _) => false, // the client went away
        (Ok(()), Some(finish)) => {
            shared.requests_done.fetch_add(1, Ordering::Relaxed);
            row.request.span.in_scope(|| {
                tracing::debug!(
                    finish = finish.as_str(),
                    completion_tokens = row.sequence.generated(),
                    "done"
                );
            });
            // out of the gauge before its client hears it is done (a `/metrics` read right
            // after the response must not count it)
            let _ = shared
                .active
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    Some(n.saturating_sub(1))
                });
            let _ = row.sink.send(Event::Done(Done {
                index: row.index,
                finish,
                prompt_tokens: row.request.prompt.len(),
                completion_tokens: row.sequence.generated(),
            }));
            false
        }
        (Ok(()), None) => true,
    }
}
