//! The access log: one line per request (method, route, status, request id, generated
//! tokens, time to first token, duration), written when the request is over: for a
//! generation, when its last event has been read (the stream's end, an error, or the client
//! going away), otherwise when the response is ready.
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::Event;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const BUCKETS_S: [f64; 10] = [0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// A latency histogram: counts per bucket (the last one is `+Inf`), the sum in microseconds.
pub struct Histogram {
    pub buckets: [AtomicU64; BUCKETS_S.len() + 1],
    pub sum_us: AtomicU64,
}

impl Histogram {
    const fn new() -> Histogram {
        Histogram {
            buckets: [const { AtomicU64::new(0) }; BUCKETS_S.len() + 1],
            sum_us: AtomicU64::new(0),
        }
    }

    fn record(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS_S
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(BUCKETS_S.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

/// What the access lines add up to, for `/metrics`.
pub struct Totals {
    /// Requests answered by status class: 2xx, 3xx, 4xx, 5xx.
    pub by_class: [AtomicU64; 4],
    pub ttft: Histogram,
    pub duration: Histogram,
}

/// The process's totals since it started.
pub static TOTALS: Totals = Totals {
    by_class: [const { AtomicU64::new(0) }; 4],
    ttft: Histogram::new(),
    duration: Histogram::new(),
};

/// One request's entry, shared by the router and (for a generation) its event stream.
#[derive(Clone)]
pub struct Access {
    inner: Arc<Inner>,
}

struct Inner {
    method: String,
    route: String,
    start: Instant,
    request_id: Mutex<Option<String>>,
    first_token: Mutex<Option<Duration>>,
    tokens: AtomicUsize,
    /// A generation's event stream writes the line when it ends.
    streamed: AtomicBool,
    written: AtomicBool,
}

impl Access {
    pub fn new(method: &str, route: &str) -> Access {
        Access {
            inner: Arc::new(Inner {
                method: method.to_owned(),
                route: route.to_owned(),
                start: Instant::now(),
                request_id: Mutex::new(None),
                first_token: Mutex::new(None),
                tokens: AtomicUsize::new(0),
                streamed: AtomicBool::new(false),
                written: AtomicBool::new(false),
            }),
        }
    }

    /// Hands the line over to the generation's events: it is written when they end.
    pub fn track(&self, request_id: &str, events: UnboundedReceiver<Event>) -> Tracked {
        if let Ok(mut id) = self.inner.request_id.lock() {
            *id = Some(request_id.to_owned());
        }
        self.inner.streamed.store(true, Ordering::SeqCst);
        Tracked {
            access: self.clone(),
            events,
            status: 200,
        }
    }

    /// Whether a generation's events will write the line.
    pub fn is_tracked(&self) -> bool {
        self.inner.streamed.load(Ordering::SeqCst)
    }

    /// Writes the line (once).
    pub fn finish(&self, status: u16) {
        let i = &self.inner;
        if i.written.swap(true, Ordering::SeqCst) {
            return;
        }
        let request_id = i
            .request_id
            .lock()
            .ok()
            .and_then(|id| id.clone())
            .unwrap_or_default();
        let first_token = i.first_token.lock().ok().and_then(|t| *t);
        let ttft_ms = first_token.map_or(-1.0, |t| t.as_secs_f64() * 1e3);
        let duration = i.start.elapsed();
        if let Some(class) = (status / 100).checked_sub(2).filter(|&c| c < 4) {
            TOTALS.by_class[usize::from(class)].fetch_add(1, Ordering::Relaxed);
        }
        TOTALS.duration.record(duration);
        if let Some(t) = first_token {
            TOTALS.ttft.record(t);
        }
        tracing::info!(
            target: "gmlx_serve::access",
            method = %i.method,
            route = %i.route,
            status,
            request_id = %request_id,
            tokens = i.tokens.load(Ordering::Relaxed),
            ttft_ms = (ttft_ms * 10.0).round() / 10.0,
            duration_ms = (duration.as_secs_f64() * 1e4).round() / 10.0,
            "request"
        );
    }
}

/// A generation's events, counted on their way to the handler; the access line is written
/// when they are dropped.
pub struct Tracked {
    access: Access,
    events: UnboundedReceiver<Event>,
    status: u16,
}

impl Tracked {
    pub async fn recv(&mut self) -> Option<Event> {
        let event = self.events.recv().await;
        let inner = &self.access.inner;
        match &event {
            Some(Event::Token(_)) => {
                if inner.tokens.fetch_add(1, Ordering::Relaxed) == 0 {
                    if let Ok(mut first) = inner.first_token.lock() {
                        *first = Some(inner.start.elapsed());
                    }
                }
            }
            Some(Event::Failed(e)) => self.status = e.status(),
            Some(Event::Done(_)) => {}
            None => self.status = 503,
        }
        event
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.access.finish(self.status);
    }
}
