//! The flags of `gmlx-server`, shared with `gmlx serve`, and their one conversion to a
//! `ServeConfig`.
use std::net::IpAddr;
use std::path::PathBuf;

use crate::error::{Error, Result};
pub use crate::logging::LogFormat;
use crate::ServeConfig;
use clap::Args;

/// The flags of `gmlx-server` and `gmlx serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// A GGUF model to serve alone (its id is the file stem); without it and without
    /// --config, the default model.
    model: Option<PathBuf>,
    /// A TOML config file (see docs/server.md).
    #[arg(short, long, conflicts_with = "model")]
    config: Option<PathBuf>,
    /// Overrides server.host (default 127.0.0.1).
    #[arg(long)]
    host: Option<IpAddr>,
    /// Overrides server.port (0 picks a free port).
    #[arg(long)]
    port: Option<u16>,
    /// Overrides server.api_key; clients send it as `Authorization: Bearer KEY`.
    #[arg(long)]
    api_key: Option<String>,
    /// Allow a non-loopback --host without an API key.
    #[arg(long)]
    no_auth: bool,
    /// Overrides server.batch_width.
    #[arg(long)]
    batch_width: Option<usize>,
    /// Overrides server.queue_cap.
    #[arg(long)]
    queue_cap: Option<usize>,
    /// Overrides server.max_body_bytes.
    #[arg(long)]
    max_body_bytes: Option<usize>,
    /// Stream the model's routed MoE experts from the file into a bounded arena (the single
    /// model; in a config, `stream_experts` per model).
    #[arg(long, conflicts_with = "config")]
    stream_experts: bool,
    /// MiB of arena over all MoE layers, with --stream-experts.
    #[arg(long, value_name = "MIB", requires = "stream_experts",
          value_parser = clap::value_parser!(u64).range(1..))]
    expert_arena_mb: Option<u64>,
    /// How log lines on stderr are written: `text` (`gmlx-server: message key=value ...`) or
    /// `json` (one object per line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Flags → a validated config (file or single model, then overrides, then the auth check).
pub fn config(args: ServeArgs) -> Result<ServeConfig> {
    let mut c = match (args.config, args.model) {
        (Some(file), _) => ServeConfig::from_file(&file)?,
        (None, Some(model)) => ServeConfig::single(model),
        (None, None) => {
            let default = gmlx_models::default_model::fetch().map_err(|source| Error::Load {
                id: "default".to_owned(),
                source,
            })?;
            ServeConfig::single(default)
        }
    };
    if args.stream_experts {
        for m in &mut c.models {
            m.expert_arena_mb = Some(
                args.expert_arena_mb
                    .unwrap_or(crate::config::DEFAULT_EXPERT_ARENA_MB),
            );
        }
    }
    if let Some(h) = args.host {
        c.host = h;
    }
    if let Some(p) = args.port {
        c.port = p;
    }
    if args.api_key.is_some() {
        c.api_key = args.api_key;
    }
    c.no_auth |= args.no_auth;
    if let Some(w) = args.batch_width {
        if w == 0 {
            return Err(Error::BadFlag {
                flag: "--batch-width",
                reason: "must be at least 1".to_owned(),
            });
        }
        c.batch_width = w;
    }
    if let Some(q) = args.queue_cap {
        c.queue_cap = q;
    }
    if let Some(b) = args.max_body_bytes {
        c.max_body_bytes = b;
    }
    c.check_auth()?;
    Ok(c)
}
