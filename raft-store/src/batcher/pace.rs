//! Pacing of a batcher's proposals by the disk under the log: how many entries may be in
//! flight, and whether a batch waits for the callers that were just answered.
//!
//! A closed loop (each caller sends its next request once its last one is answered) meets
//! two regimes, and the disk's latency tells them apart:
//! - **The commit is bound by the disk** (a spinning disk: the log's durable write is most of
//!   the commit time). A second entry in flight only queues its durable write behind the
//!   first one's, and the callers split into cohorts that alternate, each waiting two
//!   commits. So one entry is in flight, and a batch, once the slot is free, waits for the
//!   callers answered and not yet back ([`Pace::returning`]: they come back over a fraction
//!   of a millisecond), up to half the recent commit time (at most [`MAX_LINGER`]); callers
//!   that do not come back within that are no longer waited for. Every caller then rides in
//!   one entry per commit: one durable write per round on each member.
//! - **The commit is bound by work that overlaps** (CPU, network: a fast disk or `memory:`).
//!   Up to `max_in_flight` entries are in flight and a batch goes as soon as a slot is free,
//!   so the leader appends and replicates the next entry while earlier ones commit.
//!
//! The regime is [`DISK_BOUND_ABOVE`]: the log's durable write time ([`DiskLatency`], the
//! writer's moving average) over the commit time (this batcher's moving average of
//! `client_write`), with hysteresis ([`PIPELINED_BELOW`]). Without a [`DiskLatency`] (a
//! batcher started with `Batcher::start`), the window is `max_in_flight` and nothing waits.
//!
//! Invariants: at most [`Pace::window`] slots are held (1 or `max`); pacing only delays when
//! a batch is proposed: every request is still proposed once and answered once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::log::DiskLatency;

/// The longest a batch waits for returning callers.
pub(crate) const MAX_LINGER: Duration = Duration::from_millis(8);
/// The commit counts as bound by the disk once the durable write exceeds this share of it.
pub(crate) const DISK_BOUND_ABOVE: f64 = 0.6;
/// ... and as pipelined again once it falls below this share.
pub(crate) const PIPELINED_BELOW: f64 = 0.4;

/// The pacing state of one batcher.
pub(crate) struct Pace {
    max: usize,
    disk: Option<DiskLatency>,
    state: Mutex<State>,
    freed: Notify,
    /// Callers answered whose next request has not arrived.
    returning: AtomicUsize,
}

struct State {
    in_flight: usize,
    /// Seconds: moving average (1/8) of the commit time.
    commit: f64,
    disk_bound: bool,
}

/// A held slot; dropping it frees it.
pub(crate) struct Slot(Arc<Pace>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.lock().in_flight -= 1;
        self.0.freed.notify_one();
    }
}

impl Pace {
    /// Pacing with at most `max` entries in flight (at least 1), by `disk` when given.
    pub(crate) fn new(max: usize, disk: Option<DiskLatency>) -> Arc<Pace> {
        metrics::gauge!(crate::metrics::PROPOSALS_WINDOW).set(max.max(1) as f64);
        Arc::new(Pace {
            max: max.max(1),
            disk,
            state: Mutex::new(State { in_flight: 0, commit: 0.0, disk_bound: false }),
            freed: Notify::new(),
            returning: AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn window_of(&self, s: &State) -> usize {
        if s.disk_bound { 1 } else { self.max }
    }

    /// Entries that may be in flight now.
    #[cfg(test)]
    pub(crate) fn window(&self) -> usize {
        self.window_of(&self.lock())
    }

    /// Waits for a free slot of the window.
    pub(crate) async fn slot(self: &Arc<Self>) -> Slot {
        loop {
            let freed = self.freed.notified();
            {
                let mut s = self.lock();
                if s.in_flight < self.window_of(&s) {
                    s.in_flight += 1;
                    return Slot(Arc::clone(self));
                }
            }
            freed.await;
        }
    }

    /// A request arrived (from a caller that may have been answered before).
    pub(crate) fn arrived(&self) {
        let _ =
            self.returning.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Answered callers not back yet, counted while the commit is bound by the disk (0
    /// otherwise: nothing waits for them).
    pub(crate) fn returning(&self) -> usize {
        self.returning.load(Ordering::Acquire)
    }

    /// The callers still counted as returning did not come back in time: stop waiting for
    /// them.
    pub(crate) fn gave_up(&self) {
        self.returning.store(0, Ordering::Release);
    }

    /// How long a batch may wait for returning callers: half the commit time, at most
    /// [`MAX_LINGER`].
    pub(crate) fn linger(&self) -> Duration {
        Duration::from_secs_f64(self.lock().commit / 2.0).min(MAX_LINGER)
    }

    /// A batch of `callers` committed after `took`: they are answered (and may come back),
    /// and the regime is judged again.
    pub(crate) fn committed(&self, took: Duration, callers: usize) {
        let t = took.as_secs_f64();
        let mut s = self.lock();
        s.commit = if s.commit == 0.0 { t } else { s.commit + (t - s.commit) / 8.0 };
        if let Some(disk) = self.disk.as_ref().and_then(DiskLatency::get) {
            let share = disk.as_secs_f64() / s.commit;
            let disk_bound =
                if s.disk_bound { share >= PIPELINED_BELOW } else { share > DISK_BOUND_ABOVE };
            if disk_bound != s.disk_bound {
                s.disk_bound = disk_bound;
                tracing::debug!(disk_bound, ?disk, commit = s.commit, "proposal pacing");
                metrics::gauge!(crate::metrics::PROPOSALS_WINDOW).set(self.window_of(&s) as f64);
            }
        }
        if s.disk_bound {
            // Counted before the answers go out (the caller holds no lock then): a caller
            // may be back at once.
            self.returning.fetch_add(callers, Ordering::AcqRel);
        } else {
            self.returning.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_window_follows_the_share_of_the_disk_in_the_commit() {
        let disk = DiskLatency::new();
        let pace = Pace::new(2, Some(disk.clone()));
        // Nothing measured yet: pipelined.
        pace.committed(10 * MS, 1);
        assert_eq!(pace.window(), 2);
        // A spinning disk: 8 ms of a 10 ms commit.
        disk.record(8 * MS);
        pace.committed(10 * MS, 1);
        assert_eq!(pace.window(), 1);
        // Hysteresis: half the commit keeps it bound by the disk.
        for _ in 0..64 {
            disk.record(5 * MS);
            pace.committed(10 * MS, 1);
        }
        assert_eq!(pace.window(), 1);
        // A fast disk: 0.2 ms of a 2 ms commit.
        for _ in 0..64 {
            disk.record(MS / 5);
            pace.committed(2 * MS, 1);
        }
        assert_eq!(pace.window(), 2);
    }

    #[test]
    fn without_a_disk_the_window_is_the_bound_and_nothing_waits() {
        let pace = Pace::new(3, None);
        pace.committed(10 * MS, 5);
        assert_eq!(pace.window(), 3);
        assert_eq!(pace.returning(), 0);
    }

    #[test]
    fn returning_callers_are_counted_while_the_disk_bounds_the_commit() {
        let disk = DiskLatency::new();
        disk.record(8 * MS);
        let pace = Pace::new(2, Some(disk));
        pace.committed(10 * MS, 4);
        assert_eq!(pace.returning(), 4);
        pace.arrived();
        assert_eq!(pace.returning(), 3);
        pace.gave_up();
        assert_eq!(pace.returning(), 0);
        pace.arrived();
        assert_eq!(pace.returning(), 0, "never below zero");
        assert_eq!(pace.linger(), 5 * MS);
    }
}
