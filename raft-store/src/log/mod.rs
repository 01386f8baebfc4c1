//! The raft log core: entries as (index, term, payload bytes), vote / committed / purged
//! records, appends with group commit, truncation, purge, range reads. It knows nothing of
//! openraft; the adapters (`v010/`, `v09/`) are thin layers on top.
//!
//! Files, under the configured directory of the volume (docs/RAFT-LOG.md):
//! `meta` (two alternating 4096-byte slots) and `log/NNNNNNNN.seg` (preallocated segments).
//!
//! Every write goes through one queue in the order it was asked for (openraft requires log and
//! vote IO to be serialized): appends, truncation tombstones and meta saves are queued, and
//! each caller is completed only after the write covering it returned. Writes are combined
//! (`queue`): whoever drains the queue takes everything queued into the next write. By
//! default a dedicated IO thread drains it ([`LogIo`]), so no async worker blocks on the
//! disk; callers only queue and wake it.
//!
//! The committed id costs no write of its own: [`LogCore::save_committed`] records it in
//! memory, and the next write that goes out anyway ends with a `Commit` frame carrying it
//! (after the entries of that write, so it never survives a torn write without them). When
//! no write follows within `commit_lag`, the IO thread saves it in the meta file; `close`
//! saves it too. After a power cut, recovery takes the newer of the meta file's id and the
//! last `Commit` frame, so the committed id it reports may lag the last one saved (openraft
//! re-applies from there), but never names an entry the log does not hold.
//!
//! **Groups.** One log hosts many raft groups (segment format 6 on: a group id in every
//! frame). Each group has its own entries and indexes, its own meta file (vote, committed id,
//! purge point: `DIR/meta` for group 0, `DIR/groups/ID` for the others) and its own handle,
//! a `LogCore` (`LogCore::open` gives group 0's; `create_group`, `group` and `drop_group`
//! manage the others at run time). Appends, truncations, votes and committed ids of every
//! group share the one queue and IO thread, so concurrent appends and votes of different
//! groups become one durable write. A segment is freed only when no group still needs an
//! entry in it.
//!
//! **Votes.** A vote is a `Vote` frame in the shared write (segment format 8), naming the
//! group's newest meta save queued before it; recovery takes the newer of the two. A purge
//! saves a group's meta file before it frees the segment holding that group's newest vote,
//! and a drop's tombstone voids the group's vote frames.
//!
//! **Purges.** A purge point is a `Purge` frame in the shared write the same way (segment
//! format 9), so the purges of many groups share one durable write; recovery takes the
//! higher of it and the meta file's, and a purge saves a group's meta file before it frees
//! the segment holding that group's newest purge frame.
//!
//! **Rewrites.** A laggard group would pin the oldest segment forever: `rewrite` copies its
//! live entries to the log's end (segment format 7: `Rewrite` frames), and once the copies
//! are durable the older segments no longer hold anything it needs. Every purge keeps the
//! space bound (`LogConfig::space_factor`): it rewrites the small groups that pin the oldest
//! segments and names the big ones (`compact_wanted`) for the application to snapshot.
//!
//! This module holds the operations; opening and recovery live in `open.rs`, the write path
//! in `writer.rs`, the state they share in `state.rs`.
//!
//! Invariants: a group's queue order is its log order (its entries are queued under its
//! index lock); an append continues the group's log or overwrites its suffix, never leaves a
//! hole; an entry that cannot fit a segment is refused before it is queued, so no request can
//! poison the log; after a failed write every later write fails until the log is reopened;
//! nothing of a dropped group is queued after its tombstone (the drop marks it under its
//! index and meta locks, which every queuing call holds); a segment leaves a group's
//! pinning set only by that group's durable purge past it, a durable truncation, or the
//! durable last copy of a rewrite that started in a later segment; a segment holding a
//! group's newest durable vote, purge point or committed id (as a frame) is freed only after
//! a meta save of that group is durable.

mod frame;
mod index;
mod meta;
mod open;
pub mod queue;
mod recovery;
mod segments;
mod state;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use vellum_engine::Volume;

pub use meta::MetaState;
pub use segments::SpareStatus;
#[cfg(feature = "test-util")]
pub use state::LogMutation;
pub use state::{
    Callback, DiskLatency, LogConfig, LogEntry, LogIo, MIN_VOLUME_BYTES, RecoveryReport, Torn,
};

use crate::error::{Error, Result};
use crate::metrics as m;
use frame::{FRAME_HEADER_LEN_GROUPS, Parsed, SEGMENT_HEADER_LEN};
use index::{Index, Loc};
use meta::RECORD_MAX;
use queue::Combiner;
use state::{Group, Item, MetaCell, PendingCommit, Shared, join, lock, read_lock, write_lock};

/// The log's decoders, for the fuzz targets in `raft-store/fuzz` (feature `internals`): not
/// an API to build on.
#[cfg(feature = "internals")]
pub mod internals {
    pub use super::frame::{
        ALIGN, FrameHeader, FrameKind, Parsed, SEGMENT_HEADER_LEN, Seal, SegmentHeader, encode,
        parse,
    };
    pub use super::meta::MetaState;
    pub use super::recovery::{ScannedCommit, SegmentScan, scan_segment};
}

