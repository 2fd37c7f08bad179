//! The access log: one line per request (method, route, status, request id, generated
//! tokens, time to first token, duration), written when the request is over: for a
//! generation, when its last event has been read (the stream's end, an error, or the client
//! going away), otherwise when the response is ready.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::engine::Event;

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
        let ttft_ms = i
            .first_token
            .lock()
            .ok()
            .and_then(|t| *t)
            .map_or(-1.0, |t| t.as_secs_f64() * 1e3);
        tracing::info!(
            target: "gmlx_serve::access",
            method = %i.method,
            route = %i.route,
            status,
            request_id = %request_id,
            tokens = i.tokens.load(Ordering::Relaxed),
            ttft_ms = (ttft_ms * 10.0).round() / 10.0,
            duration_ms = (i.start.elapsed().as_secs_f64() * 1e4).round() / 10.0,
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
