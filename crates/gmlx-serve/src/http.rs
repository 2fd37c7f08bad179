//! The hyper service: listener, per-connection tasks, SIGHUP reloads and graceful SIGTERM.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::config::ServeConfig;
use crate::error::{Error, Result};
use crate::validate::{self, Context, ModelInfo};

/// What every handler sees: the loaded models and the (reloadable) config.
pub struct State {
    pub models: BTreeMap<String, Arc<ModelInfo>>,
    config: RwLock<Arc<ServeConfig>>,
    env_thinking: RwLock<Option<bool>>,
}

impl State {
    pub fn new(config: ServeConfig, models: BTreeMap<String, Arc<ModelInfo>>) -> State {
        State {
            models,
            config: RwLock::new(Arc::new(config)),
            env_thinking: RwLock::new(validate::env_thinking()),
        }
    }

    pub fn config(&self) -> Arc<ServeConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn with_context<T>(&self, f: impl FnOnce(&Context<'_>) -> T) -> T {
        let config = self.config();
        let env_thinking = *self.env_thinking.read().unwrap_or_else(|e| e.into_inner());
        f(&Context {
            config: &config,
            models: &self.models,
            env_thinking,
        })
    }

    /// Re-reads the config file: profiles, aliases, API key and limits take effect for new
    /// requests; models already loaded stay loaded (a new model needs a restart).
    fn reload(&self) {
        let current = self.config();
        let Some(file) = &current.source else {
            eprintln!("gmlx-server: SIGHUP: no config file to reload");
            return;
        };
        match ServeConfig::from_file(file) {
            Ok(mut fresh) => {
                fresh.no_auth = current.no_auth;
                fresh.host = current.host;
                fresh.port = current.port;
                *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
                *self.env_thinking.write().unwrap_or_else(|e| e.into_inner()) =
                    validate::env_thinking();
                eprintln!("gmlx-server: reloaded {}", file.display());
            }
            Err(e) => eprintln!("gmlx-server: reload refused, keeping the old config: {e}"),
        }
    }
}

/// Serves until SIGTERM or SIGINT, then stops accepting and waits up to the grace period
/// for in-flight requests before cancelling them.
pub async fn serve(state: Arc<State>) -> Result<()> {
    let config = state.config();
    let addr = SocketAddr::new(config.host, config.port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })?;
    let local = listener.local_addr()?;
    eprintln!("gmlx-server: listening on http://{local}");
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
    eprintln!("gmlx-server: shutting down (waiting up to {grace:?} for in-flight requests)");
    tokio::select! {
        _ = graceful.shutdown() => eprintln!("gmlx-server: all requests finished"),
        _ = tokio::time::sleep(grace) => eprintln!("gmlx-server: grace period over; cancelling the rest"),
    }
    Ok(())
}