/// The shared state, the combiner that owns the writer, and the IO thread's doorbell.
struct Log {
    shared: Shared,
    combiner: Combiner<Item, writer::Writer>,
    bell: Arc<Bell>,
    /// Held while a group is created or dropped (their files and commits).
    admin: Mutex<()>,
}

impl Log {
    /// Writes what is queued, unless a write is in progress (it takes it).
    fn drain(&self) {
        self.combiner.drain(|w, items| w.write_batch(&self.shared, items));
    }

    /// Has what is queued written by the configured thread.
    fn kick(self: &Arc<Self>) {
        match self.shared.config.io {
            LogIo::Inline => self.drain(),
            LogIo::Thread => self.bell.ring(),
            LogIo::SpawnBlocking => match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    let log = Arc::clone(self);
                    drop(rt.spawn_blocking(move || log.drain()));
                }
                Err(_) => self.drain(),
            },
        }
    }

    /// Queues a meta save of `group`'s newest meta state (its vote, committed id and purge
    /// point as recorded so far); written by whoever drains next.
    fn queue_meta(&self, group: &Arc<Group>, done: Callback) -> Result<()> {
        let mut meta = lock(&group.meta);
        if group.is_dropped() {
            return Err(Error::UnknownGroup(group.id));
        }
        meta.state.seq += 1;
        let state = meta.state.clone();
        // Pushed under the meta lock: queued saves are in seq order.
        let r = self.combiner.push(Item::Meta { group: Arc::clone(group), state, done });
        drop(meta);
        r.map_err(|_| Error::Closed)
    }

    /// Queues a meta save of `group`'s committed id when one is waiting to become durable.
    fn save_pending_committed(&self, group: &Arc<Group>, done: Callback) -> Result<()> {
        if group.committed_pending().is_none() || group.is_dropped() {
            done(Ok(()));
            return Ok(());
        }
        metrics::counter!(m::COMMITTED_SAVES_TOTAL).increment(1);
        self.queue_meta(group, done)
    }

    /// Queues a meta save of every group whose committed id is waiting to become durable.
    fn save_all_pending_committed(&self) -> Result<()> {
        for (group, _) in self.shared.committed_pending() {
            self.save_pending_committed(&group, Box::new(|_| {}))?;
        }
        Ok(())
    }

    fn stop_io(&self) {
        let mut s = lock(&self.bell.state);
        s.stop = true;
        self.bell.cv.notify_all();
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.stop_io();
    }
}

/// Wakes the IO thread.
#[derive(Default)]
struct Bell {
    state: Mutex<BellState>,
    cv: Condvar,
}

#[derive(Default)]
struct BellState {
    rung: bool,
    stop: bool,
}

impl Bell {
    fn ring(&self) {
        let mut s = lock(&self.state);
        if !s.rung {
            s.rung = true;
            self.cv.notify_one();
        }
    }
}

/// The IO thread: drains the queue whenever it is rung, and saves the committed id once one
/// has been pending (saved, not yet durable) for `commit_lag` without a write carrying it.
/// The wait is timed from when *a* committed id became pending, whatever index: under a
/// steady stream of new ids that no write carries (segments of format 1 or 2, a segment's
/// end, ids ahead of the durable entries) each is pending only briefly, and a timer restarted
/// per index would never fire. So an id is durable within about two lags of being saved.
/// Holds the log weakly: it ends when the log is dropped or closed.
fn io_thread(log: &Weak<Log>, bell: &Bell, lag: Duration) {
    // Since when some committed id has been pending without a break.
    let mut pending_since: Option<Instant> = None;
    loop {
        {
            let mut s = lock(&bell.state);
            if !s.rung && !s.stop {
                s = bell.cv.wait_timeout(s, lag).map_or_else(|p| p.into_inner().0, |(g, _)| g);
            }
            if s.stop {
                return;
            }
            s.rung = false;
        }
        let Some(log) = log.upgrade() else { return };
        log.drain();
        let pending = !log.shared.committed_pending().is_empty();
        pending_since = match (pending, pending_since) {
            (false, _) => None,
            (true, None) => Some(Instant::now()),
            (true, Some(since)) if since.elapsed() < lag => Some(since),
            (true, Some(_)) => {
                if log.save_all_pending_committed().is_ok() {
                    log.drain();
                }
                None
            }
        };
    }
}

/// One raft group's log on a volume: group 0's from [`LogCore::open`], another's from
/// [`LogCore::create_group`] or [`LogCore::group`]. Cheap to clone; every handle of one log
/// shares its queue, IO thread and segments.
#[derive(Clone)]
pub struct LogCore {
    log: Arc<Log>,
    report: Arc<RecoveryReport>,
    group: Arc<Group>,
}

impl std::fmt::Debug for LogCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogCore")
            .field("dir", &self.log.shared.config.dir)
            .field("group", &self.group.id)
            .finish_non_exhaustive()
    }
}

