//! Feeder threads: read and decode missing experts off the model's thread. A step hands them
//! its reads and waits for all of them up to a deadline; a read that has not come back by then
//! fails the step with [`Error::Stalled`] instead of being waited for. Its thread may stay
//! blocked in the read: a fresh thread takes its place, and its late result is recognised by
//! its job id and dropped. Feeder threads are never joined, so dropping the store (unloading
//! the model) or exiting the process never waits for a stalled read.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A read (and decode) to run on a feeder thread.
pub type Task<T> = Box<dyn FnOnce() -> Result<T> + Send>;

struct Job<T> {
    id: u64,
    task: Task<T>,
}

/// Counters of the feeders, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeederStats {
    /// Reads that came back in time.
    pub reads: u64,
    /// Reads that failed with an error.
    pub errors: u64,
    /// Reads given up at their deadline.
    pub stalls: u64,
    /// Threads started, replacements for stalled ones included.
    pub threads: u64,
}

/// A pool of feeder threads producing `T`s (decoded expert matrices). One fetch runs at a
/// time (the model's thread is the only caller).
pub struct Feeders<T: Send + 'static> {
    jobs: Mutex<Sender<Job<T>>>,
    queue: Arc<Mutex<Receiver<Job<T>>>>,
    done_tx: Mutex<Sender<(u64, Result<T>)>>,
    done: Mutex<Receiver<(u64, Result<T>)>>,
    next_id: AtomicU64,
    /// Jobs below this id belong to a fetch that gave up: feeders skip them.
    floor: Arc<AtomicU64>,
    /// Most threads alive at once (replacements included).
    max_threads: u64,
    stats: Mutex<FeederStats>,
}

/// A lock whose holder panicked is still usable here: every critical section leaves the
/// data consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<T: Send + 'static> std::fmt::Debug for Feeders<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feeders")
            .field("stats", &self.stats())
            .finish()
    }
}

