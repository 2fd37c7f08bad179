//! [`MappedRows`]: a tensor whose rows are looked up one at a time (token embeddings, routing
//! tables), read through a memory map of its own bytes instead of being copied into memory.
//!
//! Reads are synchronous: a lookup touches the mapped pages of the rows it asks for and decodes
//! them before it returns, so nothing is ever queued against the map, and dropping the table
//! (unloading the model) unmaps it at once. What a lookup returned is the caller's own copy.
use std::fs::File;
use std::sync::Arc;

use memmap2::{Mmap, MmapOptions};

use crate::error::{Error, Result};
use crate::file::GgufFile;
use crate::ggml_type::GgmlType;
use crate::reader::TensorInfo;

/// The rows of one tensor, mapped from its file. Clones share the map.
#[derive(Debug, Clone)]
pub struct MappedRows {
    name: String,
    ty: GgmlType,
    map: Arc<Mmap>,
    rows: u64,
    row_len: u64,
    row_bytes: usize,
}

impl MappedRows {
    /// Maps the bytes of `info` (a tensor of `file`) alone.
    pub fn open(file: &GgufFile, info: &TensorInfo) -> Result<MappedRows> {
        let (_, path, offset) = file.tensor_location(info).ok_or(Error::MissingTensor {
            name: info.name.clone(),
        })?;
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let row_len = info.row_len();
        let row_bytes = info
            .ggml_type
            .bytes_for(row_len)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or(Error::NotBlockMultiple {
                ty: info.ggml_type,
                n_elements: row_len,
                block_size: info.ggml_type.block_size() as u64,
            })?;
        let len = usize::try_from(info.n_bytes).map_err(|_| Error::ByteLength {
            ty: info.ggml_type,
            n_elements: info.n_elements(),
            expected: info.n_bytes,
            found: 0,
        })?;
        let handle = File::open(path).map_err(io)?;
        // SAFETY: read-only, as the file's own map (see `GgufFile`): GGUF models are immutable
        // inputs; every row read is bounds-checked against the mapped length.
        let map = unsafe { MmapOptions::new().offset(offset).len(len).map(&handle) }.map_err(io)?;
        Ok(MappedRows {
            name: info.name.clone(),
            ty: info.ggml_type,
            map: Arc::new(map),
            rows: info.n_rows(),
            row_len,
            row_bytes,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Values per row.
    pub fn row_len(&self) -> u64 {
        self.row_len
    }

    /// Rows `ids`, decoded to f32 one after the other (`ids.len() × row_len` values).
    pub fn dequantize_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let n = self.row_len as usize;
        let mut out = vec![0f32; ids.len() * n];
        for (dst, &id) in out.chunks_mut(n.max(1)).zip(ids) {
            let start = id as usize * self.row_bytes;
            let bytes = self
                .map
                .get(start..start + self.row_bytes)
                .filter(|_| u64::from(id) < self.rows)
                .ok_or_else(|| Error::OutOfRange {
                    key: self.name.clone(),
                    value: format!("row {id}"),
                    target: "the table's rows",
                })?;
            crate::codec::dequantize_into(self.ty, bytes, dst)?;
        }
        Ok(out)
    }

    /// Bytes mapped (not resident: pages come in as rows are read).
    pub fn mapped_bytes(&self) -> usize {
        self.map.len()
    }
}
