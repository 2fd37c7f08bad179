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
    /// A `[rows, cols]` matrix (GGUF dims `[cols, rows]`).
    pub fn matrix(&self, name: &str, rows: i32, cols: i32) -> Result<QuantWeight> {
        let info = self.file.tensor(name).map_err(|_| Error::MissingTensor {
            name: name.to_owned(),
        })?;
        let expected = vec![cols as u64, rows as u64];
        if info.dims != expected {
            return Err(Error::TensorShape {
                name: name.to_owned(),
                found: info.dims.clone(),
                expected,
            });
        }
        Ok(QuantWeight::from_gguf(self.file, info, self.dtype)?)
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
        let info = self.file.tensor(name).map_err(|_| Error::MissingTensor {
            name: name.to_owned(),
        })?;
        if info.dims != [len as u64] {
            return Err(Error::TensorShape {
                name: name.to_owned(),
                found: info.dims.clone(),
                expected: vec![len as u64],
            });
        }
        let w = QuantWeight::from_gguf(self.file, info, self.dtype)?;
        let weight = w.as_dense().cloned().ok_or_else(|| Error::TensorShape {
            name: name.to_owned(),
            found: info.dims.clone(),
            expected: vec![len as u64],
        })?;
        Ok(RmsNorm { weight, eps })
    }
}
