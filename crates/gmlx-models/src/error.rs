/// Errors of model loading and generation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Gguf(#[from] gmlx_gguf::Error),
    #[error(transparent)]
    Mlx(#[from] gmlx_mlx::Error),
    #[error(transparent)]
    Tokenizer(#[from] gmlx_tokenizer::Error),
    /// `general.architecture` names an architecture gmlx does not run.
    #[error("unsupported architecture {arch:?} (supported: {supported})")]
    UnsupportedArch { arch: String, supported: String },
    /// Tensors use a codec gmlx cannot read.
    #[error("unsupported codec {codec} ({tensors} tensors use it)")]
    UnsupportedCodec { codec: String, tensors: usize },
    /// A metadata value is present but inconsistent with the others.
    #[error("metadata key {key}: {reason}")]
    BadConfig { key: String, reason: String },
    /// A tensor the config needs is not in the file, or has another shape than the config
    /// implies.
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        found: Vec<u64>,
        expected: Vec<u64>,
    },
    /// Tensors the per-layer plan needs are missing or misshapen (all of them, found before
    /// any tensor byte was read).
    #[error("{}", describe(problems))]
    Tensors { problems: Vec<TensorProblem> },
    /// A rope scaling type gmlx does not implement yet.
    #[error("unsupported rope scaling type {kind:?}")]
    UnsupportedRopeScaling { kind: String },
    /// A sampling parameter out of its range.
    #[error("invalid sampling parameter {name}: {reason}")]
    BadSampling { name: &'static str, reason: String },
    /// The prompt and the requested tokens do not fit the context.
    #[error("context overflow: {needed} tokens, the model's context is {context}")]
    ContextOverflow { needed: usize, context: usize },
    /// A constrained sequence reached a state no token of the vocabulary can continue.
    #[error("constrained decoding: no token of the vocabulary can continue the value after {generated} tokens")]
    ConstraintDeadEnd { generated: usize },
    /// An empty prompt: there is nothing to continue.
    #[error("the prompt encodes to no tokens")]
    EmptyPrompt,
    /// A cached forward pass was given caches that do not match the model's layers.
    #[error("the caches passed have no cache for layer {layer} (made for another model?)")]
    CacheMismatch { layer: usize },
    /// The default model could not be fetched.
    #[error(transparent)]
    DefaultModel(#[from] gmlx_cache::Error),
    /// A routing hook refused or failed layer `layer`'s routing (a replay without a route
    /// recorded for a position, say).
    #[error("layer {layer} routing: {source}")]
    Routing {
        layer: usize,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Layer `layer`'s routed experts could not be made available (a streamed read failed or
    /// stalled; the store says which).
    #[error("layer {layer}: {source}")]
    Experts {
        layer: usize,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl From<gmlx_mlx::mlx_rs::error::Exception> for Error {
    fn from(e: gmlx_mlx::mlx_rs::error::Exception) -> Self {
        Error::Mlx(e.into())
    }
}

impl Error {
    /// Whether this is a refusal to load the file (unsupported architecture or codec, bad or
    /// missing metadata or tensors), as opposed to a failure while running.
    pub fn is_load_refusal(&self) -> bool {
        matches!(
            self,
            Error::Gguf(_)
                | Error::UnsupportedArch { .. }
                | Error::UnsupportedCodec { .. }
                | Error::BadConfig { .. }
                | Error::TensorShape { .. }
                | Error::Tensors { .. }
                | Error::UnsupportedRopeScaling { .. }
        )
    }
}

/// One thing wrong with the file's tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorProblem {
    Missing {
        name: String,
    },
    Shape {
        name: String,
        found: Vec<u64>,
        expected: Vec<u64>,
    },
}

fn describe(problems: &[TensorProblem]) -> String {
    let missing: Vec<&str> = problems
        .iter()
        .filter_map(|p| match p {
            TensorProblem::Missing { name } => Some(name.as_str()),
            TensorProblem::Shape { .. } => None,
        })
        .collect();
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!(
            "{} missing tensor{}: {}",
            missing.len(),
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        ));
    }
    for p in problems {
        if let TensorProblem::Shape {
            name,
            found,
            expected,
        } = p
        {
            parts.push(format!(
                "tensor {name} has shape {found:?}, expected {expected:?}"
            ));
        }
    }
    parts.join("; ")
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
