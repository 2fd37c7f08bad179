//! Split models: `NAME-00001-of-00003.gguf` ... with `split.no` (0-based), `split.count` and
//! `split.tensors.count` keys, as written by llama.cpp's `llama-gguf-split`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result, SplitProblem};
use crate::file::Shard;
use crate::names::Kv;
use crate::reader::Limits;

/// `(prefix, index (1-based), count)` parsed from `PREFIX-00001-of-00003.gguf`.
pub fn parse_split_name(path: &Path) -> Option<(PathBuf, u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    let (head, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = head.rsplit_once('-')?;
    if no.len() != 5 || count.len() != 5 || prefix.is_empty() {
        return None;
    }
    let no: u32 = no.parse().ok()?;
    let count: u32 = count.parse().ok()?;
    if no == 0 || no > count {
        return None;
    }
    Some((path.with_file_name(prefix), no, count))
}

/// The path of shard `no` (1-based) of `count` for a prefix such as `/models/Foo`.
pub fn split_path(prefix: &Path, no: u32, count: u32) -> PathBuf {
    let mut name = prefix
        .file_name()
        .map(|s| s.to_os_string())
        .unwrap_or_default();
    name.push(format!("-{no:05}-of-{count:05}.gguf"));
    prefix.with_file_name(name)
}

fn split_count(shard: &Shard) -> Result<Option<u64>> {
    shard
        .header
        .metadata
        .opt_u64(&Kv::SplitCount)
        .map_err(|e| e.in_file(&shard.path))
}

/// From one opened shard, open all of them in order; a file without `split.count > 1` is
/// returned alone.
pub(crate) fn collect_shards(first: Shard, limits: &Limits) -> Result<Vec<Shard>> {
    let count = match split_count(&first)? {
        None | Some(0) | Some(1) => return Ok(vec![first]),
        Some(c) => c,
    };
    let bad = |path: &Path, problem| Error::BadSplit {
        path: path.to_path_buf(),
        problem,
    };
    let Some((prefix, _, name_count)) = parse_split_name(&first.path) else {
        return Err(bad(&first.path, SplitProblem::NameNotSplit));
    };
    if u64::from(name_count) != count {
        return Err(bad(
            &first.path,
            SplitProblem::CountMismatch {
                expected: name_count.into(),
                found: count,
            },
        ));
    }
    let paths: Vec<PathBuf> = (1..=name_count)
        .map(|i| split_path(&prefix, i, name_count))
        .collect();
    let missing: Vec<PathBuf> = paths
        .iter()
        .filter(|p| **p != first.path && !p.is_file())
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(Error::MissingShards { missing });
    }
    let mut first = Some(first);
    let mut shards = Vec::with_capacity(paths.len());
    for (i, p) in paths.iter().enumerate() {
        let shard = match first.take_if(|f| f.path == *p) {
            Some(f) => f,
            None => Shard::open(p, limits)?,
        };
        let md = &shard.header.metadata;
        let no = md.get_u64(&Kv::SplitNo).map_err(|e| e.in_file(p))?;
        if no != i as u64 {
            return Err(bad(
                p,
                SplitProblem::IndexMismatch {
                    expected: i as u64,
                    found: no,
                },
            ));
        }
        let c = split_count(&shard)?.unwrap_or(0);
        if c != count {
            return Err(bad(
                p,
                SplitProblem::CountMismatch {
                    expected: count,
                    found: c,
                },
            ));
        }
        shards.push(shard);
    }
    let total: u64 = shards.iter().map(|s| s.header.tensors.len() as u64).sum();
    let declared = shards[0]
        .header
        .metadata
        .opt_u64(&Kv::SplitTensorsCount)
        .map_err(|e| e.in_file(&paths[0]))?;
    if let Some(d) = declared {
        if d != total {
            return Err(bad(
                &paths[0],
                SplitProblem::TensorCountMismatch {
                    expected: d,
                    found: total,
                },
            ));
        }
    }
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let p = Path::new("/m/Foo-Q4-00002-of-00003.gguf");
        let (prefix, no, count) = parse_split_name(p).expect("split name");
        assert_eq!(prefix, Path::new("/m/Foo-Q4"));
        assert_eq!((no, count), (2, 3));
        assert_eq!(
            split_path(&prefix, 3, 3),
            Path::new("/m/Foo-Q4-00003-of-00003.gguf")
        );
        assert!(parse_split_name(Path::new("/m/Foo.gguf")).is_none());
        assert!(parse_split_name(Path::new("/m/Foo-00004-of-00003.gguf")).is_none());
    }
}
