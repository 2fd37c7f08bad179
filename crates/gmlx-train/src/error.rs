use std::path::PathBuf;

/// Errors of training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Models(#[from] gmlx_models::Error),
    #[error(transparent)]
    Mlx(#[from] gmlx_mlx::Error),
    #[error(transparent)]
    Tokenizer(#[from] gmlx_tokenizer::Error),
    #[error(transparent)]
    Adapter(#[from] gmlx_models::adapter::AdapterError),
    /// A setting out of its range.
    #[error("--{name}: {reason}")]
    BadConfig { name: &'static str, reason: String },
    /// `--keys` names a projection gmlx does not know.
    #[error("--keys: unknown projection {key:?} (known: {known})")]
    UnknownKey { key: String, known: String },
    /// The keys and layers select no linear layer of the model.
    #[error("no linear layer of the model matches --keys {keys} in the selected layers")]
    NoTargets { keys: String },
    /// The data folder does not exist.
    #[error("data folder {path} does not exist")]
    MissingDataDir { path: PathBuf },
    /// The data folder has no `train.jsonl`.
    #[error("{path} not found: the data folder needs a train.jsonl")]
    MissingTrainFile { path: PathBuf },
    /// A data file has no rows.
    #[error("{path}: no rows")]
    EmptyData { path: PathBuf },
    /// A row that is not valid.
    #[error("{path}:{line}: {reason}")]
    BadRow {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `--adapter-out` cannot be written.
    #[error("--adapter-out {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    /// The loss became NaN or infinite.
    #[error("training diverged at step {step}: the loss is {loss}")]
    Diverged { step: usize, loss: f32 },
    /// A stop was requested (Ctrl-C).
    #[error("interrupted at step {step}; nothing was written")]
    Interrupted { step: usize },
}

impl From<gmlx_mlx::mlx_rs::error::Exception> for Error {
    fn from(e: gmlx_mlx::mlx_rs::error::Exception) -> Self {
        Error::Mlx(e.into())
    }
}

impl Error {
    /// Whether this is a refusal of the arguments or the data, found before the model loads.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::BadConfig { .. }
                | Error::UnknownKey { .. }
                | Error::MissingDataDir { .. }
                | Error::MissingTrainFile { .. }
                | Error::EmptyData { .. }
                | Error::BadRow { .. }
                | Error::Output { .. }
        )
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
