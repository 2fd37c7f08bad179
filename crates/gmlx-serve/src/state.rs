//! What every handler sees: the loaded models and the (reloadable) config.
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

use crate::config::ServeConfig;
use crate::validate::{self, Context, ModelInfo};

/// The models by id.
pub type Models = BTreeMap<String, Arc<ModelInfo>>;

static NO_MODELS: Models = BTreeMap::new();

/// What every handler sees: the models (once loaded) and the (reloadable) config.
pub struct State {
    models: OnceLock<Models>,
    config: RwLock<Arc<ServeConfig>>,
    env_thinking: RwLock<Option<bool>>,
}

impl State {
    /// A state whose models are still loading ([`State::set_models`] makes it ready).
    pub fn new(config: ServeConfig) -> State {
        State {
            models: OnceLock::new(),
            config: RwLock::new(Arc::new(config)),
            env_thinking: RwLock::new(validate::env_thinking()),
        }
    }

    /// The loaded models (none while loading).
    pub fn models(&self) -> &Models {
        self.models.get().unwrap_or(&NO_MODELS)
    }

    /// The model a request names (an id or an alias), or the first model when it names none.
    pub fn model(&self, name: Option<&str>) -> Option<Arc<ModelInfo>> {
        let config = self.config();
        let entry = config.model_or_first(name)?;
        self.models().get(&entry.id).cloned()
    }

    /// Whether every model of the config is loaded.
    pub fn is_ready(&self) -> bool {
        self.models.get().is_some()
    }

    /// Publishes the loaded models: from now on requests are served.
    pub fn set_models(&self, models: Models) {
        let _ = self.models.set(models);
    }

    pub fn config(&self) -> Arc<ServeConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn with_context<T>(&self, f: impl FnOnce(&Context<'_>) -> T) -> T {
        let config = self.config();
        let env_thinking = *self.env_thinking.read().unwrap_or_else(|e| e.into_inner());
        f(&Context {
            config: &config,
            models: self.models(),
            env_thinking,
        })
    }

    /// Re-reads the config file: profiles, aliases, API key and limits take effect for new
    /// requests; models already loaded stay loaded (a new model needs a restart).
    pub(crate) fn reload(&self) {
        let current = self.config();
        let Some(file) = &current.source else {
            tracing::warn!("SIGHUP: no config file to reload");
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
                tracing::info!("reloaded {}", file.display());
            }
            Err(e) => tracing::warn!("reload refused, keeping the old config: {e}"),
        }
    }
}