impl<T: Send + 'static> Feeders<T> {
    /// `threads` feeder threads (at least one).
    pub fn new(threads: usize) -> Result<Feeders<T>> {
        let (jobs, queue) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let feeders = Feeders {
            jobs: Mutex::new(jobs),
            queue: Arc::new(Mutex::new(queue)),
            done_tx: Mutex::new(done_tx),
            done: Mutex::new(done),
            next_id: AtomicU64::new(0),
            floor: Arc::new(AtomicU64::new(0)),
            max_threads: 4 * threads.max(1) as u64,
            stats: Mutex::new(FeederStats::default()),
        };
        for _ in 0..threads.max(1) {
            feeders.spawn()?;
        }
        Ok(feeders)
    }

    pub fn stats(&self) -> FeederStats {
        *lock(&self.stats)
    }

    fn update(&self, f: impl FnOnce(&mut FeederStats)) {
        f(&mut lock(&self.stats));
    }

    fn spawn(&self) -> Result<()> {
        let queue = Arc::clone(&self.queue);
        let floor = Arc::clone(&self.floor);
        let done = lock(&self.done_tx).clone();
        std::thread::Builder::new()
            .name("gmlx-feeder".to_owned())
            .spawn(move || loop {
                let job = match queue.lock() {
                    Ok(q) => q.recv(),
                    Err(_) => return,
                };
                let Ok(job) = job else {
                    return; // the pool was dropped
                };
                if job.id < floor.load(Ordering::Relaxed) {
                    continue; // its fetch gave up: no one waits for it
                }
                let result = (job.task)();
                if done.send((job.id, result)).is_err() {
                    return;
                }
            })
            .map_err(|source| Error::Spawn { source })?;
        self.update(|s| s.threads += 1);
        Ok(())
    }

    /// Tells the feeders to skip the queued jobs of a fetch that ended (ids below `end`).
    fn give_up(&self, end: u64) {
        self.floor.fetch_max(end, Ordering::Relaxed);
    }

    /// Runs `tasks` on the feeders and returns their results in order, or the first error;
    /// a task not done `timeout` after the call fails the whole fetch with the error
    /// `stalled(i)` makes for task `i`.
    pub fn fetch(
        &self,
        tasks: Vec<Task<T>>,
        timeout: Duration,
        stalled: impl Fn(usize) -> Error,
    ) -> Result<Vec<T>> {
        let now = Instant::now();
        let deadline = now
            .checked_add(timeout)
            .unwrap_or(now + Duration::from_secs(86_400 * 365));
        let done = lock(&self.done);
        let n = tasks.len();
        let first = self.next_id.fetch_add(n as u64, Ordering::Relaxed);
        {
            let jobs = lock(&self.jobs);
            for (i, task) in tasks.into_iter().enumerate() {
                let job = Job {
                    id: first + i as u64,
                    task,
                };
                jobs.send(job).map_err(|_| Error::FeedersGone)?;
            }
        }
        let mut results: Vec<Option<T>> = (0..n).map(|_| None).collect();
        let mut left = n;
        while left > 0 {
            let wait = deadline.saturating_duration_since(Instant::now());
            match done.recv_timeout(wait) {
                Ok((id, result)) => {
                    if id < first {
                        continue; // a read an earlier fetch gave up on
                    }
                    let i = (id - first) as usize;
                    match result {
                        Ok(v) => {
                            self.update(|s| s.reads += 1);
                            results[i] = Some(v);
                            left -= 1;
                        }
                        Err(e) => {
                            self.update(|s| s.errors += 1);
                            self.give_up(first + n as u64);
                            return Err(e);
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.give_up(first + n as u64);
                    let stuck: Vec<usize> = (0..n).filter(|&i| results[i].is_none()).collect();
                    self.update(|s| s.stalls += stuck.len() as u64);
                    // the stuck reads hold their threads: start others in their place
                    for _ in &stuck {
                        if self.stats().threads < self.max_threads {
                            self.spawn()?;
                        }
                    }
                    return Err(stalled(stuck[0]));
                }
                Err(RecvTimeoutError::Disconnected) => return Err(Error::FeedersGone),
            }
        }
        Ok(results.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stalled(i: usize) -> Error {
        Error::Stalled {
            tensor: "t".to_owned(),
            expert: i as u32,
            timeout_ms: 50,
        }
    }

    #[test]
    fn results_come_back_in_order() {
        let f = Feeders::<usize>::new(3).expect("feeders");
        let tasks: Vec<Task<usize>> = (0..10)
            .map(|i| -> Task<usize> {
                Box::new(move || {
                    std::thread::sleep(Duration::from_millis((10 - i) as u64));
                    Ok(i * i)
                })
            })
            .collect();
        let got = f
            .fetch(tasks, Duration::from_secs(10), stalled)
            .expect("fetch");
        assert_eq!(got, (0..10).map(|i| i * i).collect::<Vec<_>>());
        assert_eq!(f.stats().reads, 10);
    }

    #[test]
    fn a_stalled_read_fails_the_fetch_and_later_fetches_still_work() {
        let f = Feeders::<u32>::new(1).expect("feeders");
        let (release, wait) = mpsc::channel::<()>();
        let stuck: Task<u32> = Box::new(move || {
            let _ = wait.recv(); // blocks until the test lets it go
            Ok(1)
        });
        let start = Instant::now();
        let err = f
            .fetch(vec![stuck], Duration::from_millis(50), stalled)
            .expect_err("stalls");
        assert!(matches!(err, Error::Stalled { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
        // the only thread is still blocked: a replacement serves the next fetch
        let ok: Task<u32> = Box::new(|| Ok(7));
        assert_eq!(
            f.fetch(vec![ok], Duration::from_secs(10), stalled)
                .expect("fetch"),
            vec![7]
        );
        // the stalled read's late result is not taken for a later one
        release.send(()).expect("release");
        std::thread::sleep(Duration::from_millis(20));
        let ok: Task<u32> = Box::new(|| Ok(9));
        assert_eq!(
            f.fetch(vec![ok], Duration::from_secs(10), stalled)
                .expect("fetch"),
            vec![9]
        );
        let s = f.stats();
        assert_eq!((s.stalls, s.reads, s.threads), (1, 2, 2));
    }

    #[test]
    fn the_queued_reads_of_a_fetch_that_gave_up_are_skipped() {
        let f = Feeders::<u32>::new(1).expect("feeders");
        let (release, wait) = mpsc::channel::<()>();
        let mut tasks: Vec<Task<u32>> = vec![Box::new(move || {
            let _ = wait.recv();
            Ok(0)
        })];
        for i in 1..20 {
            tasks.push(Box::new(move || {
                std::thread::sleep(Duration::from_millis(200));
                Ok(i)
            }));
        }
        assert!(f.fetch(tasks, Duration::from_millis(50), stalled).is_err());
        // 19 queued reads of 200 ms would take the next fetch past its deadline
        let ok: Task<u32> = Box::new(|| Ok(7));
        let start = Instant::now();
        assert_eq!(
            f.fetch(vec![ok], Duration::from_secs(2), stalled)
                .expect("fetch"),
            vec![7]
        );
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        release.send(()).expect("release");
    }

    #[test]
    fn an_error_fails_the_fetch() {
        let f = Feeders::<u32>::new(2).expect("feeders");
        let bad: Task<u32> = Box::new(|| Err(Error::FeedersGone));
        let good: Task<u32> = Box::new(|| Ok(1));
        assert!(f
            .fetch(vec![good, bad], Duration::from_secs(10), stalled)
            .is_err());
        assert_eq!(f.stats().errors, 1);
    }

    #[test]
    fn dropping_the_pool_with_a_read_stalled_does_not_wait_for_it() {
        let f = Feeders::<u32>::new(1).expect("feeders");
        let (_keep, wait) = mpsc::channel::<()>();
        let stuck: Task<u32> = Box::new(move || {
            let _ = wait.recv();
            Ok(1)
        });
        let _ = f.fetch(vec![stuck], Duration::from_millis(20), stalled);
        let start = Instant::now();
        drop(f);
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
