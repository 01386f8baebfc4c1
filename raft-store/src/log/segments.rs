//! Segment files inside the volume, and the spare-segment maker.
//!
//! A segment is a preallocated file `DIR/log/NNNNNNNN.seg` whose blocks are written and
//! committed before the log uses it, so appending into it is a pure overwrite: one
//! write-through write, no allocation, no commit. A background thread keeps one *spare*
//! ready (created, preallocated, zero-filled, committed; its header all zero). Rolling to a
//! new segment is one durable write of the spare's header; creating and deleting segments
//! are the only metadata commits the log makes.
//!
//! **Recycling.** A purge does not delete every segment it frees: up to
//! `LogConfig::recycled_segments` of them are renamed `NNNNNNNN.free` in the purge's commit
//! (a `.free` file is never part of the log, whatever it holds). The maker makes its next spare
//! from one of them instead of a new file: one durable write of zeros over its header and
//! first frame block (which makes it a spare by the rule above, whatever lies after), then a
//! rename to a new segment name (one commit). No 64 MiB zero-fill competes with the appends,
//! and the blocks are ones the carrier already holds. The bytes after the first frame block
//! stay: the earlier use's frames, sealed with its salt, which the roll replaces with a fresh
//! one ([`fresh_salt`]), so they never verify again (segment format 5, docs/RAFT-LOG.md). A
//! freed segment that a reader still holds open is not reused until the reader lets go.
//!
//! The maker never gives up: a failure (a volume briefly full, say) is counted
//! (`vellum_log_spare_failures_total`), logged, and retried with a growing pause, so a roll
//! hours later finds a spare once space is back. A roll that finds none waits a bounded time
//! for the maker before it fails.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vellum_engine::{File, IoPolicy, Tier, Volume};

use super::frame::{SEGMENT_HEADER_LEN, Seal};
use super::state::lock;
use crate::error::{Error, Result, SharedError};
use crate::metrics as m;

/// The first pause after a failed spare, doubled per failure up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long a roll waits for a spare the maker is still retrying.
const TAKE_WAIT: Duration = Duration::from_secs(2);

/// One active segment.
#[derive(Debug)]
pub struct SegInfo {
    pub seal: Seal,
    /// Bytes of the segment file.
    pub len: u64,
    pub file: Arc<File>,
    pub path: Vec<u8>,
    /// Per group: the highest live entry index written into it (absent: none, every one
    /// truncated since, or every one rewritten into a later segment).
    pub max_index: BTreeMap<u64, u64>,
}

impl SegInfo {
    /// Records entry `index` of `group` written into this segment.
    pub fn holds(&mut self, group: u64, index: u64) {
        let max = self.max_index.entry(group).or_insert(index);
        *max = (*max).max(index);
    }

    /// Records that `group` truncated every entry at or after `since`.
    pub fn truncated(&mut self, group: u64, since: u64) {
        if let Some(max) = self.max_index.get_mut(&group)
            && *max >= since
        {
            match since.checked_sub(1) {
                Some(last) => *max = last,
                None => {
                    self.max_index.remove(&group);
                }
            }
        }
    }

    /// Records that every live entry of `group` was rewritten into a later segment (durably):
    /// this one no longer holds any the group needs.
    pub fn released(&mut self, group: u64) {
        self.max_index.remove(&group);
    }

    /// The groups that still need an entry of this segment (`purged` as for `unneeded`).
    pub fn pinned_by(&self, purged: impl Fn(u64) -> Option<u64>) -> Vec<u64> {
        self.max_index
            .iter()
            .filter(|&(&group, &max)| purged(group).is_none_or(|p| max > p))
            .map(|(&g, _)| g)
            .collect()
    }

    /// Whether no group needs an entry of this segment any more: every group with live
    /// entries in it has purged past them (`purged(group)`: the group's durable purge point,
    /// `None` for a group that purged nothing).
    pub fn unneeded(&self, purged: impl Fn(u64) -> Option<u64>) -> bool {
        self.max_index.iter().all(|(&group, &max)| purged(group).is_some_and(|p| max <= p))
    }
}

