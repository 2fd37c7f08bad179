//! [`GgufFile`]: an opened (possibly split) GGUF model, memory-mapped.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::ggml_type::GgmlType;
use crate::metadata::{MetaKey, Metadata};
use crate::reader::{parse_header, Header, Limits, TensorInfo};

/// Where a shard's bytes live.
#[derive(Debug)]
pub(crate) enum Backing {
    Map(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// One file of a model.
#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) path: PathBuf,
    pub(crate) map: Backing,
    pub(crate) header: Header,
}

impl Shard {
    pub(crate) fn open(path: &Path, limits: &Limits) -> Result<Shard> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only. As with every mmap-based reader, the file must not be
        // truncated or rewritten by another process while it is open; GGUF models are immutable
        // inputs, and every access is bounds-checked against the length seen at open time.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = parse_header(&map, limits).map_err(|e| e.in_file(path))?;
        Ok(Shard {
            path: path.to_path_buf(),
            map: Backing::Map(map),
            header,
        })
    }

    /// The bytes of `t` (validated at parse time to lie inside this map); empty if `t` does not
    /// belong to this shard and lies outside it.
    fn data(&self, t: &TensorInfo) -> &[u8] {
        let start = self.header.data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) => usize::try_from(s)
                .ok()
                .zip(usize::try_from(e).ok())
                .and_then(|(s, e)| self.map.get(s..e))
                .unwrap_or(&[]),
            _ => &[],
        }
    }
}