impl LogCore {
    /// Opens (creating if needed) the log under `config.dir` of `volume`, recovering its
    /// state: the torn tail of the last write in flight is dropped and fenced with a `Skip`
    /// frame; damage anywhere else refuses with `Error::Corrupt`.
    pub fn open(volume: Volume, config: LogConfig) -> Result<LogCore> {
        let started = Instant::now();
        let opened = open::open(volume, config)?;
        let report = opened.report;
        metrics::gauge!(m::RECOVERY_DURATION).set(started.elapsed().as_secs_f64());
        metrics::gauge!(m::RECOVERY_SCANNED_BYTES).set(report.scanned_bytes as f64);
        if report.torn.is_some() {
            tracing::warn!(
                ?report,
                "raft log recovered with a torn tail (the write in flight at the power cut)"
            );
        }
        let lag = opened.shared.config.commit_lag;
        let thread = opened.shared.config.io == LogIo::Thread;
        let group = opened.shared.group(0).expect("open makes group 0");
        let log = Arc::new(Log {
            shared: opened.shared,
            combiner: Combiner::new(opened.writer),
            bell: Arc::new(Bell::default()),
            admin: Mutex::new(()),
        });
        if thread {
            let weak = Arc::downgrade(&log);
            let bell = Arc::clone(&log.bell);
            std::thread::Builder::new()
                .name("vellum-log-io".into())
                .spawn(move || io_thread(&weak, &bell, lag))
                .map_err(|_| Error::Config("the system refused to start the log's IO thread"))?;
        }
        Ok(LogCore { log, report: Arc::new(report), group })
    }

    fn shared(&self) -> &Shared {
        &self.log.shared
    }

    /// The id of the group this handle writes (0 for [`LogCore::open`]'s).
    pub fn group_id(&self) -> u64 {
        self.group.id
    }

    /// The ids of the groups the log hosts, in order (0 always among them).
    pub fn groups(&self) -> Vec<u64> {
        read_lock(&self.shared().groups).keys().copied().collect()
    }

    /// A handle of group `id` of this log.
    pub fn group(&self, id: u64) -> Result<LogCore> {
        let group = self.shared().group(id).ok_or(Error::UnknownGroup(id))?;
        Ok(LogCore { log: Arc::clone(&self.log), report: Arc::clone(&self.report), group })
    }

    /// Creates group `id` in this log, empty (no entries, vote or committed id), and returns
    /// its handle: one metadata commit (its meta file), durable when this returns.
    pub fn create_group(&self, id: u64) -> Result<LogCore> {
        self.check_failed()?;
        let _admin = lock(&self.log.admin);
        if self.shared().group(id).is_some() {
            return Err(Error::GroupExists(id));
        }
        let shared = self.shared();
        let dir = join(&shared.config.dir, open::GROUPS_DIR);
        shared.volume.create_dir_all(&dir)?;
        let path = open::group_meta_path(&shared.config.dir, id);
        // A file left by a drop that a power cut interrupted after its tombstone: the group's
        // entries are gone, and so goes its old vote.
        if shared.volume.exists(&path)? {
            shared.volume.remove(&path)?;
        }
        let file = shared.volume.create_file(&path)?;
        file.preallocate(0, meta::FILE_LEN)?;
        shared.volume.commit()?;
        let group = Arc::new(Group {
            id,
            index: RwLock::new(Index::new(0, shared.config.hot_window_bytes)),
            meta: Mutex::new(MetaCell::default()),
            meta_file: file,
            durable_committed: AtomicU64::new(0),
            durable_purged: AtomicU64::new(0),
            dropped: AtomicBool::new(false),
            vote_seq: AtomicU64::new(0),
            purge_seq: AtomicU64::new(0),
            commit_seq: AtomicU64::new(0),
        });
        write_lock(&shared.groups).insert(id, Arc::clone(&group));
        metrics::gauge!(m::GROUPS).set(read_lock(&shared.groups).len() as f64);
        Ok(LogCore { log: Arc::clone(&self.log), report: Arc::clone(&self.report), group })
    }

    /// Drops group `id`: a durable tombstone truncates all its entries, then its meta file
    /// goes (one metadata commit). Its handles refuse every call from then on
    /// (`UnknownGroup`); its segments are freed as other groups purge. Group 0 stays.
    pub fn drop_group(&self, id: u64) -> Result<()> {
        if id == 0 {
            return Err(Error::Config("group 0 is the log's own and cannot be dropped"));
        }
        self.check_failed()?;
        let _admin = lock(&self.log.admin);
        let group = self.shared().group(id).ok_or(Error::UnknownGroup(id))?;
        // The vote into the meta file first: the tombstone voids the group's `Vote` frames,
        // and a power cut before its meta file is gone must not find an older vote there.
        wait(|done| {
            self.log.queue_meta(&group, done)?;
            self.log.kick();
            Ok(())
        })?;
        wait(|done| {
            // Under the group's index and meta locks, which every call that queues for it
            // holds: nothing of it is queued after the tombstone.
            let mut ix = write_lock(&group.index);
            let meta = lock(&group.meta);
            group.dropped.store(true, Ordering::Release);
            ix.truncate(0);
            let r =
                self.push(Item::Truncate { group: Arc::clone(&group), since: 0, drop: true, done });
            drop(meta);
            drop(ix);
            r?;
            self.log.kick();
            Ok(())
        })?;
        let shared = self.shared();
        write_lock(&shared.groups).remove(&id);
        shared.volume.remove(open::group_meta_path(&shared.config.dir, id))?;
        shared.volume.commit()?;
        metrics::gauge!(m::GROUPS).set(read_lock(&shared.groups).len() as f64);
        Ok(())
    }