/// The active segments by sequence number.
#[derive(Debug, Default)]
pub struct Segments {
    pub by_seq: BTreeMap<u64, SegInfo>,
}

/// A spare segment ready to activate.
#[derive(Debug)]
pub struct Spare {
    pub path: Vec<u8>,
    pub file: Arc<File>,
    pub len: u64,
    /// A recycled file's previous salt, which its stale frames verify under: the roll must
    /// choose another ([`fresh_salt`]). `None`: a new file, or one found at open whose
    /// previous salt is no longer known.
    pub stale_salt: Option<u64>,
}

/// A purged segment kept for reuse (`NNNNNNNN.free`).
#[derive(Debug)]
pub struct Free {
    pub path: Vec<u8>,
    pub file: Arc<File>,
    pub len: u64,
    /// The salt its frames are sealed with, when known.
    pub salt: Option<u64>,
}

/// A random salt under which no frame sealed with `stale` verifies at the same offset. A
/// frame's checksum starts from the salt (crc32c is affine), so two salts whose checksums
/// differ give every identical frame a different checksum; salts with equal checksums (one
/// pair in 2^32) are drawn again.
pub fn fresh_salt(stale: Option<u64>) -> u64 {
    loop {
        let salt = super::writer::random_salt();
        match stale {
            Some(old)
                if crc32c::crc32c(&old.to_le_bytes()) == crc32c::crc32c(&salt.to_le_bytes()) => {}
            _ => return salt,
        }
    }
}

/// Path of the reusable file that segment file `path` (`NNNNNNNN.seg`) becomes.
pub fn free_path(path: &[u8]) -> Vec<u8> {
    let stem = path.strip_suffix(b".seg").unwrap_or(path);
    [stem, b".free"].concat()
}

/// How the maker is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpareStatus {
    /// A spare is ready to activate.
    pub ready: bool,
    /// Failed attempts since the maker started.
    pub failures: u64,
    /// Failed attempts since its last success (0: healthy).
    pub failing: u64,
    /// Spares made from a purged segment since the log opened.
    pub recycled: u64,
    /// Spares made as new files since the log opened: each took a segment's bytes of the
    /// volume's free space (a recycled one took none).
    pub created: u64,
    /// Purged segments kept for reuse now.
    pub free: usize,
}

#[derive(Debug, Default)]
struct SpareState {
    ready: Option<Spare>,
    shutdown: bool,
    failures: u64,
    failing: u64,
    last_error: Option<SharedError>,
    next_file_no: u64,
    /// Purged segments kept for reuse, oldest first.
    free: Vec<Free>,
    /// Spares made from a purged segment.
    recycled: u64,
    /// Spares made as new files.
    created: u64,
}

/// How the maker makes a spare.
#[derive(Debug, Clone)]
struct Making {
    volume: Volume,
    dir: Vec<u8>,
    segment_bytes: u64,
    /// A barrier must follow a write (a buffered carrier).
    needs_barrier: bool,
}

/// Keeps one spare segment ready, made by a background thread (or, without one, made when
/// it is taken: deterministic, for tests).
#[derive(Debug)]
pub struct SpareMaker {
    state: Arc<(Mutex<SpareState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    inline: Option<Making>,
    /// Purged segments kept at most.
    keep: usize,
    segment_bytes: u64,
}

/// Where purged segments go: reused by the maker, or deleted (`LogCore::purge`).
#[derive(Debug, Clone)]
pub struct Retirer {
    state: Arc<(Mutex<SpareState>, Condvar)>,
    keep: usize,
    segment_bytes: u64,
}

impl Retirer {
    /// Retires purged segments (removed from the active set): keeps up to the configured
    /// number for reuse as `.free` files, deletes the rest; the caller commits. The pool is
    /// handed to the maker only after that commit (`adopt`).
    pub fn retire(&self, volume: &Volume, doomed: Vec<(Vec<u8>, SegInfo)>) -> Result<Vec<Free>> {
        let room = self.keep.saturating_sub(lock(&self.state.0).free.len());
        let mut kept = Vec::new();
        for (path, info) in doomed {
            if kept.len() < room && info.len == self.segment_bytes {
                let to = free_path(&path);
                volume.rename(&path, &to)?;
                kept.push(Free {
                    path: to,
                    file: info.file,
                    len: info.len,
                    salt: Some(info.seal.salt),
                });
            } else {
                drop(info);
                volume.remove(&path)?;
            }
        }
        Ok(kept)
    }

