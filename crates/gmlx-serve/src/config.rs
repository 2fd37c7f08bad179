//! `ServeConfig`: read from TOML (see docs/server.md) or built from one model path, and
//! validated once.
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// Server settings, models and profiles, all checked.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub host: IpAddr,
    /// 0 picks a free port (printed on start).
    pub port: u16,
    pub api_key: Option<String>,
    /// Allow a non-loopback address without an API key.
    pub no_auth: bool,
    /// Most requests decoded together in one forward pass.
    pub batch_width: usize,
    /// Most requests waiting for a row; more are answered 503.
    pub queue_cap: usize,
    pub max_body_bytes: usize,
    /// Seconds SIGTERM waits for in-flight requests before cancelling them.
    pub shutdown_grace_s: u64,
    /// Browser origins allowed to call the API (`"*"`: any); none by default.
    pub cors_origins: Vec<String>,
    pub models: Vec<ModelEntry>,
    pub profiles: BTreeMap<String, Profile>,
    /// The file this came from (for SIGHUP reloads), if any.
    pub source: Option<PathBuf>,
}

/// One servable model.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    pub id: String,
    pub path: PathBuf,
    pub aliases: Vec<String>,
    /// The profile requests get when they name none.
    pub profile: Option<String>,
    /// A chat template (Jinja source file) used instead of the GGUF's.
    pub chat_template: Option<PathBuf>,
    pub adapter: Option<PathBuf>,
    /// Routed MoE experts read from the file on demand (`stream_experts = true`) into an
    /// arena of this many MiB over all MoE layers (`expert_arena_mb`, default 1024).
    pub expert_arena_mb: Option<u64>,
}

/// The arena of a streamed model when `expert_arena_mb` is not given.
pub const DEFAULT_EXPERT_ARENA_MB: u64 = 1024;

/// Defaults a request can name with `profile` (or get from its model).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub max_tokens: Option<usize>,
    /// Prepended as a system message when the request has none.
    pub system_prompt: Option<String>,
    /// `enable_thinking` for the chat template.
    pub thinking: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    models: Vec<RawModel>,
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    host: Option<String>,
    port: Option<u16>,
    api_key: Option<String>,
    batch_width: Option<usize>,
    queue_cap: Option<usize>,
    max_body_bytes: Option<usize>,
    shutdown_grace_s: Option<u64>,
    #[serde(default)]
    cors_origins: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    id: String,
    path: PathBuf,
    #[serde(default)]
    aliases: Vec<String>,
    profile: Option<String>,
    chat_template: Option<PathBuf>,
    adapter: Option<PathBuf>,
    #[serde(default)]
    stream_experts: bool,
    expert_arena_mb: Option<u64>,
}

pub const DEFAULT_PORT: u16 = 8080;
pub const DEFAULT_BATCH_WIDTH: usize = 8;
pub const DEFAULT_QUEUE_CAP: usize = 64;
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

impl ServeConfig {
    /// One model, default settings: what `gmlx-server MODEL.gguf` serves. The model's id is
    /// its file stem.
    pub fn single(path: impl Into<PathBuf>) -> ServeConfig {
        let path = path.into();
        let id = path
            .file_stem()
            .map_or_else(|| "model".to_owned(), |s| s.to_string_lossy().into_owned());
        ServeConfig {
            host: IpAddr::from([127, 0, 0, 1]),
            port: DEFAULT_PORT,
            api_key: None,
            no_auth: false,
            batch_width: DEFAULT_BATCH_WIDTH,
            queue_cap: DEFAULT_QUEUE_CAP,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            shutdown_grace_s: 30,
            cors_origins: Vec::new(),
            models: vec![ModelEntry {
                id,
                path,
                aliases: Vec::new(),
                profile: None,
                chat_template: None,
                adapter: None,
                expert_arena_mb: None,
            }],
            profiles: BTreeMap::new(),
            source: None,
        }
    }

    /// Reads and validates a TOML config file.
    pub fn from_file(file: &Path) -> Result<ServeConfig> {
        let text = std::fs::read_to_string(file).map_err(|source| Error::ConfigRead {
            file: file.to_owned(),
            source,
        })?;
        Self::from_toml(&text, file)
    }

