//! What the log's parts share: the configuration, the entry type, the queued items, and the
//! state behind the locks (`Shared`). A leaf of `log/`: it imports none of its siblings but
//! `index` and `meta` (plain data), so opening (`open.rs`), writing (`writer.rs`) and the API
//! (`mod.rs`) all build on it without importing each other in a circle.
//!
//! Lock order, outermost first: the combiner's writer state, then `groups`, then a group's
//! `index`, then `segments`; a group's `meta` is never held across another lock. No lock is
//! held across a callback.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use vellum_engine::{File, Volume};

use super::index::Index;
use super::meta::MetaState;
use super::queue::Complete;
use super::segments::Segments;
use crate::error::{Error, SharedError};

/// Tuning of the log. The default sizes segments from the volume ([`LogConfig::segment_bytes_for`])
/// and needs a volume of at least [`MIN_VOLUME_BYTES`].
///
/// ```
/// use vellum_raft_store::{LogConfig, MIN_VOLUME_BYTES};
///
/// // Segments derived from the volume: 1/16 of it, between 1 MiB and 64 MiB.
/// assert_eq!(LogConfig::segment_bytes_for(MIN_VOLUME_BYTES), 1 << 20);
/// assert_eq!(LogConfig::segment_bytes_for(256 << 20), 16 << 20);
/// assert_eq!(LogConfig::segment_bytes_for(8 << 30), 64 << 20);
///
/// // Or a fixed size (a multiple of 4096), and the log under another directory.
/// let config = LogConfig { segment_bytes: 4 << 20, dir: "/raft-b".into(), ..LogConfig::default() };
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Directory of the volume holding `meta` and `log/`.
    pub dir: String,
    /// Bytes of one preallocated segment file, for a log that has none yet: a multiple of
    /// 4096, at least 8192, or `0` (the default) for [`LogConfig::segment_bytes_for`] the
    /// volume's capacity. An existing log keeps the size its segments have (it is read from
    /// the log, never from here). One entry must fit one segment
    /// ([`LogCore::max_entry_bytes`](super::LogCore::max_entry_bytes)).
    pub segment_bytes: u64,
    /// Bytes of payload the hot tail window keeps in memory, per group of the log.
    pub hot_window_bytes: usize,
    /// Largest single write the writer issues.
    pub max_batch_bytes: usize,
    /// Prepare the next segment in a background thread (false: when it is needed, which
    /// makes the carrier's operation sequence deterministic, for crash tests).
    pub background_spares: bool,
    /// Which thread performs the log's writes.
    pub io: LogIo,
    /// How long a saved committed id waits for a write to ride on before it gets one of its
    /// own (a meta save, between one and two lags after it was saved). Only the `Thread` mode
    /// keeps this timer; otherwise the id waits for the next write or `close`.
    pub commit_lag: Duration,
    /// Purged segments kept for reuse (default 2): the next spares are made from them (an
    /// 8 KiB write, and a rename in a commit the log makes anyway) instead of new files
    /// zero-filled in full. They hold volume space the log no longer needs (with the ready
    /// spares beyond one); 0 deletes every purged segment.
    pub recycled_segments: usize,
    /// The space bound (0: none): when a purge leaves the log's segments holding more than
    /// this multiple of its live entries' bytes, plus four segments of slack, the groups that
    /// pin the oldest segments are dealt with: a group whose live entries take at most
    /// `rewrite_max_bytes` is rewritten forward (its entries copied to the log's end, as
    /// raft-engine rewrites laggard regions), a larger one is listed by
    /// [`LogCore::compact_wanted`](super::LogCore::compact_wanted) for the application to
    /// snapshot and purge. Default 4.
    pub space_factor: u64,
    /// The most live bytes a laggard group may have for the log to rewrite it (default 0: a
    /// sixteenth of a segment).
    pub rewrite_max_bytes: u64,
    /// A protocol mutant the crash campaign must catch (test machinery).
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    pub mutation: Option<LogMutation>,
}

