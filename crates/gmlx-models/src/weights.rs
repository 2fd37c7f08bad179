//! Reads an architecture's tensors from the file by name, checking each shape against the
//! config before any byte is converted.
use gmlx_gguf::GgufFile;
use gmlx_mlx::{Dtype, QuantWeight};

use crate::blocks::norm::RmsNorm;
use crate::error::{Error, Result};

pub struct Weights<'f> {
    pub file: &'f GgufFile,
    pub dtype: Dtype,
}

impl Weights<'_> {
    /// The tensor `name`, which must have exactly `dims` (GGUF order).
    fn checked(&self, name: &str, dims: &[u64]) -> Result<&gmlx_gguf::TensorInfo> {
        let info = self.file.tensor(name).map_err(|_| Error::MissingTensor {
            name: name.to_owned(),
        })?;
        if info.dims != dims {
            return Err(Error::TensorShape {
                name: name.to_owned(),
                found: info.dims.clone(),
                expected: dims.to_vec(),
            });
        }
        Ok(info)
    }

    /// A `[rows, cols]` matrix (GGUF dims `[cols, rows]`).
    pub fn matrix(&self, name: &str, rows: i32, cols: i32) -> Result<QuantWeight> {
        let info = self.checked(name, &[cols as u64, rows as u64])?;
        Ok(QuantWeight::from_gguf(self.file, info, self.dtype)?)
    }

    /// A stack of `experts` matrices `[rows, cols]` (GGUF dims `[cols, rows, experts]`).
    pub fn experts(&self, name: &str, experts: i32, rows: i32, cols: i32) -> Result<QuantWeight> {
        let info = self.checked(name, &[cols as u64, rows as u64, experts as u64])?;
        Ok(QuantWeight::from_gguf(self.file, info, self.dtype)?)
    }

    /// A dense array of the given GGUF dims (biases, sinks), in the activation dtype, with
    /// the row-major shape (dims reversed).
    pub fn array(&self, name: &str, dims: &[u64]) -> Result<gmlx_mlx::Array> {
        self.checked(name, dims)?;
        let values = self.file.dequantize(name)?;
        let shape: Vec<i32> = dims.iter().rev().map(|&d| d as i32).collect();
        Ok(gmlx_mlx::Array::from_slice(&values, &shape).as_dtype(self.dtype)?)
    }

    /// Like [`Weights::matrix`], `None` when the file has no such tensor.
    pub fn optional_matrix(&self, name: &str, rows: i32, cols: i32) -> Result<Option<QuantWeight>> {
        if self.file.has_tensor(name) {
            self.matrix(name, rows, cols).map(Some)
        } else {
            Ok(None)
        }
    }

    /// An RMSNorm of `len` features.
    pub fn rms_norm(&self, name: &str, len: i32, eps: f32) -> Result<RmsNorm> {
        let info = self.checked(name, &[len as u64])?;
        let w = QuantWeight::from_gguf(self.file, info, self.dtype)?;
        let weight = w.as_dense().cloned().ok_or_else(|| Error::TensorShape {
            name: name.to_owned(),
            found: info.dims.clone(),
            expected: vec![len as u64],
        })?;
        Ok(RmsNorm { weight, eps })
    }
}