    /// Fails with `UnknownGroup` once this handle's group was dropped.
    fn check_group(&self) -> Result<()> {
        if self.group.is_dropped() {
            return Err(Error::UnknownGroup(self.group.id));
        }
        Ok(())
    }

    /// How long this log's durable writes take now (for `Batcher::start_paced`).
    pub fn disk_latency(&self) -> DiskLatency {
        self.shared().disk.clone()
    }

    fn check_failed(&self) -> Result<()> {
        match self.log.combiner.failed() {
            Some(e) => Err(Error::shared(&e)),
            None => Ok(()),
        }
    }

    /// Queues `item`; the caller writes it (or a writer in progress does) by `drain`.
    fn push(&self, item: Item) -> Result<()> {
        self.log.combiner.push(item).map_err(|_| Error::Closed)
    }

    /// What recovery found.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// The largest payload one entry may carry: its frame must fit an empty segment.
    pub fn max_entry_bytes(&self) -> usize {
        let room =
            self.shared().segment_bytes as usize - SEGMENT_HEADER_LEN - FRAME_HEADER_LEN_GROUPS;
        room / 8 * 8
    }

    /// Bytes of the log's segments (those it has, or the configured size for a new log).
    pub fn segment_bytes(&self) -> u64 {
        self.shared().segment_bytes
    }

    /// Queues `entries` (consecutive, continuing the log or overwriting its suffix); they are
    /// readable when this returns, and `done` runs once they are durable (or the write
    /// failed), in log order.
    ///
    /// Refused before anything is queued, with the log left as it was: an entry larger than
    /// [`max_entry_bytes`](Self::max_entry_bytes) (`EntryTooLarge`), entries that are not
    /// consecutive, and an append that would leave a hole after the last entry (`OutOfRange`).
    pub fn append(&self, entries: Vec<LogEntry>, done: Callback) -> Result<()> {
        self.check_failed()?;
        let started = Instant::now();
        let max = self.max_entry_bytes();
        if let Some(e) = entries.iter().find(|e| e.payload.len() > max) {
            return Err(Error::EntryTooLarge { len: e.payload.len(), max: max as u64 });
        }
        let mut ix = write_lock(&self.group.index);
        self.check_group()?;
        for pair in entries.windows(2) {
            if pair[1].index != pair[0].index + 1 {
                return Err(Error::OutOfRange {
                    index: pair[1].index,
                    first: pair[0].index,
                    last: pair[0].index,
                });
            }
        }
        if let Some(first) = entries.first().map(|e| e.index)
            && !ix.is_empty()
            && first != ix.next_index()
        {
            if first > ix.next_index() || first < ix.first_index() {
                // A hole, or entries before the first one present: never made up for by
                // dropping what the log holds.
                return Err(Error::OutOfRange {
                    index: first,
                    first: ix.first_index(),
                    last: ix.next_index() - 1,
                });
            }
            // Overwriting a suffix (openraft truncates first; should it not, the log is
            // truncated durably first: a tombstone ahead of the entries, so disk and memory
            // agree on what the log holds).
            tracing::warn!(first, next = ix.next_index(), "an append overwrites the log's suffix");
            ix.truncate(first);
            let group = Arc::clone(&self.group);
            let done = Box::new(|_| {});
            self.push(Item::Truncate { group, since: first, drop: false, done })?;
        }
        for e in &entries {
            ix.push(
                e.index,
                Loc {
                    term: e.term,
                    seg: 0,
                    offset: 0,
                    len: 0,
                    durable: false,
                    hot: Some(Arc::clone(&e.payload)),
                },
            );
        }
        let done: Callback = Box::new(move |r| {
            metrics::histogram!(m::APPEND_DURATION).record(started.elapsed().as_secs_f64());
            done(r);
        });
        // Pushed under the index lock: the queue order is the log order. Written after it is
        // released (the writer updates the index).
        let r = self.push(Item::Entries { group: Arc::clone(&self.group), entries, done });
        drop(ix);
        r?;
        self.log.kick();
        Ok(())
    }

    /// Truncates every entry at or after `since`; `done` runs once the tombstone is durable.
    pub fn truncate(&self, since: u64, done: Callback) -> Result<()> {
        self.check_failed()?;
        let mut ix = write_lock(&self.group.index);
        self.check_group()?;
        ix.truncate(since);
        let group = Arc::clone(&self.group);
        let r = self.push(Item::Truncate { group, since, drop: false, done });
        drop(ix);
        r?;
        self.log.kick();
        Ok(())
    }

    /// Saves the vote (opaque bytes, at most 1000); `done` runs once it is durable. It goes
    /// out as a `Vote` frame in the log's next write, shared with every other group's
    /// appends and votes, not as a meta file write of its own (docs/RAFT-LOG.md, "Votes").
    pub fn save_vote(&self, vote: Vec<u8>, done: Callback) -> Result<()> {
        self.check_failed()?;
        if vote.len() > RECORD_MAX {
            return Err(Error::Config("a vote or log id encodes to more than 1000 bytes"));
        }
        let mut meta = lock(&self.group.meta);
        self.check_group()?;
        meta.state.vote = Some(vote.clone());
        // Pushed under the meta lock: in order with the group's meta saves, the newest of
        // which (`seq`) the frame names.
        let after = meta.state.seq;
        let r = self.push(Item::Vote { group: Arc::clone(&self.group), vote, after, done });
        drop(meta);
        r?;
        self.log.kick();
        Ok(())
    }

