//! The crate's error type.

/// Everything that can go wrong while building a tokenizer, encoding, decoding or
/// rendering a chat template.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `tokenizer.ggml.model` names a tokenizer family this crate does not implement.
    #[error("unsupported tokenizer model `{model}` (supported: gpt2, llama, gemma4)")]
    UnsupportedModel {
        /// The value of `tokenizer.ggml.model`.
        model: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not know.
    #[error("unsupported pre-tokenizer `{pre}` for tokenizer model `{model}`")]
    UnsupportedPreTokenizer {
        /// The value of `tokenizer.ggml.model`.
        model: String,
        /// The value of `tokenizer.ggml.pre`.
        pre: String,
    },
    /// A required metadata key is absent.
    #[error("missing tokenizer metadata key `{key}`")]
    MissingKey {
        /// The GGUF metadata key.
        key: String,
    },
    /// A metadata key is present but its value cannot be used.
    #[error("invalid tokenizer metadata `{key}`: {reason}")]
    InvalidMetadata {
        /// The GGUF metadata key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading the GGUF file or one of its metadata values failed.
    #[error("GGUF metadata: {0}")]
    Gguf(#[from] gmlx_gguf::Error),
    /// A token id is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// Number of tokens in the vocabulary.
        vocab_size: usize,
    },
    /// A special token the caller asked for (e.g. BOS) is not defined by the vocabulary.
    #[error("the vocabulary defines no {role} token")]
    MissingSpecialToken {
        /// Which special token: "bos", "eos", ...
        role: &'static str,
    },
    /// The `tokenizers` crate rejected the model we built from the metadata.
    #[error("building the {part} failed: {reason}")]
    Build {
        /// Which part was being built (model, pre-tokenizer, ...).
        part: &'static str,
        /// The underlying message.
        reason: String,
    },
    /// Encoding text failed inside the `tokenizers` pipeline.
    #[error("encoding failed: {reason}")]
    Encode {
        /// The underlying message.
        reason: String,
    },
    /// The GGUF has no chat template of the requested name.
    #[error("no chat template named `{name}` in this model")]
    NoChatTemplate {
        /// `default` or the name of a variant (`tool_use`, `rag`, ...).
        name: String,
    },
    /// The chat template does not parse.
    #[error("chat template `{name}` does not parse: {reason}")]
    TemplateSyntax {
        /// Template name.
        name: String,
        /// The parser's message.
        reason: String,
    },
    /// The template called `raise_exception(message)`.
    #[error("chat template raised: {message}")]
    TemplateException {
        /// The message the template passed to `raise_exception`.
        message: String,
    },
    /// Rendering failed for another reason (undefined value, type error, ...).
    #[error("rendering chat template `{name}` failed: {reason}")]
    TemplateRender {
        /// Template name.
        name: String,
        /// The engine's message.
        reason: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
