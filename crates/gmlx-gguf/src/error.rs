//! Errors of gmlx-gguf. Every failure on file input is one of these values; nothing panics.

use std::fmt;
use std::path::PathBuf;

use crate::ggml_type::GgmlType;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where in the header a parse error happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Context {
    /// Magic, version and the two counts.
    Header,
    /// The key string of metadata entry `index`.
    KeyOf { index: u64 },
    /// The value of metadata key `key`.
    ValueOf { key: String },
    /// Tensor-table entry `index` (its name once known).
    TensorInfo { index: u64, name: Option<String> },
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Context::Header => write!(f, "the file header"),
            Context::KeyOf { index } => write!(f, "the key of metadata entry #{index}"),
            Context::ValueOf { key } => write!(f, "the value of metadata key '{key}'"),
            Context::TensorInfo { index, name: None } => write!(f, "tensor-table entry #{index}"),
            Context::TensorInfo {
                index,
                name: Some(n),
            } => write!(f, "tensor-table entry #{index} ('{n}')"),
        }
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Any parse or validation error, with the file it happened in.
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<Error>,
    },

    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },

    #[error("unsupported GGUF version {version} (this reader handles versions 2 and 3)")]
    UnsupportedVersion { version: u32 },

    #[error("big-endian GGUF (version field reads {swapped} byte-swapped) is not supported")]
    BigEndian { swapped: u32 },

    #[error(
        "truncated: {context} needs {needed} bytes at offset {offset}, but only {available} remain"
    )]
    Truncated {
        context: Context,
        offset: u64,
        needed: u64,
        available: u64,
    },

    #[error("{context}: {what} is {value}, above the limit of {limit} (at offset {offset})")]
    LimitExceeded {
        context: Context,
        what: &'static str,
        value: u64,
        limit: u64,
        offset: u64,
    },

    #[error("{context}: string at offset {offset} is not valid UTF-8")]
    InvalidUtf8 { context: Context, offset: u64 },

    #[error("{context}: unknown metadata value type {type_id} at offset {offset}")]
    UnknownValueType {
        context: Context,
        type_id: u32,
        offset: u64,
    },

    #[error("duplicate metadata key '{key}'")]
    DuplicateKey { key: String },

    #[error("duplicate tensor name '{name}'")]
    DuplicateTensor { name: String },

    #[error("general.alignment is {value}; it must be a power of two between 1 and 2^30")]
    BadAlignment { value: u64 },

    #[error("tensor '{tensor}': unknown ggml type id {type_id}")]
    UnknownGgmlType { tensor: String, type_id: u32 },

    #[error("tensor '{tensor}': bad shape {dims:?}: {problem}")]
    BadShape {
        tensor: String,
        dims: Vec<u64>,
        problem: ShapeProblem,
    },

    #[error(
        "tensor '{tensor}': data at offset {offset} (+{n_bytes} bytes) lies outside the data \
         section of {data_len} bytes"
    )]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        n_bytes: u64,
        data_len: u64,
    },

    #[error(
        "tensor '{tensor}': data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },

    #[error("metadata key '{key}' is missing")]
    MissingKey { key: String },

    #[error("metadata key '{key}' has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },

    #[error("metadata key '{key}' holds {value}, which does not fit in {target}")]
    OutOfRange {
        key: String,
        value: String,
        target: &'static str,
    },

    #[error("metadata key '{key}' uses {{arch}} but the file has no general.architecture")]
    NoArchitecture { key: String },

    #[error("tensor '{name}' is missing")]
    MissingTensor { name: String },

    #[error("codec {ty} is not supported ({tensors} tensor(s) use it)")]
    UnsupportedCodec { ty: GgmlType, tensors: usize },

    #[error("{ty}: {found} bytes given, {expected} expected for {n_elements} elements")]
    ByteLength {
        ty: GgmlType,
        n_elements: u64,
        expected: u64,
        found: u64,
    },

    #[error("{ty}: {n_elements} elements is not a multiple of the block size {block_size}")]
    NotBlockMultiple {
        ty: GgmlType,
        n_elements: u64,
        block_size: u64,
    },

    #[error("{ty} cannot be repacked exactly into MLX affine layout: {reason}")]
    NotAffine { ty: GgmlType, reason: &'static str },

    #[error("affine layout: {problem}")]
    BadAffineParams { problem: String },

    #[error("split model: {} shard(s) missing: {}", missing.len(), DisplayPaths(missing))]
    MissingShards { missing: Vec<PathBuf> },

    #[error("split model: {path}: {problem}")]
    BadSplit {
        path: PathBuf,
        problem: SplitProblem,
    },

    #[error("writer: {problem}")]
    Writer { problem: WriterProblem },
}

