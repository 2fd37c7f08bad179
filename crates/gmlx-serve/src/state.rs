//! What every handler sees: the loaded models and the (reloadable) config.
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::config::ServeConfig;
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
