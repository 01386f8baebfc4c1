//! Segment files inside the volume, and the spare-segment maker.
//!
//! A segment is a preallocated file `DIR/log/NNNNNNNN.seg` whose blocks are written and
//! committed before the log uses it, so appending into it is a pure overwrite: one
//! write-through write, no allocation, no commit. A background thread keeps a *spare*
//! ready (created, preallocated, zero-filled, committed; its header all zero). Rolling to a
//! new segment is one durable write of the spare's header; creating and deleting segments
//! are the only metadata commits the log makes.
//!
//! **Recycling.** A purge does not delete every segment it frees: up to
//! `LogConfig::recycled_segments` of them are renamed `NNNNNNNN.free` in the purge's commit
//! (a `.free` file is never part of the log, whatever it holds). The maker *zeroes* each in
//! the background: one durable write of zeros over its header and first frame block, after
//! which the file would be a spare by the rule above, whatever lies after, if it had a
//! segment's name. It gets one in the next commit the log makes for its segments anyway
//! (*promotion*): a purge's commit, or the one of a spare the maker makes because none is
//! ready, name every zeroed `.free` file no reader holds a new segment, ready to activate.
//! Where a log rolls about once per purge, a segment's cycle then costs one commit, the
//! purge's, and one 8 KiB write; where it rolls several times per purge, the maker's one
//! commit readies every zeroed file for them. The maker makes a spare itself only when none
//! is ready: from a `.free` file (zeroed first unless it is already), or a new file. No
//! 64 MiB zero-fill competes with the appends, and the blocks are ones the carrier already
//! holds. The bytes after the first frame block stay: the earlier use's frames, sealed with
//! its salt, which the roll replaces with a fresh one ([`fresh_salt`]), so they never verify
//! again (segment format 5, docs/RAFT-LOG.md). A freed segment that a reader still holds
//! open is neither zeroed nor reused until the reader lets go. The ready spares beyond one
//! and the `.free` files together, the pool, stay within `LogConfig::recycled_segments` as
//! each purge counts them (files in the hands of a racing purge or of the maker are not
//! counted; open trims what is over).
//!
//! Invariants: a file is zeroed only under a `.free` name (a segment's header is never
//! zeroed in place: torn, that write could leave an active segment's header beside a damaged
//! first frame); a `.free` file is renamed to a segment name only once its zeroing write
//! returned (and, on a buffered carrier, a barrier followed it), so either name is safe
//! whichever commit of the volume makes the rename durable; a spare joins the ready queue
//! only after a commit that named it returned. File numbers are taken from `.free` names
//! too (promotion hands them out of roll order), so no new file takes a `.free` file's.
//! The spare state's lock is never held across a volume operation: a roll's `take` waits
//! for no commit.
//!
//! The maker never gives up: a failure (a volume briefly full, say) is counted
//! (`vellum_log_spare_failures_total`), logged, and retried with a growing pause, so a roll
//! hours later finds a spare once space is back. A roll that finds none waits a bounded time
//! for the maker before it fails.

use std::collections::{BTreeMap, VecDeque};
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
    /// Its header and first frame block are zero (durably): a segment name makes it a spare.
    pub zeroed: bool,
}

impl Free {
    /// Whether it can become a spare now: a segment's size, and no reader holds it open.
    fn reusable(&self, segment_bytes: u64) -> bool {
        self.len == segment_bytes && Arc::strong_count(&self.file) == 1
    }

    /// The spare it is once renamed to segment file `path`.
    fn into_spare(self, path: Vec<u8>) -> Spare {
        Spare { path, file: self.file, len: self.len, stale_salt: self.salt }
    }
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
    /// Spares ready to activate, oldest first: made by the maker, or promoted. With the
    /// `.free` files, at most `keep` beyond the one a roll needs (`Retirer::retire`).
    ready: VecDeque<Spare>,
    shutdown: bool,
    failures: u64,
    failing: u64,
    last_error: Option<SharedError>,
    next_file_no: u64,
    /// Purged segments kept for reuse, oldest first (one the maker is zeroing is out of it).
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
    /// The test-util mutant `LogMutation::SkipZeroing` (false otherwise).
    skip_zeroing: bool,
}