    /// Records the committed log id (`index`, its `term`, and the caller's encoding: opaque
    /// bytes, at most 1000) without writing it: it becomes durable with the next write of
    /// the log that reaches its entry (a `Commit` frame at its end, recording `term`), or the
    /// next meta save, or after `commit_lag` with a meta save of its own (IO thread mode), or
    /// at `close`. An id at or below the newest one saved is ignored (committed ids only
    /// grow).
    pub fn save_committed(&self, index: u64, term: u64, committed: Vec<u8>) -> Result<()> {
        self.check_failed()?;
        if committed.len() > RECORD_MAX {
            return Err(Error::Config("a vote or log id encodes to more than 1000 bytes"));
        }
        let mut meta = lock(&self.group.meta);
        self.check_group()?;
        if meta.state.committed.is_some() && meta.state.committed_index.is_some_and(|c| c >= index)
        {
            return Ok(());
        }
        meta.state.committed = Some(committed);
        meta.state.committed_index = Some(index);
        meta.committed_term = term;
        drop(meta);
        // After the meta lock: `Shared::committed_pending` looks at this group from now on.
        lock(&self.shared().committing).insert(self.group.id);
        Ok(())
    }

    /// Makes the committed id saved so far durable (a meta save, unless it already is);
    /// `done` runs once it is.
    pub fn flush_committed(&self, done: Callback) -> Result<()> {
        self.check_failed()?;
        self.check_group()?;
        self.log.save_pending_committed(&self.group, done)?;
        self.log.kick();
        Ok(())
    }

    /// Whether entry `index` is durable: its write returned. An entry before the log's first
    /// one counts as durable (only durable entries are purged); one past the last does not.
    pub fn is_durable(&self, index: u64) -> bool {
        let ix = read_lock(&self.group.index);
        index < ix.first_index() || ix.get(index).is_some_and(|l| l.durable)
    }

    /// The committed index known durable (what recovery would report at least).
    pub fn durable_committed_index(&self) -> Option<u64> {
        self.group.durable_committed()
    }

    /// Purges every entry of this group at or before `upto` (`purged` is the caller's
    /// encoding of the purged id, at most 1000 bytes). The purge point goes out as a `Purge`
    /// frame in the log's next write, shared with every other group's appends, votes and
    /// purges (docs/RAFT-LOG.md, "Purges"). Blocks until it is durable, then frees the
    /// oldest whole segments that no group needs any more (every group with entries in them
    /// purged past them; one metadata commit): up to `LogConfig::recycled_segments` of them
    /// are kept for reuse as later segments, the others deleted. Then it keeps the space
    /// bound (`LogConfig::space_factor`): laggard groups that pin the oldest segments are
    /// rewritten forward, or listed by [`compact_wanted`](Self::compact_wanted).
    pub fn purge(&self, upto: u64, purged: Vec<u8>) -> Result<()> {
        self.check_failed()?;
        if purged.len() > RECORD_MAX {
            return Err(Error::Config("a vote or log id encodes to more than 1000 bytes"));
        }
        wait(|done| {
            let mut meta = lock(&self.group.meta);
            self.check_group()?;
            // Purge points only grow: an older one is written all the same (it waits for the
            // newer one queued before it) but changes nothing.
            if meta.state.purged_index.is_none_or(|p| upto > p) {
                meta.state.purged = Some(purged.clone());
                meta.state.purged_index = Some(upto);
            }
            // Pushed under the meta lock: in order with the group's meta saves, so a save
            // queued after it holds it and one queued before is written before it.
            let group = Arc::clone(&self.group);
            let r = self.push(Item::Purge { group, upto, purged, done });
            drop(meta);
            r?;
            self.log.kick();
            Ok(())
        })?;
        write_lock(&self.group.index).purge(upto);
        self.free_unneeded(upto)?;
        self.keep_space_bound()
    }

    /// Every group's durable purge point (a queued purge does not count: a power cut before
    /// its save would leave that group's entries needed).
    fn durable_purge_points(&self) -> std::collections::BTreeMap<u64, Option<u64>> {
        read_lock(&self.shared().groups).iter().map(|(&id, g)| (id, g.durable_purged())).collect()
    }

