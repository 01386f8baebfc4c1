//! The raft log core: entries as (index, term, payload bytes), vote / committed / purged
//! records, appends with group commit, truncation, purge, range reads. It knows nothing of
//! openraft; `crate::log_store` is the thin openraft 0.9 layer on top.
//!
//! Files, under the configured directory of the volume (docs/RAFT-LOG.md):
//! `meta` (two alternating 4096-byte slots) and `log/NNNNNNNN.seg` (preallocated segments).
//!
//! Every write goes through one queue in the order it was asked for (openraft requires log and
//! vote IO to be serialized): appends, truncation tombstones and meta saves are queued, and
//! each caller is completed only after the write covering it returned. Writes are combined
//! (`queue`): a caller that finds no write in progress performs it in its own thread, and
//! callers that arrive meanwhile share the next write.

mod frame;
mod index;
mod meta;
pub mod queue;
mod recovery;
mod segments;
mod writer;

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use vellum_engine::carrier::{AlignedBuf, Medium};
use vellum_engine::{File, Volume};

pub use meta::MetaState;
pub use recovery::Torn;

use crate::error::{Error, Result, SharedError};
use crate::metrics as m;
use frame::{FrameKind, Parsed, SEGMENT_HEADER_LEN, SegmentHeader};
use index::{Index, Loc};
use queue::{Combiner, Complete};
use segments::{SegInfo, Segments, Spare, SpareMaker};

/// Tuning of the log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Directory of the volume holding `meta` and `log/`.
    pub dir: String,
    /// Bytes of one preallocated segment file.
    pub segment_bytes: u64,
    /// Bytes of payload the hot tail window keeps in memory.
    pub hot_window_bytes: usize,
    /// Largest single write the writer issues.
    pub max_batch_bytes: usize,
    /// Prepare the next segment in a background thread (false: when it is needed, which
    /// makes the carrier's operation sequence deterministic, for crash tests).
    pub background_spares: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            dir: "/raft".into(),
            segment_bytes: 64 << 20,
            hot_window_bytes: 16 << 20,
            max_batch_bytes: 4 << 20,
            background_spares: true,
        }
    }
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub index: u64,
    pub term: u64,
    pub payload: Arc<[u8]>,
}

/// Completion of a queued write.
pub type Callback = Box<dyn FnOnce(Result<(), SharedError>) + Send>;

pub(crate) enum Item {
    Entries {
        entries: Vec<LogEntry>,
        done: Callback,
    },
    Truncate {
        since: u64,
        done: Callback,
    },
    /// A meta save; `purge` marks one that moves the purged index.
    Meta {
        state: MetaState,
        purge: bool,
        done: Callback,
    },
}

impl Complete for Item {
    type Error = SharedError;
    fn complete(self, result: Result<(), SharedError>) {
        match self {
            Item::Entries { done, .. } | Item::Truncate { done, .. } | Item::Meta { done, .. } => {
                done(result);
            }
        }
    }
}

/// What recovery found (for logs and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    pub entries: usize,
    pub scanned_bytes: u64,
    pub torn: Option<Torn>,
}

pub(crate) struct Shared {
    pub volume: Volume,
    pub config: LogConfig,
    pub index: RwLock<Index>,
    /// The newest queued meta state; saves build on it.
    pub meta: Mutex<MetaState>,
    pub meta_file: File,
    pub segments: Mutex<Segments>,
    pub failed: Mutex<Option<SharedError>>,
    /// A barrier must follow each write (a buffered carrier that is not memory).
    pub needs_barrier: bool,
}

/// The shared state and the combiner that owns the writer.
struct Log {
    shared: Shared,
    combiner: Combiner<Item, writer::Writer>,
}

impl Log {
    /// Writes what is queued, unless a write is in progress (it takes it).
    fn drain(&self) {
        self.combiner.drain(|w, items| w.write_batch(&self.shared, items));
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn read_lock<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn write_lock<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The raft log on a volume. Cheap to clone; clones share one log.
#[derive(Clone)]
pub struct LogCore {
    log: Arc<Log>,
    report: Arc<RecoveryReport>,
}

impl std::fmt::Debug for LogCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogCore").field("dir", &self.log.shared.config.dir).finish_non_exhaustive()
    }
}

fn join(dir: &str, name: &str) -> Vec<u8> {
    format!("{}/{name}", dir.trim_end_matches('/')).into_bytes()
}

/// Reads a whole volume file.
fn read_all(file: &File) -> Result<Vec<u8>> {
    Ok(file.read_to_end()?)
}