/// Keeps a spare segment ready, made by a background thread (or, without one, made when it
/// is taken: deterministic, for tests).
#[derive(Debug)]
pub struct SpareMaker {
    state: Arc<(Mutex<SpareState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    /// No maker thread: a spare is made when it is taken, a `.free` file zeroed when a
    /// purge hands it over.
    inline: bool,
    making: Making,
    /// Purged segments kept at most.
    keep: usize,
}

/// Where purged segments go: reused by the maker, or deleted (`LogCore::purge`).
#[derive(Debug, Clone)]
pub struct Retirer {
    state: Arc<(Mutex<SpareState>, Condvar)>,
    keep: usize,
    making: Making,
    /// No maker thread: `adopt` zeroes the files it hands over itself.
    inline: bool,
}

/// What a purge's commit makes durable besides the freed segments' removal: `.free` files
/// for the pool, and spares promoted from zeroed ones.
#[derive(Debug, Default)]
pub struct Retired {
    kept: Vec<Free>,
    promoted: Vec<Spare>,
}

impl Retirer {
    /// Retires purged segments (removed from the active set): promotes every zeroed `.free`
    /// file, keeps up to the configured number of the purged ones for reuse as `.free` files
    /// (the pool: `.free` files and the ready spares beyond one), deletes the rest; the caller
    /// commits. The files are handed to the maker only after that commit (`adopt`).
    pub fn retire(&self, volume: &Volume, doomed: Vec<(Vec<u8>, SegInfo)>) -> Result<Retired> {
        let (picked, room) = {
            let mut s = lock(&self.state.0);
            let picked = pick_zeroed(&mut s, &self.making);
            let pooled = s.free.len() + (s.ready.len() + picked.len()).saturating_sub(1);
            (picked, self.keep.saturating_sub(pooled))
        };
        // The volume's operations outside the spare state's lock (one may wait for a commit
        // in progress): a roll's `take` never waits for them.
        let mut retired = Retired { promoted: promote(&self.state, volume, picked)?, kept: vec![] };
        for (path, info) in doomed {
            if retired.kept.len() < room && info.len == self.making.segment_bytes {
                let to = free_path(&path);
                volume.rename(&path, &to)?;
                retired.kept.push(Free {
                    path: to,
                    file: info.file,
                    len: info.len,
                    salt: Some(info.seal.salt),
                    zeroed: false,
                });
            } else {
                drop(info);
                volume.remove(&path)?;
            }
        }
        Ok(retired)
    }

    /// How the maker is doing. Takes only the spare state's lock, never the log writer's:
    /// callable from anywhere while the IO thread writes.
    pub fn status(&self) -> SpareStatus {
        let s = lock(&self.state.0);
        SpareStatus {
            ready: !s.ready.is_empty(),
            failures: s.failures,
            failing: s.failing,
            recycled: s.recycled,
            created: s.created,
            free: s.free.len(),
        }
    }