/// Protocol mutants of the log, each breaking one rule its crash checker must catch (the
/// `test-util` feature; never in production).
#[cfg(feature = "test-util")]
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMutation {
    /// A recycled segment keeps its previous salt: its stale frames verify again.
    ReuseSalt,
    /// A purge frees segments by its own group's purge point alone, ignoring the entries
    /// other groups still need in them.
    FreeNeeded,
    /// A rewrite leaves out its group's newest live entry, and still releases the segments
    /// behind it.
    RewriteShort,
    /// A purge frees a segment that holds a group's newest durable vote without saving that
    /// vote to the group's meta file first.
    FreeVote,
    /// A purge frees a segment that holds a group's newest durable purge point (a `Purge`
    /// frame) without saving that purge point to the group's meta file first.
    FreePurge,
    /// A purge frees a segment that holds the `Commit` frame of a group's newest durable
    /// committed id without saving that id to the group's meta file first.
    FreeCommit,
    /// A `Commit` frame counts the committed id durable although the entry it names is
    /// purged (recovery ignores such a frame).
    CommitPurged,
    /// Recovery ignores a `Commit` frame whose entry a later `Purge` frame of its group
    /// purged (it checks the entry's term only): the meta file's older id stands, below the
    /// one reported durable.
    CommitForgetsPurge,
    /// A purged segment's `.free` file becomes a spare without its zeroing write: its old
    /// header stays under a segment name until a roll overwrites it.
    SkipZeroing,
    /// Recovery keeps the damage found in a group's frames (indexes that jump past a purge
    /// a snapshot install made) although the group's drop tombstone follows: the log of a
    /// dropped group then refuses to open.
    DropKeepsDamage,
}

/// The smallest volume the store opens on with segments derived from its size
/// ([`LogConfig::segment_bytes_for`], `segment_bytes: 0`, the default): 16 MiB, which gives
/// 1 MiB segments (entries of up to 1 MiB less 4144 bytes). Below it, a new log is refused
/// (an existing one keeps its own segments).
pub const MIN_VOLUME_BYTES: u64 = 16 << 20;

impl LogConfig {
    /// The segment size for a new log on a volume of `capacity_bytes`: a sixteenth of it,
    /// between 1 MiB and 64 MiB, rounded down to 4096 bytes. The rule `vellum serve` uses.
    pub fn segment_bytes_for(capacity_bytes: u64) -> u64 {
        (capacity_bytes / 16).clamp(1 << 20, 64 << 20) / 4096 * 4096
    }
}

/// Which thread performs the log's write-through writes (the combining queue is the same in
/// every mode: callers that arrive during a write share the next one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogIo {
    /// A dedicated IO thread per log: callers queue and return, so an async runtime's
    /// worker never blocks on the disk. The default.
    #[default]
    Thread,
    /// Each call that queues work hands the write to `tokio::task::spawn_blocking` (inline
    /// when called outside a tokio runtime).
    SpawnBlocking,
    /// The caller that finds no write in progress writes in its own thread: no handoff, but
    /// it blocks that thread for the write. For synchronous embedders and deterministic
    /// tests.
    Inline,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            dir: "/raft".into(),
            segment_bytes: 0,
            hot_window_bytes: 16 << 20,
            max_batch_bytes: 4 << 20,
            background_spares: true,
            io: LogIo::Thread,
            commit_lag: Duration::from_millis(50),
            recycled_segments: 2,
            space_factor: 4,
            rewrite_max_bytes: 0,
            #[cfg(feature = "test-util")]
            mutation: None,
        }
    }
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Its log index.
    pub index: u64,
    /// The term it was proposed in.
    pub term: u64,
    /// The encoded entry (opaque to the log).
    pub payload: Arc<[u8]>,
}

/// Completion of a queued write.
pub type Callback = Box<dyn FnOnce(Result<(), SharedError>) + Send>;

/// A write waiting in the queue, with the callback that learns its outcome; each of one
/// group.
pub(crate) enum Item {
    Entries {
        group: Arc<Group>,
        entries: Vec<LogEntry>,
        done: Callback,
    },
    /// A truncation tombstone; `drop` marks the group's drop (since 0), which voids its
    /// earlier `Vote` frames too.
    Truncate {
        group: Arc<Group>,
        since: u64,
        drop: bool,
        done: Callback,
    },
    /// A vote save as a `Vote` frame in the shared write (`LogCore::save_vote`): `after` is
    /// the seq of the group's newest meta save queued before it.
    Vote {
        group: Arc<Group>,
        vote: Vec<u8>,
        after: u64,
        done: Callback,
    },
    /// A purge point as a `Purge` frame in the shared write (`LogCore::purge`): the group's
    /// entries at or below `upto` are purged; `purged` is the caller's encoding of the id.
    Purge {
        group: Arc<Group>,
        upto: u64,
        purged: Vec<u8>,
        done: Callback,
    },
    /// Copies of every live entry of the group (`LogCore::rewrite`), written as `Rewrite`
    /// frames; once durable, no older segment holds anything the group needs.
    Rewrite {
        group: Arc<Group>,
        entries: Vec<LogEntry>,
        /// The group's committed id when it names one of the copies: a `Commit` frame after
        /// them carries it again, so that freeing the segment of its last `Commit` frame does
        /// not take it back.
        commit: Option<PendingCommit>,
        done: Callback,
    },
    /// A meta save of the group's newest state.
    Meta {
        group: Arc<Group>,
        state: MetaState,
        done: Callback,
    },
}

