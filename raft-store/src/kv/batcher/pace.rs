//! Pacing of a batcher's proposals by the disk under the log: how many entries may be in
//! flight, and whether a batch waits for the callers that were just answered.
//!
//! A closed loop (each caller sends its next request once its last one is answered) meets
//! two regimes, and the disk's latency tells them apart:
//! - **The commit is bound by the disk** (a spinning disk: the log's durable write is most of
//!   the commit time). A second entry in flight only queues its durable write behind the
//!   first one's, and the callers split into cohorts that alternate, each waiting two
//!   commits. So one entry is in flight, and a batch, once the slot is free, waits until it
//!   holds as many requests sent since the last commit as that commit answered callers
//!   ([`Pace::take_round`]: they come back over a fraction of a millisecond, or a few on a
//!   busy machine), up to half the recent commit time (at most [`MAX_LINGER`]). Every caller
//!   then rides in one entry per commit: one durable write per round on each member.
//! - **The commit is bound by work that overlaps** (CPU, network: a fast disk or `memory:`).
//!   Up to `max_in_flight` entries are in flight and a batch goes as soon as a slot is free,
//!   so the leader appends and replicates the next entry while earlier ones commit.
//!
//! The regime is [`DISK_BOUND_ABOVE`]: the log's durable write time ([`DiskLatency`], the
//! writer's moving average) over the commit time without queueing (the fastest recent
//! `client_write` of this batcher, drifting slowly up toward the average), with hysteresis
//! ([`PIPELINED_BELOW`]). Without a [`DiskLatency`] (a batcher started with
//! `Batcher::start`), the window is `max_in_flight` and nothing waits.
//!
//! Invariants: at most `max` slots are held, one while the disk bounds the commit; pacing
//! only delays when a batch is proposed: every request is still proposed once and answered
//! once.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

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
}

struct State {
    in_flight: usize,
    /// Seconds: moving average (1/8) of the commit time.
    commit: f64,
    /// Seconds: the fastest recent commit (drifting up toward the average by 1/64 a commit,
    /// so that it follows a disk that became slower): the commit without queueing.
    base: f64,
    disk_bound: bool,
    /// While the disk bounds the commit: when the last batch was answered, and its callers.
    round: Option<(Instant, usize)>,
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
            state: Mutex::new(State {
                in_flight: 0,
                commit: 0.0,
                base: 0.0,
                disk_bound: false,
                round: None,
            }),
            freed: Notify::new(),
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

    /// The callers a batch gathered now should wait for: those answered by the last commit
    /// (they come back after it), and when that was; once (the next batch waits for the
    /// callers of the next commit). `None` where nothing waits.
    pub(crate) fn take_round(&self) -> Option<(Instant, usize)> {
        self.lock().round.take()
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
        if s.commit == 0.0 {
            (s.commit, s.base) = (t, t);
        } else {
            s.commit += (t - s.commit) / 8.0;
            s.base = t.min(s.base + (s.commit - s.base) / 64.0);
        }
        if let Some(disk) = self.disk.as_ref().and_then(DiskLatency::get) {
            // Judged against the commit without queueing: entries that queue behind each
            // other's writes (the very thing pacing avoids) must not make the disk look small.
            let share = disk.as_secs_f64() / s.base;
            let disk_bound =
                if s.disk_bound { share >= PIPELINED_BELOW } else { share > DISK_BOUND_ABOVE };
            if disk_bound != s.disk_bound {
                s.disk_bound = disk_bound;
                tracing::debug!(disk_bound, ?disk, commit = s.commit, "proposal pacing");
                metrics::gauge!(crate::metrics::PROPOSALS_WINDOW).set(self.window_of(&s) as f64);
            }
        }
        // Noted before the answers go out: a caller may be back at once.
        s.round = s.disk_bound.then(|| (Instant::now(), callers));
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
        assert_eq!(pace.take_round(), None);
    }

    #[tokio::test]
    async fn a_round_is_noted_while_the_disk_bounds_the_commit_and_taken_once() {
        let disk = DiskLatency::new();
        disk.record(8 * MS);
        let pace = Pace::new(2, Some(disk));
        pace.committed(10 * MS, 4);
        assert_eq!(pace.take_round().map(|(_, n)| n), Some(4));
        assert_eq!(pace.take_round(), None, "one batch waits for a round");
        assert_eq!(pace.linger(), 5 * MS);
    }
}