    /// Hands what a committed `retire` produced to the maker: the promoted spares to the
    /// ready queue, the `.free` files to the pool (zeroed here without a maker thread; a
    /// failed zeroing leaves the file to be zeroed when it is made a spare).
    pub fn adopt(&self, retired: Retired) {
        let Retired { mut kept, promoted } = retired;
        if kept.is_empty() && promoted.is_empty() {
            return;
        }
        // Zeroed only now, under the `.free` names the caller's commit made durable.
        if self.inline {
            for free in &mut kept {
                if free.reusable(self.making.segment_bytes) {
                    match zero(&self.making, free) {
                        Ok(()) => free.zeroed = true,
                        Err(e) => tracing::warn!(error = %e, "zeroing a purged segment failed"),
                    }
                }
            }
        }
        let (m, cv) = &*self.state;
        let mut s = lock(m);
        ready(&mut s, promoted);
        s.free.extend(kept);
        cv.notify_all();
    }
}

/// Takes every zeroed `.free` file no reader holds out of the pool, each with the segment
/// name it is to have (a new file number), for [`promote`].
fn pick_zeroed(s: &mut SpareState, making: &Making) -> Vec<(Free, Vec<u8>)> {
    let mut picked = Vec::new();
    while let Some(at) = s.free.iter().position(|f| f.zeroed && f.reusable(making.segment_bytes)) {
        let free = s.free.remove(at);
        picked.push((free, segment_path(&making.dir, s.next_file_no)));
        s.next_file_no += 1;
    }
    picked
}

/// Renames picked `.free` files to their segment names: spares by the all-zero rule once a
/// commit of the volume makes the names durable (the caller commits, then hands them to
/// [`ready`]). Called without the spare state's lock. On a failure the files not renamed go
/// back to the pool.
fn promote(
    state: &(Mutex<SpareState>, Condvar),
    volume: &Volume,
    picked: Vec<(Free, Vec<u8>)>,
) -> Result<Vec<Spare>> {
    let mut promoted = Vec::new();
    let mut picked = picked.into_iter();
    while let Some((free, path)) = picked.next() {
        if let Err(e) = volume.rename(&free.path, &path) {
            let mut s = lock(&state.0);
            s.free.push(free);
            s.free.extend(picked.map(|(f, _)| f));
            return Err(e.into());
        }
        promoted.push(free.into_spare(path));
    }
    Ok(promoted)
}

/// Adds spares whose names a commit made durable to the ready queue.
fn ready(s: &mut SpareState, spares: Vec<Spare>) {
    if spares.is_empty() {
        return;
    }
    metrics::counter!(m::SEGMENTS_RECYCLED_TOTAL).increment(spares.len() as u64);
    s.recycled += spares.len() as u64;
    s.ready.extend(spares);
    metrics::gauge!(m::SPARE_READY).set(1.0);
}

/// Zeroes the header and first frame block of a `.free` file: one durable write (and a
/// barrier on a buffered carrier). With a segment name it is then a spare by the all-zero
/// rule, whatever follows.
fn zero(making: &Making, free: &Free) -> Result<()> {
    if making.skip_zeroing {
        return Ok(());
    }
    let zeros = vellum_engine::AlignedBuf::zeroed(2 * SEGMENT_HEADER_LEN, SEGMENT_HEADER_LEN);
    free.file.write_at(zeros.as_slice(), 0)?;
    if making.needs_barrier {
        making.volume.sync()?;
    }
    Ok(())
}

/// Makes spare number `n`: from a purged segment nobody reads any more (a zeroed one first;
/// another is zeroed first), or a new file. A recycled one is renamed and committed, and
/// every other zeroed `.free` file is promoted in the same commit. Each is zeroed before its
/// rename, so whichever commit of the volume makes a rename durable (this one or an earlier
/// one of another thread), a power cut leaves a `.free` file or a spare, never a segment.
fn make(making: &Making, state: &(Mutex<SpareState>, Condvar), n: u64) -> Result<Spare> {
    let path = segment_path(&making.dir, n);
    let reusable = {
        let mut s = lock(&state.0);
        let bytes = making.segment_bytes;
        let at = s
            .free
            .iter()
            .position(|f| f.zeroed && f.reusable(bytes))
            .or_else(|| s.free.iter().position(|f| f.reusable(bytes)));
        at.map(|i| s.free.remove(i))
    };
    let Some(mut free) = reusable else {
        let spare = create_segment(&making.volume, &path, making.segment_bytes)?;
        lock(&state.0).created += 1;
        return Ok(spare);
    };
    if !free.zeroed {
        if let Err(e) = zero(making, &free) {
            lock(&state.0).free.insert(0, free);
            return Err(e);
        }
        free.zeroed = true;
    }
    if let Err(e) = making.volume.rename(&free.path, &path) {
        lock(&state.0).free.insert(0, free);
        return Err(e.into());
    }
    let picked = pick_zeroed(&mut lock(&state.0), making);
    let promoted = promote(state, &making.volume, picked)?;
    making.volume.commit()?;
    let mut s = lock(&state.0);
    ready(&mut s, promoted);
    s.recycled += 1;
    metrics::counter!(m::SEGMENTS_RECYCLED_TOTAL).increment(1);
    Ok(free.into_spare(path))
}

/// The IO tiers of a segment: appends go direct (write-through in production: durable when
/// the carrier write returns, never parked in the cache), reads of older entries (a follower
/// catching up) go through the volume's cache, with readahead along the segment's extent.
/// Recovery's scan, which reads whole segments into its own buffers, reads them direct.
pub const SEGMENT_POLICY: IoPolicy = IoPolicy { read: Tier::Buffered, write: Tier::Direct };

/// Path of segment file number `n` under `dir`.
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
    /// Starts the maker; `spares` are the spares found at open, `free` the `.free` files
    /// found there, `next_file_no` the first unused file number, `keep` the most purged
    /// segments kept for reuse.
    #[allow(clippy::too_many_arguments)] // one call site, in open
    pub fn start(
        volume: Volume,
        dir: Vec<u8>,
        segment_bytes: u64,
        (needs_barrier, skip_zeroing): (bool, bool),
        (spares, free): (Vec<Spare>, Vec<Free>),
        next_file_no: u64,
        keep: usize,
        background: bool,
    ) -> SpareMaker {
        let state = Arc::new((
            Mutex::new(SpareState {
                ready: spares.into(),
                next_file_no,
                free,
                ..SpareState::default()
            }),
            Condvar::new(),
        ));
        let making = Making { volume, dir, segment_bytes, needs_barrier, skip_zeroing };
        if !background {
            return SpareMaker { state, thread: None, inline: true, making, keep };
        }
        let shared = Arc::clone(&state);
        let run = making.clone();
        let thread = std::thread::Builder::new()
            .name("vellum-spare".into())
            .spawn(move || Self::run(&shared, &run))
            .ok();
        SpareMaker { state, thread, inline: false, making, keep }
    }