impl Complete for Item {
    type Error = SharedError;

    fn complete(self, result: Result<(), SharedError>) {
        match self {
            Item::Entries { done, .. }
            | Item::Truncate { done, .. }
            | Item::Rewrite { done, .. }
            | Item::Vote { done, .. }
            | Item::Purge { done, .. }
            | Item::Meta { done, .. } => {
                done(result);
            }
        }
    }

    fn writer_panicked() -> SharedError {
        Arc::new(Error::WriterPanicked)
    }
}

/// A torn tail that recovery found and open fences before anything else is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Torn {
    /// Segment offset where the valid frames end.
    pub from: u64,
    /// Aligned end of the damaged bytes.
    pub to: u64,
    /// Valid frames of the in-flight write found in the torn region (dropped).
    pub dropped_frames: usize,
    /// Bytes that could not be read at all (EIO) inside the torn region.
    pub unreadable_bytes: u64,
    /// The torn bytes lie at the end of the segment *before* the last one, and the last one
    /// holds no frame yet: the fence in flight at the power cut, which open writes again at
    /// the start of the last segment.
    pub in_previous_segment: bool,
}

/// What recovery found (for logs and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments holding entries.
    pub segments: usize,
    /// Entries found.
    pub entries: usize,
    /// Bytes scanned.
    pub scanned_bytes: u64,
    /// The torn tail found and cut, if any.
    pub torn: Option<Torn>,
    /// The size of the log's segments (read from the log when it has any).
    pub segment_bytes: u64,
}

/// The state the API, the writer and open share.
pub(crate) struct Shared {
    pub volume: Volume,
    pub config: LogConfig,
    /// Bytes of every segment the log makes from now on: the size its existing segments
    /// have, or the configured size for a log that has none.
    pub segment_bytes: u64,
    /// The groups the log hosts, by id; group 0 always.
    pub groups: RwLock<BTreeMap<u64, Arc<Group>>>,
    /// The groups whose committed id may be pending (saved, not yet durable): what
    /// [`Shared::committed_pending`] looks at, so that a write does not lock every group's
    /// meta. `save_committed` adds its group after its meta lock; an id leaves only when its
    /// group has nothing pending, checked under this lock. Lock order: this, then `groups`,
    /// then a group's meta.
    pub committing: Mutex<BTreeSet<u64>>,
    /// Groups that pin old segments with more live bytes than the log rewrites: the
    /// application should snapshot and purge them (`LogCore::compact_wanted`).
    pub compact_wanted: Mutex<BTreeSet<u64>>,
    pub segments: Mutex<Segments>,
    /// A barrier must follow each write (a buffered carrier that is not memory).
    pub needs_barrier: bool,
    /// How long the writer's durable writes take now.
    pub disk: DiskLatency,
    /// Where purged segments go (reused by the spare maker, or deleted).
    pub retirer: super::segments::Retirer,
}

/// How long the log's durable writes take now: a moving average (1/8) of the writer's
/// batches, each one durable write of the carrier (and its barrier, on a buffered one).
/// Cheap to clone; a proposal batcher paces by it (`Batcher::start_paced`).
#[derive(Debug, Clone, Default)]
pub struct DiskLatency(Arc<AtomicU64>);

impl DiskLatency {
    /// No write measured yet.
    pub fn new() -> DiskLatency {
        DiskLatency::default()
    }

    /// Adds one durable write that took `took`.
    pub fn record(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        let _ = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |mean| {
            Some(if mean == 0 { ns } else { mean - mean / 8 + ns / 8 })
        });
    }

    /// The moving average, once a write was measured.
    pub fn get(&self) -> Option<Duration> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }
}

