//! `ServeError` and its single mapping to an HTTP status and OpenAI's error body.
use std::path::PathBuf;
use std::sync::Arc;

/// What can go wrong while configuring or serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A config file that does not parse or validate; `key` names the offending key.
    #[error("{}: `{key}`: {reason}", file.display())]
    Config {
        file: PathBuf,
        key: String,
        reason: String,
    },
    #[error("reading {}: {source}", file.display())]
    ConfigRead {
        file: PathBuf,
        source: std::io::Error,
    },
    /// A request before every model is loaded.
    #[error("the server is still loading its models; retry shortly")]
    Loading,
    /// A command-line flag out of its range.
    #[error("{flag}: {reason}")]
    BadFlag { flag: &'static str, reason: String },
    /// A non-loopback address without an API key.
    #[error(
        "refusing to listen on {host} without an API key (set server.api_key, or pass --no-auth)"
    )]
    Unauthenticated { host: String },
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("model `{id}`: {source}")]
    Load {
        id: String,
        source: gmlx_models::Error,
    },
    /// A model's chat template (its own, or the `chat_template` file of its entry) does not
    /// compile.
    #[error("model `{id}`: chat template: {source}")]
    ChatTemplate {
        id: String,
        source: gmlx_tokenizer::Error,
    },
    #[error("model `{id}`: chat template {}: {source}", file.display())]
    ChatTemplateRead {
        id: String,
        file: PathBuf,
        source: std::io::Error,
    },
    /// A model's engine thread ended before it reported its load.
    #[error("model `{id}`: the engine thread ended while loading")]
    EngineEnded { id: String },
    /// The thread that loads the models panicked.
    #[error("the model loader panicked: {source}")]
    LoaderPanicked { source: tokio::task::JoinError },
    /// A model's adapter is refused: unreadable, for another base, or not applicable.
    #[error("model `{id}`: adapter {}: {source}", file.display())]
    Adapter {
        id: String,
        file: PathBuf,
        source: Box<gmlx_models::adapter::AdapterError>,
    },
    // --- request errors ---
    #[error("request body is over the limit of {limit_bytes} bytes")]
    BodyTooLarge { limit_bytes: usize },
    #[error("malformed JSON: {reason}")]
    BadJson { reason: String },
    #[error("invalid value for `{param}`: {reason}")]
    BadParam { param: String, reason: String },
    #[error("the model `{model}` does not exist")]
    UnknownModel { model: String },
    #[error("the profile `{profile}` does not exist")]
    UnknownProfile { profile: String },
    #[error("no route for {method} {path}")]
    NotFound { method: String, path: String },
    #[error("missing or invalid API key")]
    Unauthorized,
    #[error("the request queue is full; retry after {retry_after_s} s")]
    QueueFull { retry_after_s: u64 },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the prompt needs {needed} tokens; the model's context is {context}")]
    ContextOverflow { needed: usize, context: usize },
    #[error("generation failed: {source}")]
    Engine { source: gmlx_models::Error },
    /// A state the scheduler never leaves a row in (a bug, not the request's fault).
    #[error("internal error: {0}")]
    Internal(&'static str),
    /// A batched step failed; every row in it gets the one error.
    #[error("generation failed: {source}")]
    Batch { source: Arc<Error> },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        match self {
            Error::BodyTooLarge { .. } => 413,
            Error::BadJson { .. }
            | Error::BadParam { .. }
            | Error::UnknownProfile { .. }
            | Error::ContextOverflow { .. } => 400,
            Error::UnknownModel { .. } | Error::NotFound { .. } => 404,
            Error::Unauthorized => 401,
            Error::QueueFull { .. } | Error::ShuttingDown | Error::Loading => 503,
            _ => 500,
        }
    }

    /// The stable `error.type` of the OpenAI error body.
    pub fn error_type(&self) -> &'static str {
        match self {
            Error::BodyTooLarge { .. }
            | Error::BadJson { .. }
            | Error::BadParam { .. }
            | Error::UnknownProfile { .. }
            | Error::ContextOverflow { .. } => "invalid_request_error",
            Error::UnknownModel { .. } | Error::NotFound { .. } => "not_found_error",
            Error::Unauthorized => "authentication_error",
            Error::QueueFull { .. } | Error::ShuttingDown | Error::Loading => "overloaded_error",
            _ => "server_error",
        }
    }

    /// The `error.param` of the body, when one parameter is to blame.
    pub fn param(&self) -> Option<&str> {
        match self {
            Error::BadParam { param, .. } => Some(param),
            Error::UnknownModel { .. } => Some("model"),
            Error::UnknownProfile { .. } => Some("profile"),
            Error::ContextOverflow { .. } => Some("messages"),
            _ => None,
        }
    }

    /// `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.to_string(),
                "type": self.error_type(),
                "param": self.param(),
                "code": self.status(),
            }
        })
    }

    /// Seconds for a `Retry-After` header.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            Error::QueueFull { retry_after_s } => Some(*retry_after_s),
            Error::Loading => Some(1),
            _ => None,
        }
    }
}

impl From<gmlx_models::Error> for Error {
    fn from(e: gmlx_models::Error) -> Self {
        match e {
            gmlx_models::Error::ContextOverflow { needed, context } => {
                Error::ContextOverflow { needed, context }
            }
            gmlx_models::Error::BadSampling { name, reason } => Error::BadParam {
                param: name.to_owned(),
                reason,
            },
            source => Error::Engine { source },
        }
    }
}

impl From<gmlx_tokenizer::Error> for Error {
    fn from(e: gmlx_tokenizer::Error) -> Self {
        Error::BadParam {
            param: "messages".to_owned(),
            reason: e.to_string(),
        }
    }
}