    /// Parses and validates `text`; `file` names it in errors and anchors relative paths.
    pub fn from_toml(text: &str, file: &Path) -> Result<ServeConfig> {
        let bad = |key: &str, reason: String| Error::Config {
            file: file.to_owned(),
            key: key.to_owned(),
            reason,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let key = e
                .span()
                .map_or_else(|| "?".to_owned(), |s| key_at(text, s.start));
            bad(&key, e.message().to_owned())
        })?;
        let base = file.parent().unwrap_or(Path::new("."));
        let s = raw.server;
        let host: IpAddr = match &s.host {
            None => IpAddr::from([127, 0, 0, 1]),
            Some(h) if h == "localhost" => IpAddr::from([127, 0, 0, 1]),
            Some(h) => h
                .parse()
                .map_err(|e| bad("server.host", format!("`{h}`: {e}")))?,
        };
        let positive = |key: &str, v: Option<usize>, default: usize| -> Result<usize> {
            match v {
                Some(0) => Err(bad(key, "must be at least 1".to_owned())),
                Some(v) => Ok(v),
                None => Ok(default),
            }
        };
        let batch_width = positive("server.batch_width", s.batch_width, DEFAULT_BATCH_WIDTH)?;
        let max_body_bytes = positive(
            "server.max_body_bytes",
            s.max_body_bytes,
            DEFAULT_MAX_BODY_BYTES,
        )?;
        for (i, origin) in s.cors_origins.iter().enumerate() {
            let scheme = origin.starts_with("http://") || origin.starts_with("https://");
            if origin != "*" && (!scheme || origin.ends_with('/')) {
                return Err(bad(
                    &format!("server.cors_origins[{i}]"),
                    format!("`{origin}` is not `*` or an origin like `https://app.example`"),
                ));
            }
        }
        if s.api_key.as_deref() == Some("") {
            return Err(bad("server.api_key", "is empty".to_owned()));
        }
        for (name, p) in &raw.profiles {
            check_profile(p).map_err(|(k, r)| bad(&format!("profiles.{name}.{k}"), r))?;
        }
        if raw.models.is_empty() {
            return Err(bad(
                "models",
                "at least one [[models]] entry is needed".to_owned(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut models = Vec::new();
        for (i, m) in raw.models.into_iter().enumerate() {
            for name in std::iter::once(&m.id).chain(&m.aliases) {
                if name.is_empty() {
                    return Err(bad(&format!("models[{i}].id"), "is empty".to_owned()));
                }
                if !seen.insert(name.clone()) {
                    return Err(bad(
                        &format!("models[{i}].aliases"),
                        format!("`{name}` names two models"),
                    ));
                }
            }
            if let Some(p) = &m.profile {
                if !raw.profiles.contains_key(p) {
                    return Err(bad(
                        &format!("models[{i}].profile"),
                        format!("no profile `{p}` in [profiles]"),
                    ));
                }
            }
            let expert_arena_mb = match (m.stream_experts, m.expert_arena_mb) {
                (false, None) => None,
                (false, Some(_)) => {
                    return Err(bad(
                        &format!("models[{i}].expert_arena_mb"),
                        "given without stream_experts = true".to_owned(),
                    ))
                }
                (true, Some(0)) => {
                    return Err(bad(
                        &format!("models[{i}].expert_arena_mb"),
                        "must be at least 1".to_owned(),
                    ))
                }
                (true, mb) => Some(mb.unwrap_or(DEFAULT_EXPERT_ARENA_MB)),
            };
            let anchor = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };
            let path = anchor(m.path);
            if !path.is_file() {
                return Err(bad(
                    &format!("models[{i}].path"),
                    format!("{} is not a file", path.display()),
                ));
            }
            models.push(ModelEntry {
                id: m.id,
                path,
                aliases: m.aliases,
                profile: m.profile,
                chat_template: m.chat_template.map(anchor),
                adapter: m.adapter.map(anchor),
                expert_arena_mb,
            });
        }
        Ok(ServeConfig {
            host,
            port: s.port.unwrap_or(DEFAULT_PORT),
            api_key: s.api_key,
            no_auth: false,
            batch_width,
            queue_cap: s.queue_cap.unwrap_or(DEFAULT_QUEUE_CAP),
            max_body_bytes,
            shutdown_grace_s: s.shutdown_grace_s.unwrap_or(30),
            cors_origins: s.cors_origins,
            models,
            profiles: raw.profiles,
            source: Some(file.to_owned()),
        })
    }

    /// Refuses a non-loopback address without an API key unless `no_auth`.
    pub fn check_auth(&self) -> Result<()> {
        if !self.host.is_loopback() && self.api_key.is_none() && !self.no_auth {
            return Err(Error::Unauthenticated {
                host: self.host.to_string(),
            });
        }
        Ok(())
    }

    /// The model entry answering to `name` (an id or an alias).
    /// The model `name` designates (see [`ServeConfig::model`]), or the first model when a
    /// request names none.
    pub fn model_or_first(&self, name: Option<&str>) -> Option<&ModelEntry> {
        match name {
            Some(name) => self.model(name),
            None => self.models.first(),
        }
    }

    pub fn model(&self, name: &str) -> Option<&ModelEntry> {
        self.models
            .iter()
            .find(|m| m.id == name || m.aliases.iter().any(|a| a == name))
    }
}

/// The dotted key at byte `at` of `text`: the table header above it and the name before
/// `=` on its line.
fn key_at(text: &str, at: usize) -> String {
    let at = at.min(text.len());
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let name = line.split('=').next().unwrap_or(line).trim();
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim());
    match table {
        _ if name.starts_with('[') => name.trim_matches(|c| c == '[' || c == ']').to_owned(),
        Some(t) => format!("{t}.{name}"),
        None => name.to_owned(),
    }
}

fn check_profile(p: &Profile) -> std::result::Result<(), (&'static str, String)> {
    if let Some(t) = p.temperature {
        if !(t >= 0.0 && t.is_finite()) {
            return Err(("temperature", format!("{t} is not a finite value >= 0")));
        }
    }
    if let Some(v) = p.top_p {
        if !(v > 0.0 && v <= 1.0) {
            return Err(("top_p", format!("{v} is not in (0, 1]")));
        }
    }
    if let Some(v) = p.min_p {
        if !(0.0..=1.0).contains(&v) {
            return Err(("min_p", format!("{v} is not in [0, 1]")));
        }
    }
    if p.max_tokens == Some(0) {
        return Err(("max_tokens", "must be at least 1".to_owned()));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServeConfig> {
        ServeConfig::from_toml(text, Path::new("/nonexistent/serve.toml"))
    }

    #[test]
    fn an_unknown_key_is_named_with_the_file() {
        let e = parse("[server]\nprot = 1\n").unwrap_err().to_string();
        assert!(e.contains("/nonexistent/serve.toml"), "{e}");
        assert!(e.contains("`server.prot`"), "{e}");
        assert!(e.contains("prot"), "{e}");
    }

    #[test]
    fn a_wrong_type_names_the_key() {
        let e = parse("[server]\nport = \"x\"\n").unwrap_err().to_string();
        assert!(e.contains("`server.port`"), "{e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let e = parse("[server]\nbatch_width = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.batch_width"), "{e}");
        let e = parse("[profiles.hot]\ntemperature = -1.0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("profiles.hot.temperature"), "{e}");
        let e = parse("[[models]]\nid = \"a\"\npath = \"m.gguf\"\nprofile = \"nope\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("models[0].profile"), "{e}");
        let e = parse("").unwrap_err().to_string();
        assert!(e.contains("`models`"), "{e}");
        let model = "[[models]]\nid = \"a\"\npath = \"m.gguf\"\n";
        let e = parse(&format!("{model}expert_arena_mb = 64\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("models[0].expert_arena_mb") && e.contains("stream_experts"),
            "{e}"
        );
        let e = parse(&format!(
            "{model}stream_experts = true\nexpert_arena_mb = 0\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("models[0].expert_arena_mb"), "{e}");
    }

    #[test]
    fn a_public_address_needs_a_key_or_no_auth() {
        let mut c = ServeConfig::single("m.gguf");
        assert!(c.check_auth().is_ok());
        c.host = IpAddr::from([0, 0, 0, 0]);
        assert!(c.check_auth().is_err());
        c.api_key = Some("k".to_owned());
        assert!(c.check_auth().is_ok());
        c.api_key = None;
        c.no_auth = true;
        assert!(c.check_auth().is_ok());
    }
}
