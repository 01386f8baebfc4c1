//! The space guard: no Raft group may fill the node's volume.
//!
//! openraft builds a snapshot after a count of entries (`--snapshot-entries`) and keeps a
//! count behind it (`--snapshot-keep`). With large entries those counts are more bytes than a
//! volume holds (a batch of 64 writes of 4 KiB is one entry of 256 KiB: 1,000 of them are
//! 256 MiB), and a log append or a snapshot write that finds the volume full is fatal to the
//! Raft core: the node exits (code 4) and finds the same full volume when it restarts. Every
//! [`SPACE_EVERY`] the guard looks at the log and the volume:
//! - **Bytes, not counts.** While the log's segments take more than its share of the volume
//!   ([`log_budget`]: an eighth, at least two segments), each group with entries in it is
//!   asked for a snapshot, and once a snapshot covers entries still in its log, openraft
//!   purges the log up to it (`purge_log`, which ignores `--snapshot-keep`: a follower
//!   further behind is sent the snapshot instead). Segments, not the entries' bytes: every
//!   durable write takes whole blocks, so small writes one at a time fill segments many
//!   times faster than their bytes say.
//! - **Admission.** While the volume's free space is below what the next snapshots need (the
//!   applied state's bytes of every group, plus three log segments: [`reserve`]; not while
//!   a purge is about to free segments), this node refuses client puts (HTTP 507), and takes
//!   them again once there is room. Deletes pass (they free space) until less than one
//!   segment is left. The state a snapshot writes is the whole map, so a volume must hold
//!   the map twice: a full volume says so to the client instead of killing the node.
//! - **Room first.** The guard also takes over openraft's count policy (`--snapshot-entries`,
//!   openraft's own is `Never`): a snapshot is asked for only while the volume has room for
//!   it (the group's map and one segment, less than the puts' reserve, so that a snapshot
//!   still fits once puts stop), since a snapshot write that finds the volume full is as
//!   fatal as an append.
//!
//! Invariants: the guard only asks for what openraft does by itself (a snapshot; a purge of
//! entries a snapshot covers); a put is refused before it is proposed, never after; the
//! volume's free space is read off the async runtime (the volume's metadata lock may be held
//! across a commit).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vellum_raft_store::log::LogCore;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;

use super::groups::Group;
use super::metrics::{VOLUME_FREE_BYTES, VOLUME_RESERVE_BYTES, WRITES_REFUSED_NO_SPACE};

/// How often the guard looks.
pub const SPACE_EVERY: Duration = Duration::from_millis(100);
/// The least time between two snapshot requests of one group (one builds meanwhile).
const SNAPSHOT_PAUSE: Duration = Duration::from_secs(1);
/// Log segments of room kept beside the snapshots for puts to be taken: what the log may
/// take between the look that stops puts and the purge after the snapshot that follows
/// (its spare and recycled segments are already allocated, so not counted free).
const RESERVE_SEGMENTS: u64 = 3;
/// Log segments of room a snapshot needs beside the map it writes: what the log takes
/// while it is written. Below [`RESERVE_SEGMENTS`], so that a snapshot still fits once
/// puts stop.
const SNAPSHOT_SLACK_SEGMENTS: u64 = 1;
const _: () = assert!(SNAPSHOT_SLACK_SEGMENTS < RESERVE_SEGMENTS, "a snapshot fits once puts stop");

/// What the guard found last; the write path reads it.
#[derive(Debug)]
pub struct Space {
    /// Puts are taken (free space at least the reserve).
    puts: AtomicBool,
    /// Deletes are taken (free space at least one segment).
    deletes: AtomicBool,
    free: AtomicU64,
    reserve: AtomicU64,
}

impl Default for Space {
    fn default() -> Self {
        Space {
            puts: AtomicBool::new(true),
            deletes: AtomicBool::new(true),
            free: AtomicU64::new(0),
            reserve: AtomicU64::new(0),
        }
    }
}

impl Space {
    /// `None` while a write (a put, or a delete when `put` is false) is taken; else the
    /// volume's free bytes and the room puts need, for the refusal.
    pub fn refusal(&self, put: bool) -> Option<(u64, u64)> {
        let taken = if put { &self.puts } else { &self.deletes };
        if taken.load(Ordering::Acquire) {
            return None;
        }
        metrics::counter!(WRITES_REFUSED_NO_SPACE).increment(1);
        Some((self.free.load(Ordering::Relaxed), self.reserve.load(Ordering::Relaxed)))
    }

    /// Judges the last look: `free` bytes, the `reserve` puts need, the log's `segment`, and
    /// whether a purge is `purging` (about to free segments a new snapshot covers).
    fn set(&self, free: u64, reserve: u64, segment: u64, purging: bool) {
        self.free.store(free, Ordering::Relaxed);
        self.reserve.store(reserve, Ordering::Relaxed);
        // While a purge is about to free segments, the log's own slack is enough.
        let puts = free >= reserve || (purging && free >= RESERVE_SEGMENTS * segment);
        let was = self.puts.swap(puts, Ordering::AcqRel);
        if was && !puts {
            tracing::warn!(
                free,
                reserve,
                "the volume is nearly full: client puts are refused (507) until there is room \
                 for the next snapshots; delete keys, or give the volume more space"
            );
        } else if !was && puts {
            tracing::info!(free, reserve, "the volume has room again: client puts are taken");
        }
        // Every write of the log takes whole blocks, deletes too: below one segment of room
        // they would fill what is left, and an append that finds no room stops the core.
        let deletes = free >= segment;
        if self.deletes.swap(deletes, Ordering::AcqRel) != deletes {
            tracing::warn!(free, deletes, "client deletes are taken: {deletes}");
        }
        metrics::gauge!(VOLUME_FREE_BYTES).set(free as f64);
        metrics::gauge!(VOLUME_RESERVE_BYTES).set(reserve as f64);
    }
}