    /// Frees the oldest segments no group needs (`purge`); returns how many.
    fn free_unneeded(&self, upto: u64) -> Result<usize> {
        let purged = self.durable_purge_points();
        #[cfg(feature = "test-util")]
        let purged = if self.shared().config.mutation == Some(state::LogMutation::FreeNeeded) {
            // The mutant: every other group counts as purged past everything.
            purged
                .into_keys()
                .map(|g| (g, if g == self.group.id { Some(upto) } else { Some(u64::MAX) }))
                .collect()
        } else {
            purged
        };
        #[cfg(not(feature = "test-util"))]
        let _ = upto;
        let doomed: Vec<(u64, Vec<u8>)> = {
            let segs = lock(&self.shared().segments);
            let newest = segs.by_seq.keys().next_back().copied();
            // Only the oldest segments go, so the ones left stay consecutive.
            segs.by_seq
                .iter()
                .take_while(|(s, info)| {
                    Some(**s) != newest && info.unneeded(|g| purged.get(&g).copied().flatten())
                })
                .map(|(s, i)| (*s, i.path.clone()))
                .collect()
        };
        let Some(&(last_doomed, _)) = doomed.last() else { return Ok(0) };
        self.save_records_before_free(last_doomed)?;
        let retired: Vec<_> = {
            let mut segs = lock(&self.shared().segments);
            doomed
                .into_iter()
                .filter_map(|(seq, path)| segs.by_seq.remove(&seq).map(|info| (path, info)))
                .collect()
        };
        let count = retired.len();
        if count == 0 {
            return Ok(0); // a purge of another group racing this one freed them
        }
        // Up to `recycled_segments` of them become `.free` files for the spare maker, the
        // rest are deleted, and zeroed `.free` files become spares: one commit for all.
        let retired = self.shared().retirer.retire(&self.shared().volume, retired)?;
        self.shared().volume.commit()?;
        self.shared().retirer.adopt(retired);
        metrics::counter!(m::SEGMENTS_PURGED_TOTAL).increment(count as u64);
        Ok(count)
    }