thread_local! {
    static OPENED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
static OPENED_IN_PROCESS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts one open of a file from disk, for this thread and for the process.
fn count_open() {
    OPENED.with(|n| n.set(n.get() + 1));
    OPENED_IN_PROCESS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Like [`opened_on_this_thread`], over every thread of the process (a server loads each
/// model on a thread of its own).
pub fn opened_in_this_process() -> usize {
    OPENED_IN_PROCESS.load(std::sync::atomic::Ordering::Relaxed)
}

/// How many times this thread has opened a GGUF file from disk (`open`, `open_with_limits`,
/// `open_single`): a check that a load reads each file's header once.
pub fn opened_on_this_thread() -> usize {
    OPENED.with(std::cell::Cell::get)
}

/// A GGUF model opened for reading: header, metadata and tensor table parsed and validated,
/// tensor bytes memory-mapped (never copied until asked for).
///
/// A split model (`NAME-00001-of-00003.gguf`) opened from any shard is one logical file: the
/// metadata is that of the first shard, the tensor table is the union of all shards'.
#[derive(Debug)]
pub struct GgufFile {
    pub(crate) shards: Vec<Shard>,
    pub(crate) tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
}

impl GgufFile {
    /// Open a GGUF file with default [`Limits`]; a shard of a split model opens the whole model.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        Self::open_with_limits(path, &Limits::default())
    }

    /// Open with explicit limits.
    pub fn open_with_limits(path: impl AsRef<Path>, limits: &Limits) -> Result<GgufFile> {
        count_open();
        let first = Shard::open(path.as_ref(), limits)?;
        let shards = crate::split::collect_shards(first, limits)?;
        Self::from_shards(shards)
    }

    /// A single-file GGUF held in memory (tests, fixtures, downloaded headers); `split.*` keys
    /// are ignored. Paths in errors and reports read `<memory>`.
    pub fn from_bytes(bytes: Vec<u8>, limits: &Limits) -> Result<GgufFile> {
        let path = PathBuf::from("<memory>");
        let header = parse_header(&bytes, limits).map_err(|e| e.in_file(&path))?;
        Self::from_shards(vec![Shard {
            path,
            map: Backing::Owned(bytes),
            header,
        }])
    }

    /// Open exactly one file, ignoring `split.*` keys (its tensor table only).
    pub fn open_single(path: impl AsRef<Path>) -> Result<GgufFile> {
        count_open();
        let shard = Shard::open(path.as_ref(), &Limits::default())?;
        Self::from_shards(vec![shard])
    }

    fn from_shards(shards: Vec<Shard>) -> Result<GgufFile> {
        let mut tensors = Vec::new();
        let mut index = HashMap::new();
        for (si, shard) in shards.iter().enumerate() {
            for t in &shard.header.tensors {
                let mut t = t.clone();
                t.shard = si;
                if index.insert(t.name.clone(), tensors.len()).is_some() {
                    return Err(Error::DuplicateTensor { name: t.name }.in_file(&shard.path));
                }
                tensors.push(t);
            }
        }
        Ok(GgufFile {
            shards,
            tensors,
            index,
        })
    }

    fn first(&self) -> &Shard {
        // from_shards is always given at least one shard.
        &self.shards[0]
    }

    /// Paths of the files, in shard order.
    pub fn paths(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    /// GGUF version (2 or 3) of the first shard.
    pub fn version(&self) -> u32 {
        self.first().header.version
    }

    /// `general.alignment` of the first shard (32 when absent).
    pub fn alignment(&self) -> u64 {
        self.first().header.alignment
    }

    /// File offset of the first shard's data section.
    pub fn data_offset(&self) -> u64 {
        self.first().header.data_offset
    }

    /// The metadata (of the first shard, for a split model).
    pub fn metadata(&self) -> &Metadata {
        &self.first().header.metadata
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.metadata().get_str("general.architecture")
    }

    /// The tensor table, in file (then shard) order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// One tensor's entry by name.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| Error::MissingTensor {
                name: name.to_string(),
            })
    }

    /// True when a tensor of this name exists.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The raw bytes of a tensor, borrowed from the memory map (no copy).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        match self.shards.get(info.shard) {
            Some(s) => s.data(info),
            None => &[],
        }
    }

    /// Where a tensor's bytes lie on disk, for positional reads outside the memory map: the
    /// index of its shard, that file's path, and the offset of its first byte in it.
    pub fn tensor_location(&self, info: &TensorInfo) -> Option<(usize, &Path, u64)> {
        let shard = self.shards.get(info.shard)?;
        let offset = shard.header.data_offset.checked_add(info.offset)?;
        Some((info.shard, shard.path.as_path(), offset))
    }

    /// The raw bytes of a tensor by name.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensor(name)?;
        Ok(self.shards[info.shard].data(info))
    }

    /// Dequantize a tensor to f32 (row-major, `info.n_elements()` values).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.tensor(name)?;
        crate::codec::dequantize(info.ggml_type, self.tensor_bytes(name)?, info.n_elements())
    }

    /// Repack a tensor into MLX's affine layout exactly (see [`crate::repack`]); fails with
    /// [`Error::NotAffine`] for codecs whose math does not map.
    pub fn repack_affine(&self, name: &str) -> Result<crate::repack::AffineWeights> {
        let info = self.tensor(name)?;
        crate::repack::repack_affine(info.ggml_type, self.tensor_bytes(name)?, &info.dims)
    }

    /// Number of tensors per ggml type, sorted by type id.
    pub fn type_counts(&self) -> Vec<(GgmlType, usize)> {
        let mut m: HashMap<GgmlType, usize> = HashMap::new();
        for t in &self.tensors {
            *m.entry(t.ggml_type).or_default() += 1;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by_key(|(t, _)| t.id());
        v
    }

    /// Fail with [`Error::UnsupportedCodec`] (naming the codec and how many tensors use it) if any
    /// tensor's type cannot be dequantized.
    pub fn check_codecs(&self) -> Result<()> {
        for (ty, n) in self.type_counts() {
            if !ty.can_dequantize() {
                return Err(Error::UnsupportedCodec { ty, tensors: n });
            }
        }
        Ok(())
    }

    /// Total bytes of tensor data.
    /// Bytes of the tensors stored with codec `ty`.
    pub fn codec_bytes(&self, ty: GgmlType) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.ggml_type == ty)
            .map(|t| t.n_bytes)
            .sum()
    }

    pub fn total_tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }

    /// Shorthand for `self.metadata().get_u32(key)`.
    pub fn get_u32<K: MetaKey + ?Sized>(&self, key: &K) -> Result<u32> {
        self.metadata().get_u32(key)
    }

    /// Shorthand for `self.metadata().get_u64(key)`.
    pub fn get_u64<K: MetaKey + ?Sized>(&self, key: &K) -> Result<u64> {
        self.metadata().get_u64(key)
    }

    /// Shorthand for `self.metadata().get_f32(key)`.
    pub fn get_f32<K: MetaKey + ?Sized>(&self, key: &K) -> Result<f32> {
        self.metadata().get_f32(key)
    }

    /// Shorthand for `self.metadata().get_str(key)`.
    pub fn get_str<K: MetaKey + ?Sized>(&self, key: &K) -> Result<&str> {
        self.metadata().get_str(key)
    }

    /// Shorthand for `self.metadata().get_bool(key)`.
    pub fn get_bool<K: MetaKey + ?Sized>(&self, key: &K) -> Result<bool> {
        self.metadata().get_bool(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_error_are_send_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<GgufFile>();
        check::<Error>();
    }
}