/// One raft group of the log: the index of its entries, its small records (vote, committed
/// id, purge point) in a meta file of its own (`DIR/meta` for group 0, `DIR/groups/ID`
/// for the others), and its committed index known durable.
pub(crate) struct Group {
    pub id: u64,
    pub index: RwLock<Index>,
    /// The newest queued meta state; saves build on it.
    pub meta: Mutex<MetaCell>,
    pub meta_file: File,
    /// The committed index known durable (in a meta slot or a `Commit` frame), plus one;
    /// 0 for none. Written by the writer only.
    pub durable_committed: AtomicU64,
    /// The purged index known durable (in a meta slot or a `Purge` frame), plus one; 0 for
    /// none. Written by the writer only: a purge frees a segment only past every group's
    /// durable purge point.
    pub durable_purged: AtomicU64,
    /// Set once the group is dropped: its handles refuse every call.
    pub dropped: AtomicBool,
    /// The segment holding the group's newest durable vote as a `Vote` frame, when its meta
    /// file does not hold that vote (0: it does). A purge saves the meta file before it
    /// frees that segment. Written by the writer (under `segments`) and by open.
    pub vote_seq: AtomicU64,
    /// The segment holding the group's newest durable purge point as a `Purge` frame, when
    /// its meta file does not hold it (0: it does); kept like `vote_seq`.
    pub purge_seq: AtomicU64,
    /// The segment holding the `Commit` frame that made the group's newest durable committed
    /// id durable, when its meta file does not hold that id (0: it does); kept like
    /// `vote_seq`. (A purge is a frame too, so no meta save of it holds the id.)
    pub commit_seq: AtomicU64,
}

impl Shared {
    /// The group `id`, while the log hosts it.
    pub fn group(&self, id: u64) -> Option<Arc<Group>> {
        read_lock(&self.groups).get(&id).cloned()
    }

    /// The groups whose committed id is saved but not yet durable, with that id.
    pub fn committed_pending(&self) -> Vec<(Arc<Group>, PendingCommit)> {
        let mut ids = lock(&self.committing);
        let groups = read_lock(&self.groups);
        let mut pending = Vec::new();
        ids.retain(|id| {
            let Some(group) = groups.get(id) else { return false };
            let Some(commit) = group.committed_pending() else { return false };
            pending.push((Arc::clone(group), commit));
            true
        });
        pending
    }
}

impl Group {
    /// The committed index known durable.
    pub fn durable_committed(&self) -> Option<u64> {
        self.durable_committed.load(Ordering::Acquire).checked_sub(1)
    }

    /// The purged index known durable.
    pub fn durable_purged(&self) -> Option<u64> {
        self.durable_purged.load(Ordering::Acquire).checked_sub(1)
    }

    /// Records that the purge point `index` is durable (never moves back).
    pub fn purged_durable(&self, index: Option<u64>) {
        if let Some(i) = index {
            self.durable_purged.fetch_max(i + 1, Ordering::AcqRel);
        }
    }

    /// Whether the group was dropped.
    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    /// Records that the committed id of `index` is durable (never moves back).
    pub fn committed_durable(&self, index: Option<u64>) {
        if let Some(i) = index {
            self.durable_committed.fetch_max(i + 1, Ordering::AcqRel);
        }
    }

    /// The committed id saved but not yet durable.
    pub fn committed_pending(&self) -> Option<PendingCommit> {
        let meta = lock(&self.meta);
        let index = meta.state.committed_index?;
        if self.durable_committed().is_some_and(|d| d >= index) {
            return None;
        }
        let payload = meta.state.committed.clone()?;
        Some(PendingCommit { index, term: meta.committed_term, payload })
    }
}

/// The newest queued meta state, and the term of its committed id, which the meta slots do
/// not hold (only a `Commit` frame records it).
#[derive(Debug, Default)]
pub(crate) struct MetaCell {
    pub state: MetaState,
    /// The term of `state.committed` as `LogCore::save_committed` was given it; 0 for the id
    /// recovery found, which is durable already and so never carried again.
    pub committed_term: u64,
}

/// A committed id saved and not yet durable: what a `Commit` frame would carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingCommit {
    pub index: u64,
    pub term: u64,
    /// The caller's encoding of the log id.
    pub payload: Vec<u8>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks is a bug that already failed loudly (and the
    // writer's panic fails every later write, see `queue.rs`); readers keep working.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn read_lock<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn write_lock<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `DIR/NAME` as a volume path.
pub(crate) fn join(dir: &str, name: &str) -> Vec<u8> {
    format!("{}/{name}", dir.trim_end_matches('/')).into_bytes()
}