impl LogCore {
    /// Opens (creating if needed) the log under `config.dir` of `volume`, recovering its
    /// state: the torn tail of the last write in flight is dropped and fenced with a `Skip`
    /// frame; damage anywhere else refuses with `Error::Corrupt`.
    pub fn open(volume: Volume, config: LogConfig) -> Result<LogCore> {
        if config.segment_bytes < 2 * SEGMENT_HEADER_LEN as u64
            || !config.segment_bytes.is_multiple_of(frame::ALIGN as u64)
        {
            return Err(Error::Config(
                "segment_bytes must be a multiple of 4096 and at least 8192",
            ));
        }
        let started = Instant::now();
        let info = volume.info();
        let needs_barrier = !info.carrier.write_through && info.medium != Medium::Memory;
        let log_dir = join(&config.dir, "log");
        volume.create_dir_all(&log_dir)?;
        let meta_path = join(&config.dir, "meta");
        let meta_file = if volume.exists(&meta_path)? {
            volume.open_file(&meta_path)?
        } else {
            let f = volume.create_file(&meta_path)?;
            f.preallocate(0, meta::FILE_LEN)?;
            volume.commit()?;
            f
        };
        let meta_state = MetaState::recover(&read_all(&meta_file)?, &config.dir)?;
        let mut report = RecoveryReport::default();
        let (mut segments, spare, next_file_no, recovered) =
            Self::scan_segments(&volume, &log_dir, &config, &mut report)?;
        let mut ix =
            Index::new(meta_state.purged_index.map_or(0, |p| p + 1), config.hot_window_bytes);
        let (current, max_batch) =
            Self::rebuild(&mut segments, recovered, &meta_state, &mut ix, &config)?;
        report.entries = ix.len();
        let next_seq = segments.by_seq.keys().next_back().map_or(1, |s| s + 1);
        let shared = Shared {
            volume: volume.clone(),
            config,
            index: RwLock::new(ix),
            meta: Mutex::new(meta_state),
            meta_file,
            segments: Mutex::new(segments),
            failed: Mutex::new(None),
            needs_barrier,
        };
        let spares = SpareMaker::start(
            volume,
            log_dir,
            shared.config.segment_bytes,
            spare,
            next_file_no,
            shared.config.background_spares,
        );
        let purged_batch = lock(&shared.meta).purged_batch;
        let w = writer::Writer::new(current, next_seq, max_batch + 1, purged_batch, spares);
        let log = Arc::new(Log { shared, combiner: Combiner::new(w) });
        if let Some(torn) = report.torn {
            log.combiner.writer().fence(&log.shared, torn)?;
        }
        metrics::gauge!(m::RECOVERY_DURATION).set(started.elapsed().as_secs_f64());
        metrics::gauge!(m::RECOVERY_SCANNED_BYTES).set(report.scanned_bytes as f64);
        if report.torn.is_some() {
            tracing::warn!(
                ?report,
                "raft log recovered with a torn tail (the write in flight at the power cut)"
            );
        }
        Ok(LogCore { log, report: Arc::new(report) })
    }