    /// How the maker is doing. Takes only the spare state's lock, never the log writer's:
    /// callable from anywhere while the IO thread writes.
    pub fn status(&self) -> SpareStatus {
        let s = lock(&self.state.0);
        SpareStatus {
            ready: s.ready.is_some(),
            failures: s.failures,
            failing: s.failing,
            recycled: s.recycled,
            created: s.created,
            free: s.free.len(),
        }
    }

    /// Hands committed `.free` files to the maker.
    pub fn adopt(&self, free: Vec<Free>) {
        if free.is_empty() {
            return;
        }
        let (m, cv) = &*self.state;
        lock(m).free.extend(free);
        cv.notify_all();
    }
}

/// Zeroes the header and first frame block of a `.free` file (one durable write: it is then
/// a spare by the all-zero rule, whatever follows) and renames it to segment file `path`
/// (one commit). A power cut before the rename leaves a `.free` file, never a segment.
fn recycle(making: &Making, free: Free, path: &[u8]) -> Result<Spare> {
    let zeros = vellum_engine::AlignedBuf::zeroed(2 * SEGMENT_HEADER_LEN, SEGMENT_HEADER_LEN);
    free.file.write_at(zeros.as_slice(), 0)?;
    if making.needs_barrier {
        making.volume.sync()?;
    }
    making.volume.rename(&free.path, path)?;
    making.volume.commit()?;
    metrics::counter!(m::SEGMENTS_RECYCLED_TOTAL).increment(1);
    Ok(Spare { path: path.to_vec(), file: free.file, len: free.len, stale_salt: free.salt })
}

/// Makes spare number `n`: from a purged segment nobody reads any more, or a new file.
fn make(making: &Making, state: &(Mutex<SpareState>, Condvar), n: u64) -> Result<Spare> {
    let path = segment_path(&making.dir, n);
    let reusable = {
        let mut s = lock(&state.0);
        let at = s
            .free
            .iter()
            .position(|f| f.len == making.segment_bytes && Arc::strong_count(&f.file) == 1);
        at.map(|i| s.free.remove(i))
    };
    if let Some(free) = reusable {
        let spare = recycle(making, free, &path)?;
        lock(&state.0).recycled += 1;
        Ok(spare)
    } else {
        let spare = create_segment(&making.volume, &path, making.segment_bytes)?;
        lock(&state.0).created += 1;
        Ok(spare)
    }
}

/// Path of segment file number `n` under `dir`.
/// The IO tiers of a segment: appends go direct (write-through in production: durable when
/// the carrier write returns, never parked in the cache), reads of older entries (a follower
/// catching up) go through the volume's cache, with readahead along the segment's extent.
/// Recovery's scan, which reads whole segments into its own buffers, reads them direct.
pub const SEGMENT_POLICY: IoPolicy = IoPolicy { read: Tier::Buffered, write: Tier::Direct };

pub fn segment_path(dir: &[u8], n: u64) -> Vec<u8> {
    let mut p = dir.to_vec();
    p.extend_from_slice(format!("/{n:08}.seg").as_bytes());
    p
}

/// Creates, preallocates (written zeros) and commits one segment file. On failure nothing
/// of it stays behind to be committed later by someone else.
pub fn create_segment(volume: &Volume, path: &[u8], bytes: u64) -> Result<Spare> {
    let file = volume.create_file_with(path, SEGMENT_POLICY)?;
    let made = file.preallocate(0, bytes).and_then(|()| volume.commit());
    if let Err(e) = made {
        drop(file);
        let _ = volume.remove(path);
        return Err(e.into());
    }
    Ok(Spare { path: path.to_vec(), file: Arc::new(file), len: bytes, stale_salt: None })
}

impl SpareMaker {
    /// Starts the maker; `spare` is a spare found at open, `free` the `.free` files found
    /// there, `next_file_no` the first unused file number, `keep` the most purged segments
    /// kept for reuse.
    #[allow(clippy::too_many_arguments)] // one call site, in open
    pub fn start(
        volume: Volume,
        dir: Vec<u8>,
        segment_bytes: u64,
        needs_barrier: bool,
        (spare, free): (Option<Spare>, Vec<Free>),
        next_file_no: u64,
        keep: usize,
        background: bool,
    ) -> SpareMaker {
        let state = Arc::new((
            Mutex::new(SpareState { ready: spare, next_file_no, free, ..SpareState::default() }),
            Condvar::new(),
        ));
        let making = Making { volume, dir, segment_bytes, needs_barrier };
        if !background {
            return SpareMaker { state, thread: None, inline: Some(making), keep, segment_bytes };
        }
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("vellum-spare".into())
            .spawn(move || Self::run(&shared, &making))
            .ok();
        SpareMaker { state, thread, inline: None, keep, segment_bytes }
    }

