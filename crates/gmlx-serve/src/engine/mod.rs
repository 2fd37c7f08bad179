//! The engine: a handle (cheap to clone, holds a channel sender) in front of one scheduler
//! thread that owns the model. All MLX work happens on that thread.
mod request;
mod scheduler;

pub use request::{Done, Event, TokenLogprob, TokenOut, ValidRequest};

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use gmlx_models::blocks::moe::ExpertPlacement;
use gmlx_stream::{StreamOptions, StreamedExperts};
use gmlx_tokenizer::Tokenizer;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::config::ModelEntry;
use crate::error::{Error, Result};

/// How the scheduler batches and admits.
#[derive(Debug, Clone, Copy)]
pub struct EngineOptions {
    /// Most rows decoded together.
    pub batch_width: usize,
    /// Most requests waiting for a row.
    pub queue_cap: usize,
    /// Whether a decode step is submitted before the tokens of the one before are read.
    pub read_ahead: ReadAhead,
}

/// When the scheduler submits a decode step before reading the tokens of the step before
/// (its input is then those tokens as the device drew them): only where every running row draws
/// on the device without needing its last token first (no log-probabilities, schema or
/// penalties) and has more than one token left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadAhead {
    /// Where the model runs on a GPU: there the host builds and submits the next step while
    /// the device computes this one. On the CPU the same work would only come later: a step's
    /// tokens would stream one step late.
    #[default]
    OnGpu,
    Always,
    Never,
}

impl ReadAhead {
    fn applies(self) -> bool {
        match self {
            ReadAhead::OnGpu => {
                gmlx_mlx::device::current() != Some(gmlx_mlx::device::DeviceKind::Cpu)
            }
            ReadAhead::Always => true,
            ReadAhead::Never => false,
        }
    }
}

pub(crate) enum Command {
    Submit(Box<ValidRequest>, UnboundedSender<Event>),
    /// Cancel everything and end the scheduler thread.
    Shutdown,
}

/// Figures the scheduler publishes after every step.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub waiting: AtomicUsize,
    pub active: AtomicUsize,
    pub generated_tokens: AtomicU64,
    pub requests_done: AtomicU64,
    /// Decode steps submitted before the tokens of the step before were read.
    pub read_ahead_steps: AtomicU64,
    /// f64 bits: aggregate decode tokens per second of the recent steps.
    pub tokens_per_s: AtomicU64,
    pub mlx_active_bytes: AtomicU64,
    pub mlx_peak_bytes: AtomicU64,
}

/// A snapshot for `/v1/metrics`.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct EngineStats {
    pub queue_depth: usize,
    pub active_rows: usize,
    pub batch_width: usize,
    pub generated_tokens: u64,
    pub requests_done: u64,
    /// Decode steps submitted before the tokens of the step before were read
    /// ([`ReadAhead`]).
    pub read_ahead_steps: u64,
    pub decode_tokens_per_s: f64,
    pub mlx_active_bytes: u64,
    pub mlx_peak_bytes: u64,
}

/// A handle on one model's scheduler.
#[derive(Clone)]
pub struct Engine {
    tx: mpsc::Sender<Command>,
    /// The scheduler thread, joined by [`Engine::shutdown`].
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
    shared: Arc<Shared>,
    options: EngineOptions,
    vocab: usize,
    context: usize,
    /// The expert placement of a streamed model, for its report.
    streamed: Option<Arc<StreamedExperts>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("options", &self.options)
            .finish()
    }
}

