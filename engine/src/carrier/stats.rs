//! Operation counters every carrier keeps, and the metrics they feed.
//!
//! Counts are what make fake durability visible: a test asserts "1 write, 0 barriers per
//! append", and Prometheus shows flushes per commit. Timings go only to histograms, never
//! into pass/fail tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Live counters of one carrier.
#[derive(Debug, Default)]
pub struct CarrierStats {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    written_bytes: AtomicU64,
    durable_writes: AtomicU64,
    barriers: AtomicU64,
    dir_syncs: AtomicU64,
}

/// A point-in-time copy of [`CarrierStats`]; subtract two to count what happened between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Carrier reads.
    pub reads: u64,
    /// Bytes those reads returned.
    pub read_bytes: u64,
    /// Every write, durable or not.
    pub writes: u64,
    /// Bytes written, by all writes.
    pub written_bytes: u64,
    /// Writes that were on stable storage when they returned (a subset of `writes`).
    pub durable_writes: u64,
    /// Barriers that reached the medium (`fdatasync` on files and devices).
    pub barriers: u64,
    /// `fsync`s of the carrier's directory (a created file carrier's name made durable).
    pub dir_syncs: u64,
}

impl std::ops::Sub for StatsSnapshot {
    type Output = StatsSnapshot;
    fn sub(self, rhs: StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            reads: self.reads - rhs.reads,
            read_bytes: self.read_bytes - rhs.read_bytes,
            writes: self.writes - rhs.writes,
            written_bytes: self.written_bytes - rhs.written_bytes,
            durable_writes: self.durable_writes - rhs.durable_writes,
            barriers: self.barriers - rhs.barriers,
            dir_syncs: self.dir_syncs - rhs.dir_syncs,
        }
    }
}

/// Metric names (documented in docs/METRICS.md), kept with the engine's other names.
pub use crate::metric_names::carrier as names;

impl CarrierStats {
    /// The counters now, to subtract from a later snapshot.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            reads: self.reads.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
            durable_writes: self.durable_writes.load(Ordering::Relaxed),
            barriers: self.barriers.load(Ordering::Relaxed),
            dir_syncs: self.dir_syncs.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn record_read(&self, len: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }

    /// Records a completed write; `durable` with the time it took to become durable.
    pub(crate) fn record_write(&self, len: usize, durable: Option<Duration>) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.written_bytes.fetch_add(len as u64, Ordering::Relaxed);
        metrics::counter!(names::WRITES_TOTAL).increment(1);
        metrics::counter!(names::WRITTEN_BYTES_TOTAL).increment(len as u64);
        if let Some(took) = durable {
            self.durable_writes.fetch_add(1, Ordering::Relaxed);
            metrics::histogram!(names::DURABLE_WRITE_DURATION).record(took.as_secs_f64());
        }
    }

    pub(crate) fn record_dir_sync(&self) {
        self.dir_syncs.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_barrier(&self, took: Duration) {
        self.barriers.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(names::FLUSHES_TOTAL).increment(1);
        metrics::histogram!(names::FLUSH_DURATION).record(took.as_secs_f64());
    }
}
