//! `QuantWeight`: a GGUF tensor kept in a form MLX multiplies directly.
//!
//! Codecs whose math maps exactly onto MLX's affine quantization (Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, Q4_K, Q5_K; see `gmlx_gguf::repack`) stay quantized: a 4-bit file stays about 4 bits
//! per weight in memory. Every other codec is dequantized at load to the activation dtype.
use gmlx_gguf::{GgmlType, GgufFile, TensorInfo};
use mlx_rs::{ops, Array, Dtype};

use crate::error::{Error, Result};

/// How a [`QuantWeight`] is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// MLX affine: packed `u32` codes with one scale and bias per group.
    Affine { bits: i32, group_size: i32 },
    /// A plain float array in the activation dtype.
    Dense,
}

/// A weight matrix `[rows, cols]` (GGUF `dims = [cols, rows]`), or a vector.
#[derive(Debug, Clone)]
pub struct QuantWeight {
    name: String,
    codec: GgmlType,
    storage: Storage,
    /// Affine: packed codes `[rows, cols * bits / 32]` (u32). Dense: `[rows, cols]` or `[cols]`.
    data: Array,
    scales: Option<Array>,
    biases: Option<Array>,
    rows: i32,
    cols: i32,
}

fn dim(name: &str, value: u64) -> Result<i32> {
    i32::try_from(value).map_err(|_| Error::TensorTooLarge {
        tensor: name.to_owned(),
    })
}

impl QuantWeight {
    /// Builds the weight straight from the file's memory map. `dtype` is the activation dtype:
    /// dense weights are stored in it; affine scales and biases stay float32 when it is
    /// float32 (exact), else take it.
    pub fn from_gguf(file: &GgufFile, info: &TensorInfo, dtype: Dtype) -> Result<QuantWeight> {
        let name = info.name.clone();
        let cols = dim(&name, info.row_len())?;
        let rows = dim(&name, info.n_rows())?;
        let bytes = file.tensor_data(info);
        let gguf_err = |source| Error::Gguf {
            tensor: info.name.clone(),
            source,
        };
        if info.dims.len() >= 2 && gmlx_gguf::repack::affine_layout(info.ggml_type).is_ok() {
            let affine =
                gmlx_gguf::repack_affine(info.ggml_type, bytes, &info.dims).map_err(gguf_err)?;
            let bits = affine.layout.bits as i32;
            let group_size = affine.layout.group_size as i32;
            let words = cols * bits / 32;
            let groups = cols / group_size;
            let side_dtype = if dtype == Dtype::Float32 {
                Dtype::Float32
            } else {
                dtype
            };
            let scales = Array::from_slice(&affine.scales, &[rows, groups]).as_dtype(side_dtype)?;
            let biases = Array::from_slice(&affine.biases, &[rows, groups]).as_dtype(side_dtype)?;
            return Ok(QuantWeight {
                name,
                codec: info.ggml_type,
                storage: Storage::Affine { bits, group_size },
                data: Array::from_slice(&affine.q, &[rows, words]),
                scales: Some(scales),
                biases: Some(biases),
                rows,
                cols,
            });
        }
        let values =
            gmlx_gguf::dequantize(info.ggml_type, bytes, info.n_elements()).map_err(gguf_err)?;
        let shape: Vec<i32> = if info.dims.len() >= 2 {
            vec![rows, cols]
        } else {
            vec![cols]
        };
        let data = Array::from_slice(&values, &shape).as_dtype(dtype)?;
        Ok(QuantWeight {
            name,
            codec: info.ggml_type,
            storage: Storage::Dense,
            data,
            scales: None,
            biases: None,
            rows,
            cols,
        })
    }

    /// A dense weight from an array `[rows, cols]` (or `[cols]`).
    pub fn dense(name: impl Into<String>, data: Array) -> QuantWeight {
        let shape = data.shape().to_vec();
        let (rows, cols) = match shape.as_slice() {
            [r, c] => (*r, *c),
            [c] => (1, *c),
            _ => (
                shape.iter().take(shape.len() - 1).product(),
                *shape.last().unwrap_or(&1),
            ),
        };
        QuantWeight {
            name: name.into(),
            codec: GgmlType::F32,
            storage: Storage::Dense,
            data,
            scales: None,
            biases: None,
            rows,
            cols,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The codec of the file's tensor.
    pub fn codec(&self) -> GgmlType {
        self.codec
    }

    pub fn storage(&self) -> Storage {
        self.storage
    }

    /// `(rows, cols)`: output and input features of a matrix.
    pub fn shape(&self) -> (i32, i32) {
        (self.rows, self.cols)
    }

    /// The dense array (vectors such as norm weights, and dense matrices).
    pub fn as_dense(&self) -> Option<&Array> {
        (self.storage == Storage::Dense).then_some(&self.data)
    }

    /// Bytes this weight holds in memory.
    pub fn nbytes(&self) -> usize {
        self.data.nbytes()
            + self.scales.as_ref().map_or(0, Array::nbytes)
            + self.biases.as_ref().map_or(0, Array::nbytes)
    }

    /// The arrays to evaluate to make the weight resident.
    pub fn arrays(&self) -> Vec<&Array> {
        [Some(&self.data), self.scales.as_ref(), self.biases.as_ref()]
            .into_iter()
            .flatten()
            .collect()
    }

    /// `x @ W^T`: `x [..., cols]` to `[..., rows]`.
    pub fn matmul(&self, x: &Array) -> Result<Array> {
        match (self.storage, &self.scales, &self.biases) {
            (Storage::Affine { bits, group_size }, Some(s), Some(b)) => Ok(ops::quantized_matmul(
                x, &self.data, s, b, true, group_size, bits,
            )?),
            _ => Ok(x.matmul(&self.data.t())?),
        }
    }

    /// Rows `ids` of the matrix, dequantized: the embedding lookup. Only the gathered rows are
    /// ever dequantized, never the whole table.
    pub fn rows(&self, ids: &Array) -> Result<Array> {
        let take = |a: &Array| a.take_axis(ids, 0);
        match (self.storage, &self.scales, &self.biases) {
            (Storage::Affine { bits, group_size }, Some(s), Some(b)) => {
                let biases = take(b)?;
                Ok(ops::dequantize(
                    take(&self.data)?,
                    take(s)?,
                    &biases,
                    group_size,
                    bits,
                )?)
            }
            _ => Ok(take(&self.data)?),
        }
    }

    /// The whole matrix as floats (tests and reference paths only).
    pub fn dequantized(&self) -> Result<Array> {
        match (self.storage, &self.scales, &self.biases) {
            (Storage::Affine { bits, group_size }, Some(s), Some(b)) => {
                Ok(ops::dequantize(&self.data, s, b, group_size, bits)?)
            }
            _ => Ok(self.data.clone()),
        }
    }
}
