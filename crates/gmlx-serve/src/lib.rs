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
pub mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use config::{ModelEntry, Profile, ServeConfig};
pub use engine::{Engine, EngineOptions};
pub use error::{Error, Result};

/// Loads every model, then serves HTTP until SIGTERM/SIGINT (blocking).
pub fn run(config: ServeConfig) -> Result<()> {
    config.check_auth()?;
    let options = EngineOptions {
        batch_width: config.batch_width,
        queue_cap: config.queue_cap,
    };
    let mut models = BTreeMap::new();
    let mut engines = Vec::new();
    for entry in &config.models {
        let engine = Engine::start(&entry.id, &entry.path, entry.adapter.as_deref(), options)?;
        engines.push(engine.clone());
        let info = validate::ModelInfo::new(entry.clone(), engine)?;
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
    let state = Arc::new(state::State::new(config, models));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(http::serve(state));
    // whatever is still in flight after the grace period is cancelled, and every model is
    // freed before the process exits
    for engine in engines {
        engine.shutdown();
    }
    served
}
