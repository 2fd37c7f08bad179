//! The hyper service: listener, per-connection tasks, SIGHUP reloads and graceful SIGTERM.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::error::{Error, Result};
use crate::state::State;

/// Binds the configured address (a port in use fails here, before any model loads).
pub async fn bind(state: &State) -> Result<TcpListener> {
    let config = state.config();
    let addr = SocketAddr::new(config.host, config.port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })?;
    let local = listener.local_addr()?;
    tracing::info!("listening on http://{local}");
    Ok(listener)
}

/// Serves until SIGTERM or SIGINT, then stops accepting and waits up to the grace period
/// for in-flight requests before cancelling them.
pub async fn serve(state: Arc<State>, listener: TcpListener) -> Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let state = Arc::clone(&state);
                let service = service_fn(move |req| {
                    let state = Arc::clone(&state);
                    async move {
                        Ok::<_, std::convert::Infallible>(crate::router::route(&state, req).await)
                    }
                });
                let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            _ = hup.recv() => state.reload(),
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    drop(listener);
    let grace = Duration::from_secs(state.config().shutdown_grace_s);
    tracing::info!("shutting down (waiting up to {grace:?} for in-flight requests)");
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    tokio::select! {
        _ = &mut drained => {
            tracing::info!("all requests finished");
            return Ok(());
        }
        _ = tokio::time::sleep(grace) => {
            tracing::info!("grace period over; cancelling the rest");
        }
        _ = term.recv() => return second_signal(),
        _ = int.recv() => return second_signal(),
    }
    // every running request gets its error event (and its stream `[DONE]`) before the exit
    let engines: Vec<_> = state.models().values().map(|m| m.engine.clone()).collect();
    let _ = tokio::task::spawn_blocking(move || {
        for engine in engines {
            engine.shutdown();
        }
    })
    .await;
    tokio::select! {
        _ = &mut drained => {}
        _ = tokio::time::sleep(CANCELLED_FLUSH) => {}
        _ = term.recv() => return second_signal(),
        _ = int.recv() => return second_signal(),
    }
    Ok(())
}

/// How long cancelled requests get to write their last event after the grace period.
const CANCELLED_FLUSH: Duration = Duration::from_secs(2);

/// A second SIGTERM or SIGINT during the shutdown: exit now.
fn second_signal() -> Result<()> {
    tracing::info!("second signal: exiting now");
    Ok(())
}
