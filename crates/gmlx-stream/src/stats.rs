//! Counters of a streamed model, and the report printed from them.
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use crate::arena::ArenaStats;
use crate::feeder::FeederStats;

/// Counters every layer's store adds to.
#[derive(Debug, Clone, Default)]
pub struct StreamStats {
    /// Per MoE layer, its arena's counters.
    pub layers: BTreeMap<usize, ArenaStats>,
    /// Steps (layer by layer) whose experts were read into stacks of their own: prefill, or
    /// more experts than slots.
    pub transient_steps: u64,
    /// Expert bytes read from the files.
    pub bytes_read: u64,
    /// Steps failed by a read that did not come back in time.
    pub stalled_steps: u64,
    /// Steps failed by a read error.
    pub failed_steps: u64,
}

pub(crate) fn lock(m: &Mutex<StreamStats>) -> MutexGuard<'_, StreamStats> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a streamed model did, for `gmlx run` to print at exit.
#[derive(Debug, Clone, Default)]
pub struct StreamReport {
    pub stats: StreamStats,
    pub feeders: FeederStats,
    /// Slots per MoE layer.
    pub slots: usize,
    /// Experts per MoE layer.
    pub experts: usize,
    /// Bytes of all the arenas' slots.
    pub arena_bytes: u64,
    /// Whether slot reads bypass the page cache.
    pub direct_reads: bool,
}

impl StreamReport {
    /// Hits over hits and misses in every layer's arena (`None` before any decode step).
    pub fn hit_rate(&self) -> Option<f64> {
        let (hits, misses) = self
            .stats
            .layers
            .values()
            .fold((0, 0), |(h, m), s| (h + s.hits, m + s.misses));
        (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64)
    }

    pub fn evictions(&self) -> u64 {
        self.stats.layers.values().map(|s| s.evictions).sum()
    }
}

impl fmt::Display for StreamReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        write!(
            f,
            "expert arena: {} of {} experts per layer in {:.1} MiB; ",
            self.slots,
            self.experts,
            mib(self.arena_bytes)
        )?;
        match self.hit_rate() {
            Some(rate) => write!(f, "hit rate {:.1}%", 100.0 * rate)?,
            None => write!(f, "no decode step")?,
        }
        write!(
            f,
            ", {} evictions, {} steps outside the arena, {:.1} MiB read ({}), {} stalled, {} failed",
            self.evictions(),
            self.stats.transient_steps,
            mib(self.stats.bytes_read),
            if self.direct_reads { "direct" } else { "page cache" },
            self.stats.stalled_steps,
            self.stats.failed_steps
        )
    }
}
