use gmlx_mlx::{cuda_qmv, fast, Array};

use crate::error::Result;

/// RMSNorm with a learned scale.
#[derive(Debug, Clone)]
pub struct RmsNorm {
    pub weight: Array,
    pub eps: f32,
}

impl RmsNorm {
    pub fn forward(&self, x: &Array) -> Result<Array> {
        Ok(fast::rms_norm(x, Some(&self.weight), self.eps)?)
    }

    /// The norm as a fused CUDA kernel applies it to its row first.
    pub fn fused(&self) -> cuda_qmv::Norm<'_> {
        cuda_qmv::Norm {
            weight: &self.weight,
            eps: self.eps,
        }
    }
}
