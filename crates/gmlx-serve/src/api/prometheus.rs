//! `GET /metrics`: Prometheus text exposition (version 0.0.4) of the request totals, the
//! latency histograms and each model's engine figures.
use std::fmt::Write;
use std::sync::atomic::Ordering;

use hyper::Response;

use super::sse::{self, Body};
use crate::access::{Histogram, BUCKETS_S, TOTALS};
use crate::engine::EngineStats;
use crate::state::State;

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    let mut cumulative = 0;
    for (i, bound) in BUCKETS_S.iter().enumerate() {
        cumulative += h.buckets[i].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    cumulative += h.buckets[BUCKETS_S.len()].load(Ordering::Relaxed);
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
    let sum = h.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
    let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
}

/// A per-model figure of the engine: name, kind, help, value.
type EngineFigure = (
    &'static str,
    &'static str,
    &'static str,
    fn(&EngineStats) -> f64,
);

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub fn prometheus(state: &State) -> Response<Body> {
    let mut out = String::new();
    family(
        &mut out,
        "gmlx_requests_total",
        "counter",
        "Requests answered, by status class.",
    );
    for (i, class) in ["2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
        let n = TOTALS.by_class[i].load(Ordering::Relaxed);
        let _ = writeln!(out, "gmlx_requests_total{{class=\"{class}\"}} {n}");
    }
    histogram(
        &mut out,
        "gmlx_time_to_first_token_seconds",
        "From a generation request's arrival to its first token.",
        &TOTALS.ttft,
    );
    histogram(
        &mut out,
        "gmlx_request_duration_seconds",
        "From a request's arrival to its end.",
        &TOTALS.duration,
    );
    let stats: Vec<_> = state
        .models()
        .iter()
        .map(|(id, m)| (id, m.engine.stats()))
        .collect();
    let gauges: [EngineFigure; 8] = [
        (
            "gmlx_generated_tokens_total",
            "counter",
            "Tokens generated.",
            |s| s.generated_tokens as f64,
        ),
        (
            "gmlx_requests_done_total",
            "counter",
            "Generations finished.",
            |s| s.requests_done as f64,
        ),
        (
            "gmlx_read_ahead_steps_total",
            "counter",
            "Decode steps submitted before the tokens of the step before were read.",
            |s| s.read_ahead_steps as f64,
        ),
        (
            "gmlx_queue_depth",
            "gauge",
            "Requests waiting for a row.",
            |s| s.queue_depth as f64,
        ),
        (
            "gmlx_active_rows",
            "gauge",
            "Requests being decoded.",
            |s| s.active_rows as f64,
        ),
        (
            "gmlx_decode_tokens_per_second",
            "gauge",
            "Aggregate decode rate of the recent steps.",
            |s| s.decode_tokens_per_s,
        ),
        (
            "gmlx_mlx_active_bytes",
            "gauge",
            "MLX memory in use.",
            |s| s.mlx_active_bytes as f64,
        ),
        ("gmlx_mlx_peak_bytes", "gauge", "MLX peak memory.", |s| {
            s.mlx_peak_bytes as f64
        }),
    ];
    for (name, kind, help, value) in gauges {
        family(&mut out, name, kind, help);
        for (id, s) in &stats {
            let _ = writeln!(out, "{name}{{model=\"{id}\"}} {}", value(s));
        }
    }
    if let Some(rss) = crate::metrics::rss_bytes() {
        family(
            &mut out,
            "gmlx_process_resident_memory_bytes",
            "gauge",
            "Resident memory of the server process.",
        );
        let _ = writeln!(out, "gmlx_process_resident_memory_bytes {rss}");
    }
    let mut r = sse::text(200, out);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}
