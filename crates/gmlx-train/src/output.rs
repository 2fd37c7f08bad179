//! Where the adapter goes, checked before training and written atomically after it.
use std::path::{Path, PathBuf};

use gmlx_models::adapter::Adapter;

use crate::error::{Error, Result};

/// The file name used when `--adapter-out` names a folder.
pub const DEFAULT_FILE_NAME: &str = "adapter.gguf";

/// A resolved `--adapter-out`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPlan {
    /// The adapter file.
    pub file: PathBuf,
    /// A folder to create just before writing (the argument ended in `/` and does not exist).
    pub create_dir: Option<PathBuf>,
}

fn refuse(path: &Path, reason: impl Into<String>) -> Error {
    Error::Output {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

impl OutputPlan {
    /// Resolves `path`: an existing folder, or a path ending in `/`, gets `adapter.gguf`
    /// inside it. Checks, by creating and removing a probe file, that the destination folder
    /// accepts files. Creates nothing that stays.
    pub fn resolve(path: &Path) -> Result<OutputPlan> {
        let text = path.as_os_str().to_string_lossy();
        let names_folder = text.ends_with('/') || text.ends_with(std::path::MAIN_SEPARATOR);
        let plan = if path.is_dir() {
            OutputPlan {
                file: path.join(DEFAULT_FILE_NAME),
                create_dir: None,
            }
        } else if names_folder
            && Path::new(text.trim_end_matches(['/', std::path::MAIN_SEPARATOR])).exists()
        {
            // (a path with a trailing slash does not `exist` when it names a file)
            return Err(refuse(path, "exists and is not a folder"));
        } else if names_folder {
            OutputPlan {
                file: path.join(DEFAULT_FILE_NAME),
                create_dir: Some(path.to_owned()),
            }
        } else {
            OutputPlan {
                file: path.to_owned(),
                create_dir: None,
            }
        };
        if plan.file.is_dir() {
            return Err(refuse(&plan.file, "is a folder"));
        }
        let folder = match &plan.create_dir {
            Some(dir) => dir.parent().unwrap_or(Path::new(".")).to_owned(),
            None => plan.file.parent().unwrap_or(Path::new(".")).to_owned(),
        };
        let folder = if folder.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            folder
        };
        if !folder.is_dir() {
            return Err(refuse(
                path,
                format!("folder {} does not exist", folder.display()),
            ));
        }
        let probe = folder.join(format!(".gmlx-train-probe-{}", std::process::id()));
        std::fs::write(&probe, b"")
            .map_err(|e| refuse(path, format!("cannot write in {}: {e}", folder.display())))?;
        let _ = std::fs::remove_file(&probe);
        Ok(plan)
    }

    /// Writes `adapter` to a temporary file beside the target, then renames it into place.
    /// On failure, the temporary file and any folder created here are removed.
    pub fn write(&self, adapter: &Adapter) -> Result<()> {
        let mut created = None;
        if let Some(dir) = &self.create_dir {
            if !dir.is_dir() {
                std::fs::create_dir(dir).map_err(|source| Error::Io {
                    path: dir.clone(),
                    source,
                })?;
                created = Some(dir.clone());
            }
        }
        let result = self.write_file(adapter);
        if result.is_err() {
            if let Some(dir) = created {
                let _ = std::fs::remove_dir(dir);
            }
        }
        result
    }

    fn write_file(&self, adapter: &Adapter) -> Result<()> {
        let name = self
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| DEFAULT_FILE_NAME.to_owned());
        let tmp = self
            .file
            .with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| Error::Io { path, source }
        };
        let result = (|| -> Result<()> {
            let writer = adapter
                .to_writer()
                .map_err(|e| refuse(&self.file, e.to_string()))?;
            let f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
            let mut w = std::io::BufWriter::new(f);
            writer.write(&mut w).map_err(io(&tmp))?;
            let f = w.into_inner().map_err(|e| Error::Io {
                path: tmp.clone(),
                source: e.into_error(),
            })?;
            f.sync_all().map_err(io(&tmp))?;
            std::fs::rename(&tmp, &self.file).map_err(io(&self.file))?;
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_get_adapter_gguf_and_bad_places_are_refused() {
        let root = std::env::temp_dir().join(format!("gmlx-train-out-{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("dir");
        let plan = OutputPlan::resolve(&root).expect("existing folder");
        assert_eq!(plan.file, root.join(DEFAULT_FILE_NAME));
        let new_dir = PathBuf::from(format!("{}/new/", root.display()));
        let plan = OutputPlan::resolve(&new_dir).expect("new folder");
        assert_eq!(plan.create_dir.as_deref(), Some(new_dir.as_path()));
        assert!(!new_dir.exists(), "resolve creates nothing");
        assert!(OutputPlan::resolve(&root.join("missing/a.gguf")).is_err());
        let adapter = Adapter {
            arch: "llama".into(),
            alpha: 8.0,
            pairs: vec![],
        };
        plan.write(&adapter).expect("write");
        assert!(new_dir.join(DEFAULT_FILE_NAME).is_file());
        let leftovers: Vec<_> = std::fs::read_dir(&new_dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        std::fs::remove_dir_all(&root).expect("rm");
    }
}