    /// Reads every segment file: active segments (by sequence), the spare, the next file
    /// number, and the scan of each active segment (read one at a time).
    fn scan_segments(
        volume: &Volume,
        log_dir: &[u8],
        config: &LogConfig,
        report: &mut RecoveryReport,
    ) -> Result<(Segments, Option<Spare>, u64, Vec<recovery::SegmentScan>)> {
        let mut found = Vec::new();
        let mut spare = None;
        let mut next_file_no = 1;
        for entry in volume.list(log_dir)? {
            let mut path = log_dir.to_vec();
            path.push(b'/');
            path.extend_from_slice(&entry.name);
            let name = String::from_utf8_lossy(&path).into_owned();
            if let Some(n) = std::str::from_utf8(&entry.name)
                .ok()
                .and_then(|s| s.strip_suffix(".seg"))
                .and_then(|s| s.parse::<u64>().ok())
            {
                next_file_no = next_file_no.max(n + 1);
            }
            let file = volume.open_file(&path)?;
            if file.metadata()?.size != config.segment_bytes {
                // A segment being created when power was cut (never committed in full), or
                // one made with another size: only a spare of the right size is reused.
                let header = {
                    let mut h = vec![0u8; SEGMENT_HEADER_LEN];
                    let n = file.read_at(&mut h, 0)?;
                    h.truncate(n);
                    h
                };
                if header.iter().any(|&b| b != 0) {
                    return Err(Error::Config(
                        "a log segment has a different size than segment_bytes",
                    ));
                }
                drop(file);
                volume.remove(&path)?;
                continue;
            }
            // The first blocks tell a spare (all-zero header, untouched frame area: a torn
            // activation never reaches the frames) from an active segment, whose header they
            // hold; the frames are read segment by segment below.
            let head_len = (2 * SEGMENT_HEADER_LEN).min(config.segment_bytes as usize);
            let mut head = vec![0u8; head_len];
            file.read_exact_at(&mut head, 0)?;
            report.scanned_bytes += head_len as u64;
            match SegmentHeader::decode(&head, &name) {
                Ok(Some(h)) => found.push((h, path, Arc::new(file), head)),
                Ok(None) | Err(_) if head[SEGMENT_HEADER_LEN..].iter().all(|&b| b == 0) => {
                    // Never activated (or its activation was the write in flight): a spare.
                    if spare.is_none() {
                        spare = Some(Spare { path, file: Arc::new(file) });
                    } else {
                        drop(file);
                        volume.remove(&path)?;
                    }
                }
                Ok(None) => {
                    return Err(Error::Corrupt {
                        file: name,
                        offset: 0,
                        reason: "frames in a segment without a header",
                    });
                }
                Err(e) => return Err(e),
            }
        }
        found.sort_by_key(|(h, ..)| h.seq);
        for pair in found.windows(2) {
            if pair[1].0.seq != pair[0].0.seq + 1 {
                let name = String::from_utf8_lossy(&pair[1].1).into_owned();
                return Err(Error::Corrupt {
                    file: name,
                    offset: 0,
                    reason: "a segment is missing before this one",
                });
            }
        }
        let mut segments = Segments::default();
        let mut scans = Vec::new();
        let mut prev_batch = 0;
        // Segments are read in sequence order into two aligned buffers that take turns: a
        // reader thread fills one (direct IO straight into it, no copy) while this thread
        // scans the other, so the scan hides behind the reads, and memory stays at two
        // segments whatever the log's length.
        let files: Vec<Arc<File>> = found.iter().map(|(_, _, f, _)| Arc::clone(f)).collect();
        let seg_len = config.segment_bytes as usize;
        std::thread::scope(|scope| -> Result<()> {
            let (full_tx, full_rx) = std::sync::mpsc::sync_channel(1);
            let (empty_tx, empty_rx) = std::sync::mpsc::channel::<AlignedBuf>();
            for _ in 0..2.min(files.len()) {
                let _ = empty_tx.send(AlignedBuf::zeroed(seg_len, frame::ALIGN));
            }
            scope.spawn(move || {
                for file in files {
                    let Ok(mut buf) = empty_rx.recv() else { return };
                    let read = file.read_exact_at(buf.as_mut_slice(), 0).map(|()| buf);
                    let failed = read.is_err();
                    if full_tx.send(read).is_err() || failed {
                        return;
                    }
                }
            });
            for i in 0..found.len() {
                let buf = full_rx.recv().map_err(|_| Error::Closed)??;
                let (h, path, _, _) = &found[i];
                let name = String::from_utf8_lossy(path).into_owned();
                report.scanned_bytes += config.segment_bytes - (2 * SEGMENT_HEADER_LEN) as u64;
                let scan = recovery::scan_segment(buf.as_slice(), h.salt, &name, prev_batch)?;
                let _ = empty_tx.send(buf);
                prev_batch = scan.max_batch;
                if let Some(torn) = scan.torn {
                    match found.get(i + 1) {
                        // The torn end of the last segment: the write in flight. Open fences
                        // it.
                        None => report.torn = Some(torn),
                        // A sealed segment may end torn only when the next one opens with the
                        // fence an earlier recovery wrote for it.
                        Some((next, _, _, next_head))
                            if recovery::fenced_from_next(next_head, next.salt, torn.from) => {}
                        Some(_) => {
                            return Err(Error::Corrupt {
                                file: name,
                                offset: torn.from,
                                reason: "damage inside a sealed segment",
                            });
                        }
                    }
                }
                scans.push(scan);
            }
            Ok(())
        })?;
        for (h, path, file, _) in found {
            segments.by_seq.insert(h.seq, SegInfo { salt: h.salt, file, path, max_index: 0 });
        }
        report.segments = segments.by_seq.len();
        if report.segments > 0 {
            volume.commit()?; // spares and partial files removed above
        }
        Ok((segments, spare, next_file_no, scans))
    }

