//! Positional reads of a tensor's byte range. The store reads every routed expert through an
//! [`ExpertReader`]; [`FileReader`] is the real one, and tests put a reader of their own in
//! front of it to inject stalls and errors.
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Reads byte ranges of a model's files (`file` is the shard index).
pub trait ExpertReader: Send + Sync + std::fmt::Debug {
    /// Fills `buf` from `offset` of file `file`, through the page cache (prefill: many
    /// experts, the OS's read-ahead helps).
    fn read_cached(&self, file: usize, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Fills `buf` from `offset` of file `file` for an arena slot (decode). May bypass the
    /// page cache: the arena already keeps the bytes, a second copy would be waste.
    fn read_direct(&self, file: usize, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_cached(file, offset, buf)
    }
    /// Whether [`ExpertReader::read_direct`] bypasses the page cache.
    fn bypasses_cache(&self) -> bool {
        false
    }
}

/// Alignment of `O_DIRECT` reads: offsets, lengths and buffers in whole blocks.
const DIRECT_ALIGN: usize = 4096;

/// The model's files, each opened twice: buffered, and (where the file system allows it)
/// with `O_DIRECT` for slot reads.
#[derive(Debug)]
pub struct FileReader {
    files: Vec<(File, Option<File>)>,
}

impl FileReader {
    /// Opens each file; a file that cannot be opened is `(its path, the error)`.
    pub fn open(paths: &[&Path]) -> Result<FileReader, (PathBuf, io::Error)> {
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let buffered = File::open(path).map_err(|e| (path.to_path_buf(), e))?;
            files.push((buffered, open_direct(path)));
        }
        Ok(FileReader { files })
    }

    fn file(&self, file: usize) -> io::Result<&(File, Option<File>)> {
        self.files.get(file).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no shard {file} in this model"),
            )
        })
    }
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> Option<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_: &Path) -> Option<File> {
    None
}

impl ExpertReader for FileReader {
    /// The file system took `O_DIRECT` for every file.
    fn bypasses_cache(&self) -> bool {
        self.files.iter().all(|(_, d)| d.is_some())
    }

    fn read_cached(&self, file: usize, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file(file)?.0.read_exact_at(buf, offset)
    }

    fn read_direct(&self, file: usize, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let (buffered, direct) = self.file(file)?;
        let Some(direct) = direct else {
            return buffered.read_exact_at(buf, offset);
        };
        // the enclosing aligned range into an aligned buffer, then the bytes asked for
        let start = offset - offset % DIRECT_ALIGN as u64;
        let lead = (offset - start) as usize;
        let span = (lead + buf.len()).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let mut aligned = AlignedBuf::new(span);
        let got = match read_up_to(direct, aligned.as_mut(), start) {
            Ok(got) => got,
            // a file system that took O_DIRECT at open but refuses this read
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                return buffered.read_exact_at(buf, offset);
            }
            Err(e) => return Err(e),
        };
        if got < lead + buf.len() {
            // the end of the file is not block-aligned: the tail past the last whole block
            // comes back short; read what is missing through the buffered handle
            let have = got.saturating_sub(lead).min(buf.len());
            buf[..have].copy_from_slice(&aligned.as_mut()[lead..lead + have]);
            return buffered.read_exact_at(&mut buf[have..], offset + have as u64);
        }
        buf.copy_from_slice(&aligned.as_mut()[lead..lead + buf.len()]);
        Ok(())
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A zeroed byte buffer whose start is aligned to [`DIRECT_ALIGN`].
struct AlignedBuf {
    words: Vec<Block>,
    len: usize,
}

#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Block([u8; DIRECT_ALIGN]);

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        AlignedBuf {
            words: vec![Block([0; DIRECT_ALIGN]); len.div_ceil(DIRECT_ALIGN)],
            len,
        }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        let ptr = self.words.as_mut_ptr().cast::<u8>();
        // SAFETY: `words` holds `len.div_ceil(DIRECT_ALIGN)` blocks of `DIRECT_ALIGN` bytes,
        // so `len` bytes from its start are in bounds and initialized, and the borrow of
        // `self` keeps them alive and unaliased.
        unsafe { std::slice::from_raw_parts_mut(ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_and_cached_reads_give_the_same_bytes_at_any_offset() {
        let dir = std::env::temp_dir().join(format!("gmlx-stream-reader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("bytes.bin");
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        let reader = FileReader::open(&[path.as_path()]).expect("open");
        for (offset, len) in [(0, 10), (4095, 2), (4096, 4096), (123, 9000), (19_990, 10)] {
            let mut cached = vec![0; len];
            let mut direct = vec![0; len];
            reader.read_cached(0, offset, &mut cached).expect("cached");
            reader.read_direct(0, offset, &mut direct).expect("direct");
            let want = &bytes[offset as usize..offset as usize + len];
            assert_eq!(cached, want, "cached at {offset}");
            assert_eq!(direct, want, "direct at {offset}");
        }
        let mut past = vec![0; 20];
        assert!(reader.read_direct(0, 19_990, &mut past).is_err());
        assert!(reader.read_cached(1, 0, &mut past).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