    /// Saves the meta file of every group whose newest durable vote, purge point or committed
    /// id is a `Vote`, `Purge` or `Commit` frame in a segment up to `last_doomed` (about to be
    /// freed): it then lives on in the meta file (a slot newer than the frame). Other groups'
    /// frames there are older than their meta file or a later frame, and may go.
    fn save_records_before_free(&self, last_doomed: u64) -> Result<()> {
        // The test-util mutants skip one kind of save.
        #[cfg(feature = "test-util")]
        let (votes, purges, commits) = {
            let m = self.shared().config.mutation;
            use state::LogMutation::{FreeCommit, FreePurge, FreeVote};
            (m != Some(FreeVote), m != Some(FreePurge), m != Some(FreeCommit))
        };
        #[cfg(not(feature = "test-util"))]
        let (votes, purges, commits) = (true, true, true);
        let doomed = |seq: &AtomicU64| {
            let seq = seq.load(Ordering::Acquire);
            seq != 0 && seq <= last_doomed
        };
        let holders: Vec<Arc<Group>> = read_lock(&self.shared().groups)
            .values()
            .filter(|g| {
                votes && doomed(&g.vote_seq)
                    || purges && doomed(&g.purge_seq)
                    || commits && doomed(&g.commit_seq)
            })
            .cloned()
            .collect();
        for group in holders {
            let saved = wait(|done| {
                self.log.queue_meta(&group, done)?;
                self.log.kick();
                Ok(())
            });
            match saved {
                // A dropped group's vote is void with it.
                Ok(()) | Err(Error::UnknownGroup(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Bytes the log's active segments take, and the bound `LogConfig::space_factor` sets
    /// for them now: that multiple of the live entries' bytes of every group, plus four
    /// segments (the one being written, the one before it, and room for the rewrites
    /// themselves). `None` without a bound.
    pub fn space(&self) -> (u64, Option<u64>) {
        let shared = self.shared();
        let used = lock(&shared.segments).by_seq.values().map(|s| s.len).sum();
        if shared.config.space_factor == 0 {
            return (used, None);
        }
        let live: u64 =
            read_lock(&shared.groups).values().map(|g| read_lock(&g.index).live_bytes()).sum();
        (used, Some(shared.config.space_factor * live + 4 * shared.segment_bytes))
    }

    /// While the segments are over the space bound, deals with the groups that pin the
    /// oldest one: rewrites those with few live bytes (`LogConfig::rewrite_max_bytes`) to
    /// the log's end, lists the others for [`compact_wanted`](Self::compact_wanted), and
    /// frees what the rewrites released.
    fn keep_space_bound(&self) -> Result<()> {
        let shared = self.shared();
        let rewrite_max = match shared.config.rewrite_max_bytes {
            0 => shared.segment_bytes / 16,
            n => n,
        };
        let mut wanted = std::collections::BTreeSet::new();
        let mut rewritten = std::collections::BTreeSet::new();
        loop {
            let (used, bound) = self.space();
            let Some(bound) = bound else { break };
            if used <= bound {
                break;
            }
            let purged = self.durable_purge_points();
            let pinning = {
                let segs = lock(&shared.segments);
                if segs.by_seq.len() < 2 {
                    break;
                }
                let (_, oldest) = segs.by_seq.iter().next().expect("two segments");
                oldest.pinned_by(|g| purged.get(&g).copied().flatten())
            };
            // Every laggard of the segment queued at once: their copies share the writes.
            let (tx, rx) = std::sync::mpsc::channel();
            let mut queued = 0;
            for id in pinning {
                if rewritten.contains(&id) || wanted.contains(&id) {
                    continue;
                }
                let Ok(group) = self.group(id) else { continue };
                if read_lock(&group.group.index).live_bytes() > rewrite_max {
                    wanted.insert(id);
                    continue;
                }
                let tx = tx.clone();
                match group.queue_rewrite(Box::new(move |r| drop(tx.send(r)))) {
                    Ok(n) => metrics::counter!(m::REWRITTEN_ENTRIES_TOTAL).increment(n as u64),
                    Err(Error::UnknownGroup(_)) => continue,
                    Err(e) => return Err(e),
                }
                rewritten.insert(id);
                queued += 1;
            }
            drop(tx);
            self.log.kick();
            for r in rx.iter().take(queued) {
                r.map_err(|e| Error::shared(&e))?;
            }
            if queued == 0 || self.free_unneeded(0)? == 0 {
                break;
            }
        }
        let mut list = lock(&shared.compact_wanted);
        if wanted.is_empty() {
            list.clear();
        } else {
            *list = wanted;
        }
        metrics::gauge!(m::GROUPS_COMPACT_WANTED).set(list.len() as f64);
        Ok(())
    }

    /// Bytes this group's live entries take in the log (frames once written, payloads
    /// before).
    pub fn live_bytes(&self) -> u64 {
        read_lock(&self.group.index).live_bytes()
    }

    /// Groups that pin old segments while the log is over its space bound and hold too many
    /// live bytes to be rewritten (as of the last purge of any group): the application should
    /// snapshot and purge them (raft-engine's force-compact list). Empty while the log is
    /// within its bound.
    pub fn compact_wanted(&self) -> Vec<u64> {
        lock(&self.shared().compact_wanted).iter().copied().collect()
    }

    /// Copies every live entry of this group to the log's end as `Rewrite` frames, so that
    /// the older segments holding them can be freed while the group still needs its
    /// entries, and blocks until the copies are durable. Returns how many entries it copied
    /// (0: the group holds none, nothing is written). Nothing changes for readers: the same
    /// entries, read from their copies. A group that changes under every attempt is left as
    /// it is (0).
    pub fn rewrite(&self) -> Result<usize> {
        let mut copied = 0;
        wait(|done| {
            copied = self.queue_rewrite(done)?;
            self.log.kick();
            Ok(())
        })?;
        self.check_group()?;
        metrics::counter!(m::REWRITTEN_ENTRIES_TOTAL).increment(copied as u64);
        Ok(copied)
    }

    /// Queues the rewrite of this group (`rewrite`); `done` runs once it is durable, at once
    /// when there is nothing to copy. Returns how many entries it queued; the caller kicks
    /// the writer (once for many rewrites: they share the writes).
    fn queue_rewrite(&self, done: Callback) -> Result<usize> {
        self.check_failed()?;
        self.check_group()?;
        // Read outside the index lock (cold entries are read from their segments), then
        // queued only if the group did not change meanwhile.
        for _ in 0..16 {
            let (first, last) = {
                let ix = read_lock(&self.group.index);
                match ix.last_index() {
                    Some(last) => (ix.first_index(), last),
                    None => break,
                }
            };
            let mut entries = match self.read(first, last + 1) {
                Ok(e) => e,
                Err(Error::OutOfRange { .. } | Error::Corrupt { .. }) => continue,
                Err(e) => return Err(e),
            };
            // Under the group's index and meta locks, as every queuing call: the copies
            // follow every frame of the group queued before, and the entries a purge queued
            // before them dropped are left out.
            let ix = write_lock(&self.group.index);
            let meta = lock(&self.group.meta);
            let unchanged = ix.first_index() == first
                && ix.last_index() == Some(last)
                && entries.iter().all(|e| ix.get(e.index).is_some_and(|l| l.term == e.term));
            if self.group.is_dropped() {
                return Err(Error::UnknownGroup(self.group.id));
            }
            if !unchanged {
                continue;
            }
            if let Some(p) = meta.state.purged_index {
                entries.retain(|e| e.index > p);
            }
            #[cfg(feature = "test-util")]
            if self.shared().config.mutation == Some(state::LogMutation::RewriteShort) {
                entries.pop();
            }
            if entries.is_empty() {
                break;
            }
            let n = entries.len();
            let commit = match (meta.state.committed_index, &meta.state.committed) {
                (Some(index), Some(payload)) => entries
                    .iter()
                    .find(|e| e.index == index)
                    .map(|e| PendingCommit { index, term: e.term, payload: payload.clone() }),
                _ => None,
            };
            let group = Arc::clone(&self.group);
            let r = self.push(Item::Rewrite { group, entries, commit, done });
            drop(meta);
            drop(ix);
            r?;
            return Ok(n);
        }
        // Nothing to copy, or a group that keeps changing (no laggard: the next purge looks
        // again).
        done(Ok(()));
        Ok(0)
    }

    /// The newest saved (or queued) meta state.
    pub fn meta(&self) -> MetaState {
        lock(&self.group.meta).state.clone()
    }

    /// `(first index, last index)` of the entries present; `last < first` when empty.
    pub fn bounds(&self) -> (u64, Option<u64>) {
        let ix = read_lock(&self.group.index);
        (ix.first_index(), ix.last_index())
    }

    /// Entries with `lo <= index < hi` that are present.
    pub fn read(&self, lo: u64, hi: u64) -> Result<Vec<LogEntry>> {
        self.check_failed()?;
        self.check_group()?;
        let wanted: Vec<(u64, Loc)> = {
            let ix = read_lock(&self.group.index);
            if ix.is_empty() {
                return Ok(Vec::new());
            }
            let lo = lo.max(ix.first_index());
            let hi = hi.min(ix.next_index());
            (lo..hi).filter_map(|i| ix.get(i).map(|l| (i, l.clone()))).collect()
        };
        let mut out = Vec::with_capacity(wanted.len());
        for (index, loc) in wanted {
            let payload = match loc.hot {
                Some(p) => p,
                None => match self.read_cold(index, &loc) {
                    Ok(p) => p,
                    // A rewrite moved the entry and its old segment went meanwhile: read it
                    // where the index has it now.
                    Err(e) => {
                        let moved = read_lock(&self.group.index)
                            .get(index)
                            .filter(|now| now.seg != loc.seg && now.term == loc.term)
                            .cloned();
                        match moved {
                            Some(Loc { hot: Some(p), .. }) => p,
                            Some(now) => self.read_cold(index, &now)?,
                            None => return Err(e),
                        }
                    }
                },
            };
            out.push(LogEntry { index, term: loc.term, payload });
        }
        Ok(out)
    }

    fn read_cold(&self, index: u64, loc: &Loc) -> Result<Arc<[u8]>> {
        let (file, seal, name) = {
            let segs = lock(&self.shared().segments);
            let seg =
                segs.by_seq.get(&loc.seg).ok_or(Error::OutOfRange { index, first: 0, last: 0 })?;
            (Arc::clone(&seg.file), seg.seal, String::from_utf8_lossy(&seg.path).into_owned())
        };
        let mut buf = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut buf, loc.offset)?;
        metrics::counter!(m::COLD_READS_TOTAL).increment(1);
        let header_len = seal.header_len();
        match frame::parse(&buf, seal, loc.offset) {
            Parsed::Valid { header, .. }
                if header.index == index
                    && header.term == loc.term
                    && header.group == self.group.id =>
            {
                Ok(Arc::from(&buf[header_len..header_len + header.payload_len as usize]))
            }
            _ => Err(Error::Corrupt {
                file: name,
                offset: loc.offset,
                reason: "an entry no longer reads back",
            }),
        }
    }

    /// The volume the log lives on.
    pub fn volume(&self) -> &Volume {
        &self.shared().volume
    }

    /// Bytes of payload in this group's hot window.
    pub fn hot_bytes(&self) -> usize {
        read_lock(&self.group.index).hot_bytes()
    }

    /// Active segments.
    pub fn segment_count(&self) -> usize {
        lock(&self.shared().segments).by_seq.len()
    }

    /// How the spare-segment maker is doing. Brief: it waits for no write of the log.
    pub fn spare_status(&self) -> SpareStatus {
        self.shared().retirer.status()
    }

    /// Refuses further writes (they fail with `Closed`); queued ones, and the committed id
    /// saved last, are written first. Stops the IO thread.
    pub fn close(&self) {
        if self.check_failed().is_ok() {
            let _ = self.log.save_all_pending_committed();
        }
        self.log.combiner.close();
        // The IO thread may hold the writer: wait for its write, then take what is left.
        drop(self.log.combiner.writer());
        self.log.drain();
        self.log.stop_io();
    }
}

/// Runs `start` with a callback and blocks until the callback ran.
pub fn wait(start: impl FnOnce(Callback) -> Result<()>) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    start(Box::new(move |r| {
        let _ = tx.send(r);
    }))?;
    match rx.recv() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::shared(&e)),
        Err(_) => Err(Error::Closed),
    }
}

#[cfg(test)]
mod tests {
    use vellum_engine::carrier::MemoryCarrier;
    use vellum_engine::{FormatOptions, Volume, VolumeOptions};

