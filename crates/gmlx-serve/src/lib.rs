//! gmlx-serve: an OpenAI-compatible server with continuous batching.
//!
//! ```no_run
//! use gmlx_serve::{run, ServeConfig};
//!
//! # fn main() -> gmlx_serve::Result<()> {
//! let mut config = ServeConfig::single("SmolLM2-135M-Instruct.Q4_1.gguf");
//! config.port = 8080;
//! run(config) // serves until SIGTERM
//! # }
//! ```
//!
//! Requests are validated at the edge (`validate`), queued to one scheduler thread per model
//! (`engine`), which owns the model and decodes every active request in one batched forward
//! pass, streaming tokens back per request.
pub mod access;
pub mod api;
pub mod args;
pub mod config;
pub mod engine;
mod error;
pub mod http;
pub mod logging;
pub mod metrics;
mod router;
pub mod state;
pub mod tools;
pub mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use config::{ModelEntry, Profile, ServeConfig};
pub use engine::{Engine, EngineOptions, ReadAhead};
pub use error::{Error, Result};

/// Binds the address, then serves HTTP until SIGTERM/SIGINT (blocking) while the models
/// load: until every model is loaded `/health` answers 503 and other requests 503 with
/// `Retry-After`. A model that fails to load ends the server with that error.
pub fn run(config: ServeConfig) -> Result<()> {
    config.check_auth()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let state = Arc::new(state::State::new(config));
    let listener = runtime.block_on(http::bind(&state))?;
    let config = state.config();
    let served = runtime.block_on(async {
        let serving = http::serve(Arc::clone(&state), listener);
        tokio::pin!(serving);
        let loading = tokio::task::spawn_blocking(move || load_models(&config));
        tokio::select! {
            served = &mut serving => return served,
            loaded = loading => {
                let models = loaded.map_err(|source| Error::LoaderPanicked { source })??;
                state.set_models(models);
                tracing::info!("ready");
            }
        }
        serving.await
    });
    // whatever is still in flight after the grace period is cancelled, and every model is
    // freed before the process exits
    for (id, model) in state.models() {
        if let Some(report) = model.engine.stream_report() {
            tracing::info!("model `{id}`: {report}");
        }
        model.engine.clone().shutdown();
    }
    served
}

/// Starts an engine per model of `config` (each loads its model on its own thread, opening
/// its file once: plan, weights, adapter check and the tokenizer the handlers use come from
/// that one open).
pub fn load_models(config: &ServeConfig) -> Result<state::Models> {
    let options = EngineOptions {
        batch_width: config.batch_width,
        queue_cap: config.queue_cap,
        read_ahead: ReadAhead::default(),
    };
    let mut models = BTreeMap::new();
    for entry in &config.models {
        let (engine, tokenizer) = Engine::start(entry, options)?;
        let info = validate::ModelInfo::new(entry.clone(), engine, tokenizer)?;
        match &entry.adapter {
            Some(adapter) => tracing::info!(
                "model `{}` loaded from {} with adapter {}",
                entry.id,
                entry.path.display(),
                adapter.display()
            ),
            None => tracing::info!("model `{}` loaded from {}", entry.id, entry.path.display()),
        }
        models.insert(entry.id.clone(), Arc::new(info));
    }
    Ok(models)
}