impl Engine {
    /// Starts the scheduler thread, which loads the model at `path` and applies `adapter`
    /// (a LoRA adapter in llama.cpp's format, computed live beside the quantized base);
    /// returns once it is loaded, with the tokenizer of that one load (the file is opened
    /// once). The adapter is checked against the base's header before any weight loads. `id`
    /// names the model in errors.
    pub fn start(entry: &ModelEntry, options: EngineOptions) -> Result<(Engine, Arc<Tokenizer>)> {
        let id = entry.id.as_str();
        let adapter = entry.adapter.clone();
        let streamed = entry.expert_arena_mb.map(|mb| {
            Arc::new(StreamedExperts::new(StreamOptions {
                arena_bytes: mb << 20,
                ..StreamOptions::default()
            }))
        });
        let thread_streamed = streamed.clone();
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let path = entry.path.clone();
        let thread_id = id.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("gmlx-engine-{id}"))
            .spawn(move || {
                // the first engine's thread works on its own host products
                gmlx_mlx::threads::adopt_current_thread();
                let placement = thread_streamed.map(|s| s as Arc<dyn ExpertPlacement>);
                let loaded = match load_model(&thread_id, &path, adapter.as_deref(), placement) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let config = loaded.config();
                let _ = ready_tx.send(Ok((
                    config.vocab as usize,
                    config.context_length,
                    Arc::clone(&loaded.tokenizer),
                )));
                scheduler::run(&loaded, rx, &thread_shared, options);
            })?;
        let (vocab, context, tokenizer) = ready_rx
            .recv()
            .map_err(|_| Error::EngineEnded { id: id.to_owned() })??;
        let engine = Engine {
            tx,
            thread: Arc::new(Mutex::new(Some(thread))),
            shared,
            options,
            vocab,
            context,
            streamed,
        };
        Ok((engine, tokenizer))
    }

    /// What expert streaming did, for a streamed MoE model.
    pub fn stream_report(&self) -> Option<gmlx_stream::StreamReport> {
        self.streamed.as_ref().and_then(|s| s.report())
    }

    /// Most rows decoded together: the largest `n` a request may ask for.
    pub fn batch_width(&self) -> usize {
        self.options.batch_width
    }

    pub fn vocab(&self) -> usize {
        self.vocab
    }

    pub fn context(&self) -> usize {
        self.context
    }

    /// Queues `request`; its events arrive on the returned receiver. Dropping the receiver
    /// cancels the request and frees its row.
    pub fn submit(&self, request: ValidRequest) -> Result<UnboundedReceiver<Event>> {
        let waiting = self.shared.waiting.fetch_add(1, Ordering::SeqCst);
        let active = self.shared.active.load(Ordering::SeqCst);
        // Waiting requests beyond the free rows count against the queue cap.
        let free = self.options.batch_width.saturating_sub(active);
        if waiting >= free + self.options.queue_cap {
            self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::QueueFull { retry_after_s: 1 });
        }
        let (sink, events) = unbounded_channel();
        if self
            .tx
            .send(Command::Submit(Box::new(request), sink))
            .is_err()
        {
            self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::ShuttingDown);
        }
        Ok(events)
    }

    /// Cancels running and waiting requests (they get [`Error::ShuttingDown`]) and waits for
    /// the scheduler thread to end and free the model. Other handles on this engine refuse
    /// new requests from then on.
    pub fn shutdown(self) {
        let _ = self.tx.send(Command::Shutdown);
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    pub fn stats(&self) -> EngineStats {
        let s = &self.shared;
        EngineStats {
            queue_depth: s.waiting.load(Ordering::Relaxed),
            active_rows: s.active.load(Ordering::Relaxed),
            batch_width: self.options.batch_width,
            generated_tokens: s.generated_tokens.load(Ordering::Relaxed),
            requests_done: s.requests_done.load(Ordering::Relaxed),
            read_ahead_steps: s.read_ahead_steps.load(Ordering::Relaxed),
            decode_tokens_per_s: f64::from_bits(s.tokens_per_s.load(Ordering::Relaxed)),
            mlx_active_bytes: s.mlx_active_bytes.load(Ordering::Relaxed),
            mlx_peak_bytes: s.mlx_peak_bytes.load(Ordering::Relaxed),
        }
    }
}

/// Opens the model once: the adapter (a LoRA adapter in llama.cpp's format) is checked
/// against its header before any weight loads, then the weights load and the adapter is
/// applied live.
fn load_model(
    id: &str,
    path: &Path,
    adapter: Option<&Path>,
    experts: Option<Arc<dyn ExpertPlacement>>,
) -> Result<gmlx_models::Loaded> {
    let load_error = |source| Error::Load {
        id: id.to_owned(),
        source,
    };
    let opened = gmlx_models::open(path).map_err(load_error)?;
    let refused = |file: &Path, source| Error::Adapter {
        id: id.to_owned(),
        file: file.to_owned(),
        source: Box::new(source),
    };
    let adapter = adapter
        .map(|file| -> Result<_> {
            let adapter =
                gmlx_models::adapter::Adapter::read(file).map_err(|e| refused(file, e))?;
            adapter
                .check_base(opened.file())
                .map_err(|e| refused(file, e))?;
            Ok((file, adapter))
        })
        .transpose()?;
    let mut loaded = opened
        .load(&gmlx_models::LoadOptions {
            experts,
            ..gmlx_models::LoadOptions::default()
        })
        .map_err(load_error)?;
    if let Some((file, adapter)) = &adapter {
        gmlx_models::adapter::apply(&mut loaded.model, adapter, 1.0)
            .map_err(|e| refused(file, e))?;
    }
    Ok(loaded)
}