    /// Where purged segments go.
    pub fn retirer(&self) -> Retirer {
        Retirer {
            state: Arc::clone(&self.state),
            keep: self.keep,
            making: self.making.clone(),
            inline: self.inline,
        }
    }

    /// The maker thread: makes a spare whenever none is ready, and otherwise zeroes the
    /// `.free` files no reader holds, so that purges can promote them.
    fn run(state: &(Mutex<SpareState>, Condvar), making: &Making) {
        enum Job {
            Make(u64),
            Zero(Free),
        }
        let (m, cv) = state;
        let mut pause = RETRY_FIRST;
        loop {
            let job = {
                let mut s = lock(m);
                loop {
                    if s.shutdown {
                        return;
                    }
                    if s.ready.is_empty() {
                        s.next_file_no += 1;
                        break Job::Make(s.next_file_no - 1);
                    }
                    let bytes = making.segment_bytes;
                    if let Some(at) = s.free.iter().position(|f| !f.zeroed && f.reusable(bytes)) {
                        break Job::Zero(s.free.remove(at));
                    }
                    s = cv.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            let done = match job {
                Job::Make(n) => make(making, state, n).map(|spare| lock(m).ready.push_back(spare)),
                Job::Zero(mut free) => {
                    let zeroed = zero(making, &free);
                    free.zeroed = zeroed.is_ok();
                    // Back in its place among the oldest: a purge promotes it from there.
                    lock(m).free.insert(0, free);
                    zeroed
                }
            };
            let mut s = lock(m);
            match done {
                Ok(()) => {
                    if s.failing > 0 {
                        tracing::info!(after = s.failing, "a spare log segment is ready again");
                    }
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
            metrics::gauge!(m::SPARE_READY).set(if s.ready.is_empty() { 0.0 } else { 1.0 });
            cv.notify_all();
        }
    }

    /// Takes the oldest ready spare, waiting for the maker if it is still at work (a
    /// bounded time while it is failing).
    pub fn take(&self) -> Result<Spare> {
        let (m, cv) = &*self.state;
        let mut s = lock(m);
        if self.inline {
            if let Some(spare) = s.ready.pop_front() {
                let left = if s.ready.is_empty() { 0.0 } else { 1.0 };
                metrics::gauge!(m::SPARE_READY).set(left);
                return Ok(spare);
            }
            s.next_file_no += 1;
            let n = s.next_file_no - 1;
            drop(s);
            return make(&self.making, &self.state, n);
        }
        let deadline = Instant::now() + TAKE_WAIT;
        loop {
            if let Some(spare) = s.ready.pop_front() {
                let left = if s.ready.is_empty() { 0.0 } else { 1.0 };
                metrics::gauge!(m::SPARE_READY).set(left);
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
