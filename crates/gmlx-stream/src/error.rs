//! What can go wrong while streaming experts.
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A model file could not be opened for expert reads.
    #[error("opening {} for expert reads: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A read of an expert's bytes failed.
    #[error("reading expert {expert} of {tensor}: {source}")]
    Read {
        tensor: String,
        expert: u32,
        source: std::io::Error,
    },
    /// An expert's bytes did not decode.
    #[error("expert {expert} of {tensor}: {source}")]
    Decode {
        tensor: String,
        expert: u32,
        source: gmlx_gguf::Error,
    },
    /// A read did not come back in time; the step that needed it fails instead of waiting.
    #[error("reading expert {expert} of {tensor} stalled: nothing after {timeout_ms} ms")]
    Stalled {
        tensor: String,
        expert: u32,
        timeout_ms: u64,
    },
    /// The feeder threads are gone (the store is being dropped).
    #[error("the expert feeder threads have stopped")]
    FeedersGone,
    #[error("starting a feeder thread: {source}")]
    Spawn { source: std::io::Error },
    /// A step asked for an expert the layer does not have (a routing hook's choice).
    #[error("{tensor}: expert {expert} asked for, the layer has {experts}")]
    NoExpert {
        tensor: String,
        expert: u32,
        experts: usize,
    },
    /// A model other than the one this placement streams (one placement per model).
    #[error("this expert placement streams {}, not {}", streams.display(), asked.display())]
    OtherModel {
        streams: std::path::PathBuf,
        asked: std::path::PathBuf,
    },
    /// A tensor the plan places in the arena is not where the file says.
    #[error("tensor {tensor} is not in the model's files")]
    NoLocation { tensor: String },
    #[error(transparent)]
    Mlx(#[from] gmlx_mlx::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