    /// Applies the scanned frames in order: entries must be consecutive, truncations drop
    /// their suffix, everything at or below the purged index is gone.
    fn rebuild(
        segments: &mut Segments,
        scans: Vec<recovery::SegmentScan>,
        meta: &MetaState,
        ix: &mut Index,
        config: &LogConfig,
    ) -> Result<(Option<writer::Current>, u64)> {
        let mut max_batch = 0;
        let mut current = None;
        let mut kept: Vec<(u64, u64, u64, u64, u32)> = Vec::new(); // index, term, seq, offset, len
        let last_seq = segments.by_seq.keys().next_back().copied();
        for ((&seq, seg), scan) in segments.by_seq.iter().zip(scans) {
            max_batch = max_batch.max(scan.max_batch);
            for f in &scan.frames {
                match f.header.kind {
                    FrameKind::Entry => {
                        let idx = f.header.index;
                        if meta.purged_index.is_some_and(|p| idx <= p)
                            && f.header.batch < meta.purged_batch
                        {
                            continue; // purged
                        }
                        if let Some(&(last, ..)) = kept.last()
                            && idx != last + 1
                        {
                            let file = String::from_utf8_lossy(&seg.path).into_owned();
                            return Err(Error::Corrupt {
                                file,
                                offset: f.offset,
                                reason: "entry indexes are not consecutive",
                            });
                        }
                        kept.push((idx, f.header.term, seq, f.offset, f.len));
                    }
                    FrameKind::Truncate => kept.retain(|k| k.0 < f.header.index),
                    FrameKind::Skip => {}
                }
            }
            if Some(seq) == last_seq {
                current = Some(writer::Current {
                    seq,
                    salt: seg.salt,
                    file: Arc::clone(&seg.file),
                    pos: scan.next_write,
                });
            }
        }
        if let Some(&(first, ..)) = kept.first() {
            *ix = Index::new(first, config.hot_window_bytes);
        }
        for (idx, term, seq, offset, len) in kept {
            if let Some(seg) = segments.by_seq.get_mut(&seq) {
                seg.max_index = seg.max_index.max(idx);
            }
            ix.push(idx, Loc { term, seg: seq, offset, len, durable: true, hot: None });
        }
        Ok((current, max_batch))
    }

    fn shared(&self) -> &Shared {
        &self.log.shared
    }

