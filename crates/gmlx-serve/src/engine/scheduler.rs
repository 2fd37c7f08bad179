//! The batch loop: admits waiting requests into free rows, runs one prompt chunk of one
//! admitted request between decode steps (so running streams keep streaming however long a
//! new prompt is), then decodes every prefilled row in one batched forward pass.
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use gmlx_mlx::{Array, Dtype};
use gmlx_models::cache::KvCache;
use gmlx_models::{FinishReason, Loaded, Sampler, TokenId, Tokenizer};
use gmlx_tokenizer::StreamDecoder;
use tokio::sync::mpsc::UnboundedSender;

use gmlx_models::StopFilter;

use super::request::{Done, Event, TokenLogprob, TokenOut, ValidRequest};
use super::{Command, EngineOptions, Shared};
use crate::error::{Error, Result};

/// Prompt tokens per prefill forward pass: the longest pause a new prompt puts between two
/// decode steps of the running streams.
const PREFILL_CHUNK: usize = 128;

/// One request being decoded.
struct Row<'t> {
    request: ValidRequest,
    sink: UnboundedSender<Event>,
    caches: Vec<KvCache>,
    sampler: Sampler,
    decoder: StreamDecoder<'t>,
    stop: StopFilter,
    /// Prompt tokens already run through the model; the row decodes once all are.
    prefilled: usize,
    /// Logits for the next token (once prefilled).
    logits: Vec<f32>,
    generated: usize,
    budget: usize,
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
        while rows.len() < options.batch_width {
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
            }
        }
        let start = Instant::now();
        let emitted = rows.iter().filter(|r| r.is_prefilled()).count();
        if emitted == 0 {
            continue;
        }
        if let Err(e) = step(loaded, &mut rows, shared) {
            for row in rows.drain(..) {
                let _ = row.sink.send(Event::Failed(Error::Engine {
                    reason: e.to_string(),
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
    let prompt = &row.request.prompt;
    let end = (row.prefilled + PREFILL_CHUNK).min(prompt.len());
    let chunk = &prompt[row.prefilled..end];
    let logits = gmlx_models::generate::prefill(model, &mut row.caches, chunk, chunk.len())?;
    row.prefilled = end;
    if row.is_prefilled() {
        row.logits = logits;
    }
    Ok(())
}

/// A fresh row for `request`; its prompt is run later, a chunk per step.
fn admit<'t>(
    loaded: &'t Loaded,
    request: ValidRequest,
    sink: UnboundedSender<Event>,
) -> Result<Row<'t>> {
    let model = &loaded.model;
    let context = model.config().context_length;
    if request.prompt.len() >= context {
        return Err(Error::ContextOverflow {
            needed: request.prompt.len() + 1,
            context,
        });
    }
    if request.prompt.is_empty() {
        return Err(gmlx_models::Error::EmptyPrompt.into());
    }
    let caches = model.new_caches();
    let mut sampler = Sampler::new(request.sampling.clone());
    sampler.observe(&request.prompt);
    let budget = request.max_tokens.min(context - request.prompt.len());
    Ok(Row {
        caches,
        sampler,
        decoder: loaded.tokenizer.stream_decoder(true),
        stop: StopFilter::new(request.stop.clone()),
        prefilled: 0,
        logits: Vec::new(),
        generated: 0,
        budget,
        request,
        sink,
    })
}

/// Samples one token for every prefilled row, streams it, drops finished or abandoned rows,
/// and runs the survivors' tokens through the model together.
fn step(loaded: &Loaded, rows: &mut Vec<Row<'_>>, shared: &Shared) -> Result<()> {
    let tokenizer = &loaded.tokenizer;
    let mut next: Vec<TokenId> = Vec::with_capacity(rows.len());
    let mut keep = Vec::with_capacity(rows.len());
    for row in rows.iter_mut() {
        if !row.is_prefilled() {
            keep.push(true);
            continue;
        }
        let (token, finish, text, logprob) = sample_row(tokenizer, row)?;
        shared.generated_tokens.fetch_add(1, Ordering::Relaxed);
        let sent = row.sink.send(Event::Token(TokenOut {
            token,
            text,
            logprob,
        }));
        let alive = match (sent, finish) {
            (Err(_), _) => false, // the client went away
            (Ok(()), Some(finish)) => {
                shared.requests_done.fetch_add(1, Ordering::Relaxed);
                let _ = row.sink.send(Event::Done(Done {
                    finish,
                    prompt_tokens: row.request.prompt.len(),
                    completion_tokens: row.generated,
                }));
                false
            }
            (Ok(()), None) => true,
        };
        keep.push(alive);
        if alive {
            next.push(token);
        }
    }
    let mut i = 0;
    rows.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    let mut decoding: Vec<&mut Row<'_>> = rows.iter_mut().filter(|r| r.is_prefilled()).collect();
    if decoding.is_empty() {
        return Ok(());
    }
    let mut caches: Vec<&mut [KvCache]> = decoding.iter_mut().map(|r| &mut r.caches[..]).collect();
    let logits = forward_rows(loaded, &next, &mut caches)?;
    for (row, l) in decoding.iter_mut().zip(logits) {
        row.logits = l;
    }
    Ok(())
}

/// Picks a row's next token; returns it, the finish reason if it ends the row, the text it
/// releases, and its logprobs when asked for.
fn sample_row(
    tokenizer: &Tokenizer,
    row: &mut Row<'_>,
) -> Result<(TokenId, Option<FinishReason>, String, Option<TokenLogprob>)> {
    let raw = row.request.logprobs.map(|_| row.logits.clone());
    let token = row.sampler.sample(&mut row.logits);
    row.sampler.observe(&[token]);
    let logprob = match (raw, row.request.logprobs) {
        (Some(raw), Some(n)) => Some(logprobs(tokenizer, &raw, token, n)),
        _ => None,
    };
    if tokenizer.is_eog(token) {
        return Ok((token, Some(FinishReason::Eos), row.stop.flush(), logprob));
    }
    row.generated += 1;
    let piece = row.decoder.push(token)?;
    let (mut text, stopped) = row.stop.push(&piece);
    let finish = if stopped {
        Some(FinishReason::Stop)
    } else if row.generated >= row.budget {
        text.push_str(&row.stop.flush());
        Some(FinishReason::Length)
    } else {
        None
    };
    Ok((token, finish, text, logprob))
}

/// The log-softmax of `logits` at `token`, and the `n` most likely tokens.
fn logprobs(tokenizer: &Tokenizer, logits: &[f32], token: TokenId, n: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .map(|&l| f64::from(l - max).exp())
        .sum::<f64>();
    let norm = max + sum.ln() as f32;
    let text = |id: TokenId| {
        let bytes = tokenizer.decode_bytes(&[id], false).unwrap_or_default();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    };
    let mut top: Vec<(TokenId, f32)> = Vec::new();
    if n > 0 {
        let mut order: Vec<TokenId> = (0..logits.len() as TokenId).collect();
        let n = n.min(order.len());
        order.select_nth_unstable_by(n.saturating_sub(1), |&a, &b| {
            logits[b as usize].total_cmp(&logits[a as usize])
        });
        order.truncate(n);
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        top = order
            .iter()
            .map(|&i| (i, logits[i as usize] - norm))
            .collect();
    }
    let (token_text, bytes) = text(token);
    TokenLogprob {
        token: token_text,
        bytes,
        logprob: logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |l| l - norm),
        top: top
            .into_iter()
            .map(|(id, lp)| {
                let (t, b) = text(id);
                (t, b, lp)
            })
            .collect(),
    }
}

/// Next-token logits for each row after feeding it `tokens[i]`: one batched forward pass.
fn forward_rows(
    loaded: &Loaded,
    tokens: &[TokenId],
    caches: &mut [&mut [KvCache]],
) -> Result<Vec<Vec<f32>>> {
    let logits = loaded.model.forward_rows(tokens, caches)?;
    let flat = host(&logits)?;
    let vocab = flat.len() / tokens.len().max(1);
    Ok(flat.chunks(vocab).map(<[f32]>::to_vec).collect())
}

fn host(logits: &Array) -> Result<Vec<f32>> {
    let flat = logits
        .as_dtype(Dtype::Float32)
        .and_then(|a| a.flatten(None, None))
        .map_err(mlx_err)?;
    flat.eval().map_err(mlx_err)?;
    Ok(flat.as_slice::<f32>().to_vec())
}

fn mlx_err(e: impl std::fmt::Display) -> Error {
    Error::Engine {
        reason: e.to_string(),
    }
}
