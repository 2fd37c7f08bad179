//! Faults in expert reads, injected through the store's reader (the only test double: the
//! arena, the feeders and the model are the real ones). A read that stalls past the deadline
//! or fails fails its step with an error that says which expert; later steps and requests
//! are unaffected; a short prefill after a stalled read, dropping the model, and exiting the
//! process with a read still stalled all return promptly.
mod common;

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{fixture, greedy_logits, load_through, try_greedy_logits};
use gmlx_gguf::GgufFile;
use gmlx_models::{load, LoadOptions};
use gmlx_stream::{ExpertReader, FileReader, StreamOptions, StreamedExperts};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// The next read blocks until released (or forever).
    Stall,
    /// The next read fails.
    Fail,
}

/// Which reads a fault waits for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Prefill reads, through the page cache.
    Cached,
    /// Arena slot reads (decode).
    Direct,
}

/// The real reader behind a switch that stalls or fails reads on demand.
#[derive(Debug)]
struct FaultyReader {
    inner: FileReader,
    fault: Mutex<(Fault, Kind)>,
    released: Mutex<bool>,
    wake: Condvar,
    reads: AtomicU64,
}

impl FaultyReader {
    fn new(path: &std::path::Path) -> Arc<FaultyReader> {
        let file = GgufFile::open(path).expect("open");
        Arc::new(FaultyReader {
            inner: FileReader::open(&file.paths()).expect("reader"),
            fault: Mutex::new((Fault::None, Kind::Cached)),
            released: Mutex::new(false),
            wake: Condvar::new(),
            reads: AtomicU64::new(0),
        })
    }

    /// `fault` on the next read of `kind`.
    fn set(&self, fault: Fault, kind: Kind) {
        *self.fault.lock().expect("lock") = (fault, kind);
    }

    fn release(&self) {
        *self.released.lock().expect("lock") = true;
        self.wake.notify_all();
    }

    fn fault(&self, kind: Kind) -> io::Result<()> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let fault = {
            let mut armed = self.fault.lock().expect("lock");
            if armed.1 == kind {
                std::mem::replace(&mut armed.0, Fault::None)
            } else {
                Fault::None
            }
        };
        match fault {
            Fault::None => Ok(()),
            Fault::Fail => Err(io::Error::other("injected I/O error")),
            Fault::Stall => {
                let mut released = self.released.lock().expect("lock");
                while !*released {
                    released = self.wake.wait(released).expect("wait");
                }
                Ok(())
            }
        }
    }
}

impl ExpertReader for FaultyReader {
    fn read_cached(&self, file: usize, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.fault(Kind::Cached)?;
        self.inner.read_cached(file, offset, buf)
    }

    fn read_direct(&self, file: usize, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.fault(Kind::Direct)?;
        self.inner.read_direct(file, offset, buf)
    }
}

const TIMEOUT: Duration = Duration::from_millis(300);

fn options() -> StreamOptions {
    StreamOptions {
        slots: Some(2),
        read_timeout: TIMEOUT,
        feeders: 2,
        flush_every_step: true, // every decode step reads
        ..StreamOptions::default()
    }
}

/// A model streamed through a fresh faulty reader.
fn faulty_model(path: &std::path::PathBuf) -> (gmlx_models::Loaded, Arc<FaultyReader>) {
    let reader = FaultyReader::new(path);
    let experts = Arc::new(StreamedExperts::with_reader(options(), reader.clone()));
    (load_through(path, &experts), reader)
}

#[test]
fn a_stalled_read_fails_its_step_and_later_requests_are_unaffected() {
    let (path, sequence) = fixture("qwen3moe", "Q8_0");
    let prompt = &sequence[..8];
    let resident = load(&path, &LoadOptions::default()).expect("load");
    let want = greedy_logits(&resident, prompt, 6);
    let short = greedy_logits(&resident, &prompt[..3], 1);
    for kind in [Kind::Cached, Kind::Direct] {
        let (model, reader) = faulty_model(&path);
        reader.set(Fault::Stall, kind); // a prefill read, or a decode step's
        let start = Instant::now();
        let err = match try_greedy_logits(&model, prompt, 3) {
            Ok(_) => panic!("{kind:?}: a stalled read must fail the step"),
            Err(e) => e.to_string(),
        };
        assert!(
            start.elapsed() < TIMEOUT * 20,
            "the step waited {:?}",
            start.elapsed()
        );
        assert!(err.contains("stalled") && err.contains("expert"), "{err}");
        // a short prefill chunk, and a whole later request, with the read still stuck
        let start = Instant::now();
        assert_eq!(
            try_greedy_logits(&model, &prompt[..3], 1).expect("a short prefill"),
            short
        );
        assert!(start.elapsed() < TIMEOUT * 20);
        assert_eq!(
            greedy_logits(&model, prompt, 6),
            want,
            "{kind:?}: a later request"
        );
        reader.release();
    }
}

#[test]
fn a_failed_read_names_its_expert_and_later_requests_are_unaffected() {
    let (path, sequence) = fixture("gpt-oss", "MXFP4_MOE");
    let prompt = &sequence[..8];
    let resident = load(&path, &LoadOptions::default()).expect("load");
    let want = greedy_logits(&resident, prompt, 6);
    let (model, reader) = faulty_model(&path);
    reader.set(Fault::Fail, Kind::Direct);
    let err = match try_greedy_logits(&model, prompt, 3) {
        Ok(_) => panic!("a failed read must fail the step"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("injected I/O error") && err.contains("ffn_") && err.contains("layer"),
        "{err}"
    );
    assert_eq!(greedy_logits(&model, prompt, 6), want);
}

#[test]
fn dropping_the_model_with_a_read_stalled_does_not_wait_for_it() {
    let (path, sequence) = fixture("qwen3moe", "Q8_0");
    let (model, reader) = faulty_model(&path);
    reader.set(Fault::Stall, Kind::Direct); // never released
    assert!(try_greedy_logits(&model, &sequence[..4], 2).is_err());
    let start = Instant::now();
    drop(model);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

/// The child half of [`exiting_with_a_read_stalled_does_not_hang`]: leaves a read stalled
/// forever and returns.
fn stall_and_return() {
    let (path, sequence) = fixture("qwen3moe", "Q8_0");
    let (model, reader) = faulty_model(&path);
    reader.set(Fault::Stall, Kind::Direct);
    assert!(try_greedy_logits(&model, &sequence[..4], 2).is_err());
    std::mem::forget(model); // not even dropped: the process ends with the read stuck
}

#[test]
fn exiting_with_a_read_stalled_does_not_hang() {
    if std::env::var_os("GMLX_STREAM_FAULT_CHILD").is_some() {
        stall_and_return();
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            "exiting_with_a_read_stalled_does_not_hang",
            "--nocapture",
        ])
        .env("GMLX_STREAM_FAULT_CHILD", "1")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the child");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "the child failed: {status}");
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the process did not exit with a read stalled");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