    fn check_failed(&self) -> Result<()> {
        match &*lock(&self.shared().failed) {
            Some(e) => Err(Error::shared(e)),
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

    /// Queues `entries` (consecutive, continuing the log); they are readable when this
    /// returns, and `done` runs once they are durable (or the write failed), in log order.
    pub fn append(&self, entries: Vec<LogEntry>, done: Callback) -> Result<()> {
        self.check_failed()?;
        let started = Instant::now();
        let mut ix = write_lock(&self.shared().index);
        for pair in entries.windows(2) {
            if pair[1].index != pair[0].index + 1 {
                return Err(Error::OutOfRange {
                    index: pair[1].index,
                    first: pair[0].index,
                    last: pair[0].index,
                });
            }
        }
        // openraft truncates before it overwrites, and never leaves a hole; should an append
        // not continue the log anyway, the log is truncated durably first (a tombstone
        // ahead of the entries), so disk and memory agree on what the log holds.
        if let Some(first) = entries.first().map(|e| e.index)
            && !ix.is_empty()
            && first != ix.next_index()
        {
            let since = if first > ix.next_index() {
                ix.first_index()
            } else {
                first.max(ix.first_index())
            };
            tracing::warn!(
                first,
                next = ix.next_index(),
                since,
                "an append that does not continue the log truncates it"
            );
            ix.truncate(since);
            self.push(Item::Truncate { since, done: Box::new(|_| {}) })?;
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
        let r = self.push(Item::Entries { entries, done });
        drop(ix);
        r?;
        self.log.drain();
        Ok(())
    }

    /// Truncates every entry at or after `since`; `done` runs once the tombstone is durable.
    pub fn truncate(&self, since: u64, done: Callback) -> Result<()> {
        self.check_failed()?;
        let mut ix = write_lock(&self.shared().index);
        ix.truncate(since);
        let r = self.push(Item::Truncate { since, done });
        drop(ix);
        r?;
        self.log.drain();
        Ok(())
    }

    /// Saves a new meta state built from the newest one; `done` runs once it is durable.
    fn save_meta(&self, change: impl FnOnce(&mut MetaState), done: Callback) -> Result<()> {
        self.check_failed()?;
        let mut meta = lock(&self.shared().meta);
        let mut next = meta.clone();
        change(&mut next);
        next.seq += 1;
        let purge = next.purged_index != meta.purged_index;
        *meta = next.clone();
        let r = self.push(Item::Meta { state: next, purge, done });
        drop(meta);
        r?;
        self.log.drain();
        Ok(())
    }

    /// Saves the vote (opaque bytes, at most 1000).
    pub fn save_vote(&self, vote: Vec<u8>, done: Callback) -> Result<()> {
        self.save_meta(|m| m.vote = Some(vote), done)
    }

    /// Saves the committed log id (opaque bytes, at most 1000).
    pub fn save_committed(&self, committed: Option<Vec<u8>>, done: Callback) -> Result<()> {
        self.save_meta(|m| m.committed = committed, done)
    }

    /// Purges every entry at or before `upto` (`purged` is the caller's encoding of the
    /// purged id). Blocks until the purge record is durable, then deletes whole segments
    /// that hold nothing newer (one metadata commit).
    pub fn purge(&self, upto: u64, purged: Vec<u8>) -> Result<()> {
        wait(|done| {
            self.save_meta(
                |m| {
                    m.purged = Some(purged);
                    m.purged_index = Some(m.purged_index.map_or(upto, |p| p.max(upto)));
                },
                done,
            )
        })?;
        write_lock(&self.shared().index).purge(upto);
        let doomed: Vec<(u64, Vec<u8>)> = {
            let segs = lock(&self.shared().segments);
            let newest = segs.by_seq.keys().next_back().copied();
            // Only the oldest segments go, so the ones left stay consecutive.
            segs.by_seq
                .iter()
                .take_while(|(s, info)| Some(**s) != newest && info.max_index <= upto)
                .map(|(s, i)| (*s, i.path.clone()))
                .collect()
        };
        if doomed.is_empty() {
            return Ok(());
        }
        for (seq, path) in &doomed {
            lock(&self.shared().segments).by_seq.remove(seq);
            self.shared().volume.remove(path)?;
        }
        self.shared().volume.commit()?;
        metrics::counter!(m::SEGMENTS_PURGED_TOTAL).increment(doomed.len() as u64);
        Ok(())
    }

    /// The newest saved (or queued) meta state.
    pub fn meta(&self) -> MetaState {
        lock(&self.shared().meta).clone()
    }

    /// `(first index, last index)` of the entries present; `last < first` when empty.
    pub fn bounds(&self) -> (u64, Option<u64>) {
        let ix = read_lock(&self.shared().index);
        (ix.first_index(), ix.last_index())
    }

    /// Entries with `lo <= index < hi` that are present.
    pub fn read(&self, lo: u64, hi: u64) -> Result<Vec<LogEntry>> {
        self.check_failed()?;
        let wanted: Vec<(u64, Loc)> = {
            let ix = read_lock(&self.shared().index);
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
                None => self.read_cold(index, &loc)?,
            };
            out.push(LogEntry { index, term: loc.term, payload });
        }
        Ok(out)
    }

    fn read_cold(&self, index: u64, loc: &Loc) -> Result<Arc<[u8]>> {
        let (file, salt, name) = {
            let segs = lock(&self.shared().segments);
            let seg =
                segs.by_seq.get(&loc.seg).ok_or(Error::OutOfRange { index, first: 0, last: 0 })?;
            (Arc::clone(&seg.file), seg.salt, String::from_utf8_lossy(&seg.path).into_owned())
        };
        let mut buf = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut buf, loc.offset)?;
        metrics::counter!(m::COLD_READS_TOTAL).increment(1);
        match frame::parse(&buf, salt) {
            Parsed::Valid { header, .. } if header.index == index && header.term == loc.term => {
                Ok(Arc::from(
                    &buf[frame::FRAME_HEADER_LEN
                        ..frame::FRAME_HEADER_LEN + header.payload_len as usize],
                ))
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

    /// Bytes of payload in the hot window.
    pub fn hot_bytes(&self) -> usize {
        read_lock(&self.shared().index).hot_bytes()
    }

    /// Active segments.
    pub fn segment_count(&self) -> usize {
        lock(&self.shared().segments).by_seq.len()
    }

    /// Refuses further writes (they fail with `Closed`); queued ones are written first.
    pub fn close(&self) {
        self.log.drain();
        self.log.combiner.close();
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
