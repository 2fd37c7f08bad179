//! The binaries' log output: the libraries log through `tracing`; `gmlx` and `gmlx-server`
//! print events to stderr as `PROGRAM: message` (or JSON lines), filtered by `RUST_LOG`
//! (default `info`).
//! At debug level and below each line also names the spans it happened in
//! (`request`, `prefill`, `decode_step`), with their fields.
use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `PROGRAM: message key=value ...`
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the fields.
    Json,
}

/// Installs the subscriber for `program` (once per process; later calls do nothing).
pub fn init(program: &'static str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.event_format(Prefixed(program)).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

struct Prefixed(&'static str);

impl<S, N> FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "{}: ", self.0)?;
        let level = *event.metadata().level();
        match level {
            Level::INFO => {}
            Level::WARN => write!(writer, "warning: ")?,
            Level::ERROR => write!(writer, "error: ")?,
            _ => {
                write!(writer, "[{}] ", level.as_str().to_ascii_lowercase())?;
                if let Some(scope) = ctx.event_scope() {
                    for span in scope.from_root() {
                        write!(writer, "{}", span.name())?;
                        let ext = span.extensions();
                        if let Some(fields) =
                            ext.get::<tracing_subscriber::fmt::FormattedFields<N>>()
                        {
                            if !fields.is_empty() {
                                write!(writer, "{{{fields}}}")?;
                            }
                        }
                        write!(writer, ": ")?;
                    }
                }
            }
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