/// Bytes of segments the log may take before the guard asks its groups for snapshots: an
/// eighth of the volume, and at least two segments.
pub fn log_budget(capacity: u64, segment: u64) -> u64 {
    (capacity / 8).max(2 * segment)
}

/// Free bytes the volume must keep for puts to be taken: the applied state of every group
/// (`state`, what the next snapshots write) and [`RESERVE_SEGMENTS`] log segments. A
/// snapshot is asked for down to [`SNAPSHOT_SLACK_SEGMENTS`] of them: once puts stop,
/// there is still room to snapshot and purge the log.
pub fn reserve(state: u64, segment: u64) -> u64 {
    state + RESERVE_SEGMENTS * segment
}

/// Starts the guard over `groups` of `log` on `volume`, asking a group for a snapshot also
/// every `every` applied entries (`--snapshot-entries`: openraft's own policy is off, so
/// that no snapshot starts without room for it); it ends with `stop`.
pub fn spawn_guard(
    every: u64,
    space: Arc<Space>,
    groups: Arc<[Group]>,
    log: LogCore,
    volume: vellum_engine::Volume,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let layout = volume.info().layout;
    let (capacity, block) = (layout.capacity_bytes(), u64::from(layout.block_size));
    let segment = log.segment_bytes();
    let budget = log_budget(capacity, segment);
    tokio::spawn(async move {
        // Per group: when a snapshot was last asked for, and the purge last asked for.
        let mut asked: BTreeMap<u64, Instant> = BTreeMap::new();
        let mut purged: BTreeMap<u64, u64> = BTreeMap::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(SPACE_EVERY) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            let v = volume.clone();
            let Ok(free) = tokio::task::spawn_blocking(move || v.info().free_blocks).await else {
                return;
            };
            let free_bytes = free.saturating_mul(block);
            // A purge of entries a new snapshot covers is about to free log segments: the
            // free space is low only for the moment (the snapshot is written, the log not
            // yet purged), and puts are not refused for it.
            let mut purging = false;
            // The segments, not the entries' bytes: every durable write takes whole blocks,
            // so a run of small writes (deletes, one at a time) fills segments many times
            // faster than its entries' bytes grow.
            let over = log.space().0 > budget;
            for g in groups.iter() {
                let Ok(handle) = log.group(g.id) else { continue };
                let m = g.raft.metrics().borrow_watched().clone();
                let applied = m.last_applied.map_or(0, |a| a.index);
                let snapshot = m.snapshot.map_or(0, |s| s.index);
                let purged_to = m.purged.map_or(0, |p| p.index);
                let by_count = applied.saturating_sub(snapshot) >= every;
                let by_bytes = over && handle.live_bytes() > 0;
                purging |= by_bytes && snapshot > purged_to;
                if by_bytes && snapshot > purged_to && purged.get(&g.id) != Some(&snapshot) {
                    purged.insert(g.id, snapshot);
                    tracing::info!(
                        group = g.id,
                        upto = snapshot,
                        "the log outgrew its share of the volume: purging up to the snapshot"
                    );
                    if let Err(e) = g.raft.trigger().purge_log(snapshot).await {
                        tracing::warn!(group = g.id, error = %e, "purge for the volume's space");
                    }
                    continue;
                }
                if !(by_count || by_bytes)
                    || asked.get(&g.id).is_some_and(|t| t.elapsed() < SNAPSHOT_PAUSE)
                {
                    continue;
                }
                asked.insert(g.id, Instant::now());
                // A snapshot write that finds the volume full stops the Raft core: ask only
                // for one that fits (the map's bytes and a segment of slack).
                let need = g.kv.bytes() + SNAPSHOT_SLACK_SEGMENTS * segment;
                if free_bytes < need {
                    tracing::warn!(
                        group = g.id,
                        free = free_bytes,
                        need,
                        "no room on the volume for this group's next snapshot: its log is not \
                         compacted until keys are deleted or the volume has more space"
                    );
                    continue;
                }
                tracing::info!(
                    group = g.id,
                    applied,
                    snapshot,
                    log_bytes = handle.live_bytes(),
                    segments_over_budget = over,
                    "snapshot"
                );
                if let Err(e) = g.raft.trigger().snapshot().await {
                    tracing::warn!(group = g.id, error = %e, "snapshot for the volume's space");
                }
            }
            let state: u64 = groups.iter().map(|g| g.kv.bytes()).sum();
            space.set(free_bytes, reserve(state, segment), segment, purging);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_an_eighth_of_the_volume_and_at_least_two_segments() {
        assert_eq!(log_budget(64 << 20, 4 << 20), 8 << 20);
        assert_eq!(log_budget(64 << 20, 16 << 20), 32 << 20);
        assert_eq!(log_budget(4 << 30, 64 << 20), 512 << 20);
    }

    #[test]
    fn puts_are_refused_below_the_reserve_and_deletes_below_a_segment() {
        let space = Space::default();
        assert_eq!(space.refusal(true), None);
        space.set(10, reserve(5, 2), 2, false);
        assert_eq!(space.refusal(true), Some((10, 11)), "puts stop below the reserve");
        assert_eq!(space.refusal(false), None, "deletes go on: they free space");
        space.set(1, reserve(5, 2), 2, false);
        assert_eq!(space.refusal(false), Some((1, 11)), "below a segment, deletes stop too");
        space.set(10, 11, 2, true);
        assert_eq!(space.refusal(true), None, "not while a purge is about to free segments");
        space.set(11, 11, 2, false);
        assert_eq!((space.refusal(true), space.refusal(false)), (None, None));
    }
}