    use super::*;

    fn ids(log: &LogCore) -> Vec<u64> {
        lock(&log.shared().committing).iter().copied().collect()
    }

    /// A write asks only the groups whose committed id `save_committed` made pending, not
    /// every group's meta lock: the set holds exactly those until they are durable.
    #[test]
    fn a_write_looks_only_at_the_groups_with_a_committed_id_to_carry() {
        let volume = Volume::format(
            Box::new(MemoryCarrier::new(64 << 20)),
            &FormatOptions::default(),
            VolumeOptions::default(),
        )
        .unwrap_or_else(|e| panic!("format: {e}"));
        let log = LogCore::open(volume, LogConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let groups: Vec<LogCore> =
            (1..=64).map(|g| log.create_group(g).unwrap_or_else(|e| panic!("{e}"))).collect();
        assert!(log.shared().committed_pending().is_empty());
        assert!(ids(&log).is_empty(), "the first look drops every group with nothing pending");
        for g in [&groups[9], &groups[40]] {
            g.save_committed(1, 1, vec![7]).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(ids(&log), vec![10, 41]);
        let pending: Vec<u64> =
            log.shared().committed_pending().iter().map(|(g, _)| g.id).collect();
        assert_eq!(pending, vec![10, 41]);
        wait(|done| groups[9].flush_committed(done)).unwrap_or_else(|e| panic!("{e}"));
        let pending: Vec<u64> =
            log.shared().committed_pending().iter().map(|(g, _)| g.id).collect();
        assert_eq!(pending, vec![41], "a durable committed id leaves the set");
        assert_eq!(ids(&log), vec![41]);
        log.drop_group(41).unwrap_or_else(|e| panic!("{e}"));
        assert!(log.shared().committed_pending().is_empty());
        assert!(ids(&log).is_empty(), "a dropped group leaves the set");
        log.close();
    }
}
