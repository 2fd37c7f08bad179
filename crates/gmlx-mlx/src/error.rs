use crate::runtime::Backend;

/// Errors of the MLX layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An MLX operation failed; the message is MLX's own.
    #[error("MLX: {0}")]
    Mlx(#[from] mlx_rs::error::Exception),
    /// A raw mlx-c call returned a failure code.
    #[error("mlx-c call {call} failed (code {code})")]
    Ffi { call: &'static str, code: i32 },
    /// `--device gpu` (or `GMLX_DEVICE=gpu`) on an MLX build without a GPU backend.
    #[error("no GPU: the MLX runtime in use ({library}) is a {backend} build")]
    NoGpu { backend: Backend, library: String },
    /// A tensor's bytes could not be read or converted.
    #[error("tensor {tensor}: {source}")]
    Gguf {
        tensor: String,
        #[source]
        source: gmlx_gguf::Error,
    },
    /// A tensor of more than 3 dimensions where a matrix or expert stack was expected.
    #[error("tensor {tensor} has {dims} dimensions; weights have at most 3")]
    TensorRank { tensor: String, dims: usize },
    /// A tensor dimension beyond what MLX indexes (2^31 - 1).
    #[error("tensor {tensor} has a dimension too large for MLX")]
    TensorTooLarge { tensor: String },
    /// The host quantized matmul could not read its operands.
    #[error("CPU quantized matmul: {reason}")]
    HostKernel { reason: String },
    /// gmlx's CUDA kernel could not be set up or gave no output.
    #[error("CUDA kernel {kernel}: {reason}")]
    CudaKernel {
        kernel: &'static str,
        reason: String,
    },
    /// An expert matrix of another form than the stack it is bound into.
    #[error("tensor {tensor}: an expert of another codec layout than its slots")]
    SlotForm { tensor: String },
    /// A device name other than `auto`, `cpu` or `gpu`.
    #[error("unknown device {name:?}: expected auto, cpu or gpu")]
    UnknownDevice { name: String },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