    /// Where purged segments go.
    pub fn retirer(&self) -> Retirer {
        Retirer {
            state: Arc::clone(&self.state),
            keep: self.keep,
            segment_bytes: self.segment_bytes,
        }
    }

    fn run(state: &(Mutex<SpareState>, Condvar), making: &Making) {
        let (m, cv) = state;
        let mut pause = RETRY_FIRST;
        loop {
            let n = {
                let mut s = lock(m);
                while s.ready.is_some() && !s.shutdown {
                    s = cv.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                if s.shutdown {
                    return;
                }
                s.next_file_no += 1;
                s.next_file_no - 1
            };
            let made = make(making, state, n);
            let mut s = lock(m);
            match made {
                Ok(spare) => {
                    if s.failing > 0 {
                        tracing::info!(after = s.failing, "a spare log segment is ready again");
                    }
                    s.ready = Some(spare);
                    s.failing = 0;
                    s.last_error = None;
                    pause = RETRY_FIRST;
                }
                Err(e) => {
                    s.failures += 1;
                    s.failing += 1;
                    metrics::counter!(m::SPARE_FAILURES_TOTAL).increment(1);
                    if s.failing == 1 || s.failing.is_power_of_two() {
                        tracing::error!(
                            error = %e,
                            attempts = s.failing,
                            retry_in = ?pause,
                            "creating a spare log segment failed; retrying"
                        );
                    }
                    s.last_error = Some(Arc::new(e));
                    cv.notify_all();
                    // Wait before the retry (woken early only by shutdown).
                    let deadline = Instant::now() + pause;
                    while !s.shutdown && Instant::now() < deadline {
                        let left = deadline.saturating_duration_since(Instant::now());
                        s = cv
                            .wait_timeout(s, left)
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .0;
                    }
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
            metrics::gauge!(m::SPARE_READY).set(if s.ready.is_some() { 1.0 } else { 0.0 });
            cv.notify_all();
        }
    }

    /// Takes the spare, waiting for the maker if it is still at work (a bounded time while
    /// it is failing).
    pub fn take(&self) -> Result<Spare> {
        let (m, cv) = &*self.state;
        let mut s = lock(m);
        if let Some(making) = &self.inline {
            if let Some(spare) = s.ready.take() {
                return Ok(spare);
            }
            s.next_file_no += 1;
            let n = s.next_file_no - 1;
            drop(s);
            return make(making, &self.state, n);
        }
        let deadline = Instant::now() + TAKE_WAIT;
        loop {
            if let Some(spare) = s.ready.take() {
                metrics::gauge!(m::SPARE_READY).set(0.0);
                cv.notify_all();
                return Ok(spare);
            }
            if s.shutdown || self.thread.is_none() {
                return Err(Error::Closed);
            }
            let now = Instant::now();
            if s.failing > 0 && now >= deadline {
                return Err(s.last_error.clone().map_or(Error::Closed, Error::NoSpare));
            }
            let left = if s.failing > 0 { deadline - now } else { TAKE_WAIT };
            s = cv.wait_timeout(s, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }

    /// Stops the maker thread.
    pub fn stop(&mut self) {
        {
            let (m, cv) = &*self.state;
            lock(m).shutdown = true;
            cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SpareMaker {
    fn drop(&mut self) {
        self.stop();
    }
}