/// What is wrong with a tensor's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShapeProblem {
    TooManyDims { n_dims: u32, max: u32 },
    NegativeOrZeroDims,
    ElementCountOverflow,
    RowNotBlockMultiple { ty: GgmlType, block_size: u64 },
}

impl fmt::Display for ShapeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeProblem::TooManyDims { n_dims, max } => {
                write!(f, "{n_dims} dimensions, at most {max} allowed")
            }
            ShapeProblem::NegativeOrZeroDims => write!(f, "a dimension does not fit in i64"),
            ShapeProblem::ElementCountOverflow => write!(f, "element or byte count overflows"),
            ShapeProblem::RowNotBlockMultiple { ty, block_size } => write!(
                f,
                "first dimension is not a multiple of {ty}'s block size {block_size}"
            ),
        }
    }
}

/// What is wrong with a split (multi-file) model.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SplitProblem {
    NameNotSplit,
    CountMismatch { expected: u64, found: u64 },
    IndexMismatch { expected: u64, found: u64 },
    TensorCountMismatch { expected: u64, found: u64 },
}

impl fmt::Display for SplitProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitProblem::NameNotSplit => write!(
                f,
                "split.count > 1 but the file name is not of the form NAME-00001-of-00003.gguf"
            ),
            SplitProblem::CountMismatch { expected, found } => {
                write!(f, "split.count is {found}, expected {expected}")
            }
            SplitProblem::IndexMismatch { expected, found } => {
                write!(f, "split.no is {found}, expected {expected}")
            }
            SplitProblem::TensorCountMismatch { expected, found } => write!(
                f,
                "split.tensors.count says {expected} tensors, the shards hold {found}"
            ),
        }
    }
}

/// What is wrong with data handed to the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriterProblem {
    DuplicateKey {
        key: String,
    },
    DuplicateTensor {
        name: String,
    },
    DataSize {
        tensor: String,
        expected: u64,
        found: u64,
    },
    BadShape {
        tensor: String,
        problem: ShapeProblem,
    },
    AlignmentType,
}

impl fmt::Display for WriterProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriterProblem::DuplicateKey { key } => write!(f, "duplicate metadata key '{key}'"),
            WriterProblem::DuplicateTensor { name } => write!(f, "duplicate tensor '{name}'"),
            WriterProblem::DataSize {
                tensor,
                expected,
                found,
            } => write!(
                f,
                "tensor '{tensor}' has {found} bytes of data, its type and shape need {expected}"
            ),
            WriterProblem::BadShape { tensor, problem } => {
                write!(f, "tensor '{tensor}': {problem}")
            }
            WriterProblem::AlignmentType => {
                write!(f, "general.alignment must be a u32 power of two")
            }
        }
    }
}

struct DisplayPaths<'a>(&'a [PathBuf]);

impl fmt::Display for DisplayPaths<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{}", p.display())?;
        }
        Ok(())
    }
}

impl Error {
    /// Attach the file path to a parse error.
    pub(crate) fn in_file(self, path: impl Into<PathBuf>) -> Error {
        match self {
            e @ (Error::Io { .. } | Error::InFile { .. }) => e,
            e => Error::InFile {
                path: path.into(),
                source: Box::new(e),
            },
        }
    }
}
