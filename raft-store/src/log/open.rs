//! Opening the log: read the meta file, classify and scan the segments, rebuild the entry
//! index, find the torn tail and fence it (docs/RAFT-LOG.md, "Recovery").
//!
//! Segments are classified by their first 8 KiB: an all-zero header with an untouched first
//! frame block is a spare (or an activation that was the write in flight); a valid header is
//! an active segment; anything else is damage. Active segments must have consecutive
//! sequence numbers. They are read in sequence order into two aligned buffers that take
//! turns (a reader thread fills one while this thread scans the other), so memory stays at
//! two segments whatever the log's length.
//!
//! Only the log's last write may be torn: the tail of the last segment, or the tail of the
//! segment before a last one that holds no frame yet and that recovery activated for the
//! cross-segment fence of that tail (its header says so from format 4 on): that fence was in
//! flight.
//! A read error (EIO) in the last segment is read around block by block and treated like
//! torn bytes when it lies in that window; anywhere else it refuses with a named error.
//!
//! The segment size of an existing log is the size of its segments; the configured size
//! applies to a log that has none.
//!
//! Groups: group 0's meta file is `DIR/meta`, every other group's `DIR/groups/ID` (decimal).
//! Each group's entries are rebuilt from its frames in one scan of the segments, with its own
//! purge point, truncations and committed id. Live entries of a group without a meta file
//! refuse (a drop writes its tombstone before it removes the file, so a dropped group has
//! none).
//!
//! A volume whose metadata journal the engine found destroyed is refused before anything is
//! read (`Error::VolumeRolledBack`, for as long as the volume's loss flag is set): the engine
//! opened it at its last checkpoint, so the log's files may be those of an earlier moment.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

use vellum_engine::AlignedBuf;
use vellum_engine::{File, IoPolicy, Volume};

use super::frame::{
    ALIGN, DROP_TERM, FrameKind, SEGMENT_HEADER_LEN, SEGMENT_VERSION_FLAGS,
    SEGMENT_VERSION_RECYCLED, SEGMENT_VERSION_VOTES, SegmentHeader,
};
use super::index::{Index, Loc};
use super::meta::{self, MetaState};
use super::recovery::{self, ScannedCommit, ScannedPurge, ScannedVote, SegmentScan};
use super::segments::{Free, SegInfo, Segments, Spare, SpareMaker};
use super::state::MIN_VOLUME_BYTES;
use super::state::{Group, LogConfig, MetaCell, RecoveryReport, Shared, Torn, join};
use super::writer::{Current, Writer};
use crate::error::{Error, Result};

/// The directory of the meta files of groups other than 0, under the log's directory.
pub(super) const GROUPS_DIR: &str = "groups";

/// The meta file of group `id` (not 0) of the log under `dir`.
pub(super) fn group_meta_path(dir: &str, id: u64) -> Vec<u8> {
    join(dir, &format!("{GROUPS_DIR}/{id}"))
}

/// Everything open produced: the shared state and the writer, ready to write.
pub(super) struct Opened {
    pub shared: Shared,
    pub writer: Writer,
    pub report: RecoveryReport,
}

/// An active segment found at open, with its first blocks.
struct Found {
    header: SegmentHeader,
    path: Vec<u8>,
    name: String,
    file: Arc<File>,
    len: u64,
    head: Vec<u8>,
}

/// What the classification of the segment files found.
struct Classified {
    active: Vec<Found>,
    spares: Vec<Spare>,
    /// Purged segments kept for reuse (`.free` files).
    free: Vec<Free>,
    next_file_no: u64,
    scanned_bytes: u64,
    /// Files removed (leftovers, extra spares): a commit makes that durable.
    removed: usize,
}

pub(super) fn open(volume: Volume, mut config: LogConfig) -> Result<Opened> {
    let capacity = volume.info().layout.capacity_bytes();
    let derived = config.segment_bytes == 0;
    if derived {
        // Derived from the volume (the default): a new log is refused below the documented
        // minimum, where the first writes would find the volume full and stop the raft
        // instance (an existing log keeps its own segments, checked below).
        let log_dir = join(&config.dir, "log");
        let has_log = volume.exists(&log_dir)? && !volume.list(&log_dir)?.is_empty();
        if capacity < MIN_VOLUME_BYTES && !has_log {
            return Err(Error::VolumeTooSmall { capacity, min: MIN_VOLUME_BYTES });
        }
        config.segment_bytes = LogConfig::segment_bytes_for(capacity);
    }
    if config.segment_bytes < 2 * SEGMENT_HEADER_LEN as u64
        || !config.segment_bytes.is_multiple_of(ALIGN as u64)
    {
        return Err(Error::Config("segment_bytes must be a multiple of 4096 and at least 8192"));
    }
    refuse_rolled_back(&volume)?;
    let info = volume.info();
    // A torn write damages whole physical sectors; the log's design (a fresh aligned block
    // per flush, never rewriting an acknowledged one) holds only if none spans two flushes.
    if info.physical_sector as usize > ALIGN {
        return Err(Error::SectorTooLarge { sector: info.physical_sector, align: ALIGN });
    }
    let needs_barrier = volume.data_writes_need_barrier();
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
    let meta_state = MetaState::recover(&meta_file.read_to_end()?, &config.dir)?;
    let mut metas = BTreeMap::from([(0, (meta_state, meta_file))]);
    // The other groups' meta files are read while the segments are classified and scanned:
    // a few large reads (`File::read_many`) and the parsing of each, about 9 ms for a
    // thousand groups read alone. Behind the scan's reads they take longer (done 45 to 90 ms
    // into a 256 MiB log's scan of 140 to 185 ms in a probe), but the open no longer waits.
    let (group_metas, scanned) = std::thread::scope(|scope| {
        let groups = scope.spawn(|| read_group_metas(&volume, &config.dir));
        let scanned = (|| -> Result<_> {
            let mut classified =
                classify(&volume, &log_dir, config.segment_bytes, config.recycled_segments)?;
            let segment_bytes = log_segment_bytes(&classified, &config, derived);
            // The current segment and its spare must fit, or the log stops at its first roll.
            if capacity < 2 * segment_bytes {
                return Err(Error::VolumeTooSmall { capacity, min: 2 * segment_bytes });
            }
            let mut report = RecoveryReport {
                scanned_bytes: classified.scanned_bytes,
                segment_bytes,
                ..RecoveryReport::default()
            };
            let (segments, scans) = scan_all(std::mem::take(&mut classified.active), &mut report)?;
            Ok((classified, segment_bytes, report, segments, scans))
        })();
        (groups.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), scanned)
    });
    metas.extend(group_metas?);
    let (classified, segment_bytes, mut report, segments, scans) = scanned?;
    if classified.removed > 0 {
        volume.commit()?; // leftovers and extra spares removed by `classify`
    }
    let mut segments = segments;
    let (mut current, max_batch, mut rebuilt) = rebuild(&mut segments, scans, &metas, &config)?;
    if let (Some(cur), Some(torn)) = (current.as_mut(), report.torn)
        && torn.in_previous_segment
    {
        // The fence goes again where the one in flight was meant to land.
        cur.pos = SEGMENT_HEADER_LEN as u64;
    }
    let mut groups = BTreeMap::new();
    let mut purged_batch = BTreeMap::new();
    let mut last_entry = BTreeMap::new();
    for (id, (mut meta_state, meta_file)) in metas {
        let Rebuilt { index: ix, commit, vote, purge } =
            rebuilt.remove(&id).expect("rebuilt per group");
        let purge_seq = adopt_purge(&mut meta_state, purge);
        let (durable_committed, commit_seq) = adopt_commit(&mut meta_state, commit, &ix);
        let meta_path = if id == 0 { meta_path.clone() } else { group_meta_path(&config.dir, id) };
        let vote_seq = adopt_vote(&mut meta_state, vote, &lossy(&meta_path))?;
        report.entries += ix.len();
        purged_batch.insert(id, meta_state.purged_batch);
        if let Some(last) = ix.last_index() {
            last_entry.insert(id, last);
        }
        let durable_purged = meta_state.purged_index.map_or(0, |p| p + 1);
        let group = Group {
            id,
            index: RwLock::new(ix),
            meta: Mutex::new(MetaCell { state: meta_state, committed_term: 0 }),
            meta_file,
            durable_committed: AtomicU64::new(durable_committed.map_or(0, |c| c + 1)),
            durable_purged: AtomicU64::new(durable_purged),
            dropped: AtomicBool::new(false),
            vote_seq: AtomicU64::new(vote_seq),
            purge_seq: AtomicU64::new(purge_seq),
            commit_seq: AtomicU64::new(commit_seq),
        };
        groups.insert(id, Arc::new(group));
    }
    metrics::gauge!(crate::metrics::GROUPS).set(groups.len() as f64);
    let next_seq = segments.by_seq.keys().next_back().map_or(1, |s| s + 1);
    #[cfg(feature = "test-util")]
    let skip_zeroing = config.mutation == Some(super::state::LogMutation::SkipZeroing);
    #[cfg(not(feature = "test-util"))]
    let skip_zeroing = false;
    let spares = SpareMaker::start(
        volume.clone(),
        log_dir,
        segment_bytes,
        (needs_barrier, skip_zeroing),
        (classified.spares, classified.free),
        classified.next_file_no,
        config.recycled_segments,
        config.background_spares,
    );
    let shared = Shared {
        retirer: spares.retirer(),
        volume,
        config,
        segment_bytes,
        // Every group at first: the first look drops those with nothing pending.
        committing: Mutex::new(groups.keys().copied().collect()),
        compact_wanted: Mutex::new(BTreeSet::new()),
        groups: RwLock::new(groups),
        segments: Mutex::new(segments),
        needs_barrier,
        disk: super::state::DiskLatency::new(),
    };
    let mut writer =
        Writer::new(current, next_seq, max_batch + 1, purged_batch, last_entry, spares);
    if let Some(torn) = report.torn {
        writer.fence(&shared, torn)?;
    }
    Ok(Opened { shared, writer, report })
}

/// Reads the meta file of every group but 0 (`DIR/groups/ID`).
fn read_group_metas(volume: &Volume, dir: &str) -> Result<Vec<(u64, (MetaState, File))>> {
    let groups_dir = join(dir, GROUPS_DIR);
    if !volume.exists(&groups_dir)? {
        return Ok(Vec::new());
    }
    let mut ids = Vec::new();
    for entry in volume.list(&groups_dir)? {
        let id = std::str::from_utf8(&entry.name)
            .ok()
            .filter(|n| !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u64>().ok());
        let Some(id) = id else {
            return Err(Error::Corrupt {
                file: format!("{}/{}", lossy(&groups_dir), lossy(&entry.name)),
                offset: 0,
                reason: "a file among the groups' meta files that names no group",
            });
        };
        ids.push(id);
    }
    // One small file each: read one by one, a log of a thousand groups would wait for a
    // thousand requests in turn; they lie next to each other on the carrier (created
    // together, or one after another), so a few requests fetch them all.
    let files = ids
        .iter()
        .map(|&id| volume.open_file(group_meta_path(dir, id)))
        .collect::<std::result::Result<Vec<File>, _>>()?;
    let images = File::read_many(&files.iter().collect::<Vec<_>>())?;
    let mut metas = Vec::with_capacity(ids.len());
    for ((id, file), image) in ids.into_iter().zip(files).zip(images) {
        let state = MetaState::recover(&image, &lossy(&group_meta_path(dir, id)))?;
        metas.push((id, (state, file)));
    }
    Ok(metas)
}

/// Refuses a volume whose metadata journal the engine found destroyed, for as long as its
/// loss flag is set (`JournalInfo::lost_from`; the open that found the ring destroyed sets it,
/// every later open reports it until `vellum journal ack` clears it). The engine opened such a
/// volume at its last checkpoint: segments created since then are gone with the entries they
/// held (entries this member acknowledged), segments purged since then are back, and nothing
/// in the log's own bytes can tell. A member that served it would rejoin as itself with
/// acknowledged entries missing.
fn refuse_rolled_back(volume: &Volume) -> Result<()> {
    let lost_from = volume.info().journal.and_then(|j| j.lost_from);
    let report = volume.open_report().journal;
    if let Some(lost_from) = lost_from {
        tracing::error!(
            lost_from,
            destroyed_at_this_open = report.is_some_and(|r| r.destroyed),
            "the volume's journal was destroyed: the raft log may be rolled back"
        );
        return Err(Error::VolumeRolledBack { lost_from });
    }
    Ok(())
}

/// The size of the segments the log makes: that of its newest segment, or the configured (or
/// `derived`) one for a log without any. Warns when a size the caller configured is not the
/// log's.
fn log_segment_bytes(c: &Classified, config: &LogConfig, derived: bool) -> u64 {
    let found = c.active.last().map(|f| f.len);
    if let Some(len) = found
        && len != config.segment_bytes
        && !derived
    {
        tracing::warn!(
            log = len,
            configured = config.segment_bytes,
            "the raft log keeps the segment size it was created with; the configured size \
             applies to new logs only"
        );
    }
    found.unwrap_or(config.segment_bytes)
}

fn lossy(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// Sorts the files of `DIR/log` into active segments (with their first blocks), spares and
/// `.free` files (one spare, and up to `keep` more of either: the maker's pool), and leftovers
/// (removed; committed by the caller).
fn classify(volume: &Volume, log_dir: &[u8], config_bytes: u64, keep: usize) -> Result<Classified> {
    let mut c = Classified {
        active: Vec::new(),
        spares: Vec::new(),
        free: Vec::new(),
        next_file_no: 1,
        scanned_bytes: 0,
        removed: 0,
    };
    let mut spares = Vec::new();
    let mut frees = Vec::new();
    for entry in volume.list(log_dir)? {
        let mut path = log_dir.to_vec();
        path.push(b'/');
        path.extend_from_slice(&entry.name);
        let name = lossy(&path);
        // File numbers of `.free` files count too: promotion hands numbers out of roll order,
        // so a `.free` file may hold one above every segment's.
        if let Some(n) = std::str::from_utf8(&entry.name)
            .ok()
            .and_then(|s| s.strip_suffix(".seg").or_else(|| s.strip_suffix(".free")))
            .and_then(|s| s.parse::<u64>().ok())
        {
            c.next_file_no = c.next_file_no.max(n + 1);
        }
        let file = volume.open_file_with(&path, super::segments::SEGMENT_POLICY)?;
        let len = file.metadata()?.size;
        let head_len = (2 * SEGMENT_HEADER_LEN).min(len as usize);
        let mut head = vec![0u8; head_len];
        file.read_exact_at(&mut head, 0)?;
        c.scanned_bytes += head_len as u64;
        if entry.name.ends_with(b".free") {
            // A purged segment kept for reuse: never part of the log, whatever it holds. Its
            // salt, while its header is still there, keeps the next one from repeating it.
            let salt = SegmentHeader::decode(&head, &name).ok().flatten().map(|h| h.salt);
            // Zeroed (header and first frame block): a purge may make it a spare by a rename.
            let zeroed = head.len() == 2 * SEGMENT_HEADER_LEN && head.iter().all(|&b| b == 0);
            frees.push(Free { path, file: Arc::new(file), len, salt, zeroed });
            continue;
        }
        let usable = len >= 2 * SEGMENT_HEADER_LEN as u64 && len.is_multiple_of(ALIGN as u64);
        if !usable {
            // Never a segment the log made (they are created and sized in one commit): a
            // file left by something else. Refuse rather than guess if it holds anything.
            if head.iter().any(|&b| b != 0) {
                return Err(Error::Corrupt {
                    file: name,
                    offset: 0,
                    reason: "a log segment of an impossible size",
                });
            }
            drop(file);
            volume.remove(&path)?;
            c.removed += 1;
            continue;
        }
        match SegmentHeader::decode(&head, &name) {
            Ok(Some(header)) => {
                c.active.push(Found { header, path, name, file: Arc::new(file), len, head });
            }
            Ok(None) | Err(Error::Corrupt { .. })
                if head[SEGMENT_HEADER_LEN..].iter().all(|&b| b == 0) =>
            {
                // Never activated (or its activation was the write in flight): a spare.
                spares.push(Spare { path, file: Arc::new(file), len, stale_salt: None });
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
    c.active.sort_by_key(|f| f.header.seq);
    for pair in c.active.windows(2) {
        if pair[1].header.seq != pair[0].header.seq + 1 {
            return Err(Error::Corrupt {
                file: pair[1].name.clone(),
                offset: 0,
                reason: "a segment is missing before this one",
            });
        }
    }
    // Spares of the size the log's segments have (or, for a log without any, of the configured
    // size) are kept, one and up to `keep` more; the others go.
    let wanted = c.active.last().map_or(config_bytes, |f| f.len);
    spares.sort_by(|a, b| a.path.cmp(&b.path));
    for spare in spares {
        if c.spares.len() <= keep && spare.len == wanted {
            c.spares.push(spare);
        } else {
            let path = spare.path.clone();
            drop(spare);
            volume.remove(&path)?;
            c.removed += 1;
        }
    }
    // Reusable files of the log's segment size, up to the configured number; the others go.
    for free in frees {
        if c.free.len() + c.spares.len().saturating_sub(1) < keep && free.len == wanted {
            c.free.push(free);
        } else {
            let path = free.path.clone();
            drop(free);
            volume.remove(&path)?;
            c.removed += 1;
        }
    }
    Ok(c)
}

/// A segment's bytes (a prefix of `buf`), read whole, and the byte ranges a read error left
/// unknown.
struct Read {
    buf: AlignedBuf,
    unreadable: Vec<std::ops::Range<u64>>,
}

/// True for a read error of the medium (EIO) under the volume.
fn is_eio(e: &vellum_engine::Error) -> bool {
    matches!(e, vellum_engine::Error::Io { source, .. } if source.raw_os_error() == Some(libc::EIO))
}

/// Reads `file` into `bytes`; a read error is read around block by block (unreadable
/// blocks become non-zero garbage, which the scan never takes for frames or padding), and
/// the scan decides: acceptable inside the last write's window or inside a gap an earlier
/// recovery fenced, damage anywhere else. Returns the unreadable ranges.
fn read_segment(file: &File, bytes: &mut [u8]) -> Result<Vec<std::ops::Range<u64>>> {
    match file.read_exact_at(bytes, 0) {
        Ok(()) => return Ok(Vec::new()),
        Err(e) if !is_eio(&e) => return Err(e.into()),
        Err(_) => {}
    }
    let mut unreadable: Vec<std::ops::Range<u64>> = Vec::new();
    for (i, block) in bytes.chunks_mut(ALIGN).enumerate() {
        let at = (i * ALIGN) as u64;
        match file.read_exact_at(block, at) {
            Ok(()) => {}
            Err(e) if is_eio(&e) => {
                block.fill(0xEE);
                match unreadable.last_mut() {
                    Some(r) if r.end == at => r.end = at + block.len() as u64,
                    _ => unreadable.push(at..at + block.len() as u64),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    tracing::warn!(?unreadable, "a log segment has blocks that cannot be read (EIO)");
    Ok(unreadable)
}

/// Reads and scans every active segment in order, deciding which torn tail is the log's last
/// write and which is damage.
fn scan_all(
    found: Vec<Found>,
    report: &mut RecoveryReport,
) -> Result<(Segments, Vec<SegmentScan>)> {
    let mut scans: Vec<SegmentScan> = Vec::new();
    let mut prev_batch = 0;
    let buf_len = found.iter().map(|f| f.len).max().unwrap_or(0) as usize;
    // The scan reads each segment whole into its own buffer, so it takes the direct tier
    // straight into it: through the page cache every 4 KiB page would be copied, indexed and
    // evicted again by the next segment (a 64 MiB segment is the default cache's size).
    let files = found
        .iter()
        .map(|f| Ok((f.file.volume().open_file_with(&f.path, IoPolicy::DIRECT)?, f.len)))
        .collect::<Result<Vec<(File, u64)>>>()?;
    let count = found.len();
    // A torn sealed segment waiting for the verdict of the next (the last) one.
    let mut torn_before: Option<(usize, recovery::SegmentScan)> = None;
    std::thread::scope(|scope| -> Result<()> {
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel(1);
        let (empty_tx, empty_rx) = std::sync::mpsc::channel::<AlignedBuf>();
        for _ in 0..2.min(count) {
            // Two segments' worth of memory, touched first by the reads: huge pages fault it
            // in 2 MiB at a time (16,384 faults of 4 KiB per 64 MiB buffer otherwise).
            let _ = empty_tx.send(AlignedBuf::zeroed_huge(buf_len, ALIGN));
        }
        scope.spawn(move || {
            for (file, len) in files {
                let Ok(mut buf) = empty_rx.recv() else { return };
                let read = read_segment(&file, &mut buf.as_mut_slice()[..len as usize])
                    .map(|unreadable| Read { buf, unreadable });
                let failed = read.is_err();
                if full_tx.send(read).is_err() || failed {
                    return;
                }
            }
        });
        for (i, f) in found.iter().enumerate() {
            let read = full_rx.recv().map_err(|_| Error::Closed)??;
            report.scanned_bytes += f.len - (2 * SEGMENT_HEADER_LEN) as u64;
            let bytes = &read.buf.as_slice()[..f.len as usize];
            let scan = recovery::scan_segment(
                bytes,
                f.header.seal(),
                &f.name,
                prev_batch,
                &read.unreadable,
            )?;
            let _ = empty_tx.send(read.buf);
            prev_batch = scan.max_batch;
            // From format 5 on a segment records where its predecessor's frames end: a sealed
            // segment whose frames stop anywhere else lost its last frames (rot, a misdirected
            // write), which the bytes after them (an earlier use's, in a recycled file) cannot
            // show. Past that end, bytes in which no frame of the segment's salt verifies are
            // not the log's: a recycled file's earlier use.
            let next = found.get(i + 1).filter(|n| n.header.version >= SEGMENT_VERSION_RECYCLED);
            if let Some(next) = next
                && scan.end != next.header.prev_end
            {
                return Err(match scan.torn {
                    Some(torn) => damaged(&f.name, torn),
                    None => Error::Corrupt {
                        file: f.name.clone(),
                        offset: scan.end,
                        reason: "a sealed segment's frames end before the end its successor records",
                    },
                });
            }
            // After an ordinary roll (a fence's roll keeps the fence's rules below).
            let stale_after_end = next.is_some_and(|n| n.header.fence_from.is_none())
                && scan.torn.is_some_and(|t| t.dropped_frames == 0);
            if let Some((before, torn_scan)) = torn_before.take() {
                // The segment before this one ended torn, and no fence for it opens this one:
                // that is the log's last write only if this is the last segment, holds no
                // frame yet, and recovery activated it for that fence (which was in flight).
                // A fence rolls only when the damage reaches the end of the segment.
                let torn = torn_scan.torn.expect("kept for its torn tail");
                if i + 1 == count
                    && scan.is_frameless(f.header.seal())
                    && torn.to == found[before].len
                    && activated_for_fence(&f.header, torn)
                {
                    report.torn = Some(Torn { in_previous_segment: true, ..torn });
                } else {
                    return Err(damaged(&found[before].name, torn));
                }
            }
            if let Some(torn) = scan.torn.filter(|_| !stale_after_end) {
                match found.get(i + 1) {
                    None => {
                        if report.torn.is_none() {
                            report.torn = Some(torn);
                        }
                    }
                    Some(next)
                        if recovery::fenced_from_next(
                            &next.head,
                            next.header.seal(),
                            torn.from,
                        ) => {}
                    Some(_) => torn_before = Some((i, scan.clone())),
                }
            }
            scans.push(scan);
        }
        Ok(())
    })?;
    let mut segments = Segments::default();
    for f in found {
        let info = SegInfo {
            seal: f.header.seal(),
            len: f.len,
            file: f.file,
            path: f.path,
            max_index: BTreeMap::new(),
        };
        segments.by_seq.insert(f.header.seq, info);
    }
    report.segments = segments.by_seq.len();
    Ok((segments, scans))
}

/// Whether `header` (a frame-less last segment) is the one recovery activated to fence the
/// previous segment's torn end `torn`. From format 4 on its header says so, with the offset
/// where that torn end begins: an ordinary roll never marks it, so rot or an unreadable block
/// at the end of a sealed segment before an ordinary roll is refused. A segment of formats 1
/// to 3 (activated by an older build) carries no mark: its torn predecessor is accepted as
/// those builds did, but never over unreadable (EIO) bytes.
fn activated_for_fence(header: &SegmentHeader, torn: Torn) -> bool {
    if header.version >= SEGMENT_VERSION_FLAGS {
        header.fence_from == Some(torn.from)
    } else {
        torn.unreadable_bytes == 0
    }
}

fn damaged(file: &str, torn: Torn) -> Error {
    let reason = if torn.unreadable_bytes > 0 {
        "blocks that cannot be read (EIO) inside a sealed segment"
    } else {
        "damage inside a sealed segment"
    };
    Error::Corrupt { file: file.into(), offset: torn.from, reason }
}

/// The committed id recovery reports: the newer (by index) of the meta file's and the log's
/// last `Commit` frame, the frame only when the log keeps its entry. A frame of format 4 on
/// names its entry by index and term, and is adopted only when the entry kept at that index
/// has that term, or when a later `Purge` frame of the group purged past it (format 9: the
/// purge is no meta save that would hold the id, and the frame named an entry the log
/// held); a format 3 frame (its term field is 0: unknown) is adopted when its index lies
/// within the log's entries or purge point, as that format's builds did. A frame that
/// fails is ignored with a warning: the meta file's id stands, which may lag (openraft then
/// re-applies a few more entries) but never names an entry the log does not hold. Returns
/// the committed index that is durable, and the segment holding it when the frame does (0:
/// the meta file does).
fn adopt_commit(meta: &mut MetaState, commit: Option<Commit>, ix: &Index) -> (Option<u64>, u64) {
    let Some(Commit { frame: c, purged_after, seq }) = commit else {
        return (meta.committed_index, 0);
    };
    let newer = match (meta.committed.is_some(), meta.committed_index) {
        (false, _) | (true, None) => true,
        (true, Some(m)) => c.index > m,
    };
    if !newer {
        return (meta.committed_index, 0);
    }
    let kept = match c.term {
        // A `Purge` frame after it may have purged the entry since.
        Some(term) => purged_after || ix.get(c.index).is_some_and(|l| l.term == term),
        None => {
            ix.last_index().is_some_and(|l| c.index <= l)
                || meta.purged_index.is_some_and(|p| c.index <= p)
        }
    };
    if kept {
        meta.committed = Some(c.payload);
        meta.committed_index = Some(c.index);
        return (meta.committed_index, seq);
    }
    tracing::warn!(
        index = c.index,
        term = ?c.term,
        kept_term = ?ix.get(c.index).map(|l| l.term),
        "a commit frame naming an entry the log does not hold is ignored"
    );
    (meta.committed_index, 0)
}

/// One group's state as the scan rebuilt it.
struct Rebuilt {
    index: Index,
    /// Its last `Commit` frame that no later truncation of it undid.
    commit: Option<Commit>,
    /// Its last `Vote` frame since its last drop, and the segment holding it.
    vote: Option<(ScannedVote, u64)>,
    /// Its highest `Purge` frame since its last drop, and the segment holding it.
    purge: Option<(ScannedPurge, u64)>,
}

/// A group's last `Commit` frame as the scan met it.
struct Commit {
    frame: ScannedCommit,
    /// A later `Purge` frame of the group purged past it. The writer places a `Commit` frame
    /// only while the group holds its entry, so the frame named an entry of the log that
    /// this purge took: the id stays good, though no entry is left to check its term.
    purged_after: bool,
    /// The segment holding it.
    seq: u64,
}

/// The purge point recovery reports: the highest `Purge` frame when it is past the meta
/// file's, else the meta file's (purge points only grow). The adopted frame also sets the
/// batch rule later meta saves stamp: the group's entries at or below it written in its
/// batch or before are purged. Returns the segment that then holds the group's newest purge
/// point (0: the meta file does).
fn adopt_purge(meta: &mut MetaState, purge: Option<(ScannedPurge, u64)>) -> u64 {
    let Some((p, seq)) = purge else { return 0 };
    if meta.purged_index.is_some_and(|m| m >= p.index) {
        return 0;
    }
    meta.purged = Some(p.payload);
    meta.purged_index = Some(p.index);
    meta.purged_batch = p.batch + 1;
    seq
}

/// The vote recovery reports: the last `Vote` frame when it is newer than the meta file's
/// slot (it names that slot's seq: no later meta save was durable), else the slot's. Returns
/// the segment that then holds the group's newest vote (0: the meta file does).
fn adopt_vote(meta: &mut MetaState, vote: Option<(ScannedVote, u64)>, file: &str) -> Result<u64> {
    let Some((v, seq)) = vote else { return Ok(0) };
    if v.after > meta.seq {
        // Meta save `after` returned before the frame was written: the slot must hold it.
        return Err(Error::Corrupt {
            file: file.into(),
            offset: 0,
            reason: "a vote frame names a meta save the group's meta file does not hold",
        });
    }
    if v.after < meta.seq {
        return Ok(0); // a later meta save holds this vote or a newer one
    }
    meta.vote = Some(v.payload);
    Ok(seq)
}

/// One group's entries as the frames are applied: `(index, term, seq, offset, len)`.
type Kept = Vec<(u64, u64, u64, u64, u32)>;

/// Applies the scanned frames in order, per group: entries must be consecutive, truncations
/// drop their suffix (and a `Commit` frame at or past it), everything at or below a group's
/// purged index written before its purge is gone. A `Rewrite` frame moves the entry it
/// copies (same index, same term) to itself; when the original is gone (its segment freed
/// after the rewrite was durable), the copies rebuild the group's entries before the first
/// one kept, and must join them without a hole. A group without a meta file must have no
/// live entry left (a dropped group's tombstone truncated them all).
fn rebuild(
    segments: &mut Segments,
    scans: Vec<SegmentScan>,
    metas: &BTreeMap<u64, (MetaState, File)>,
    config: &LogConfig,
) -> Result<(Option<Current>, u64, BTreeMap<u64, Rebuilt>)> {
    let hot_window_bytes = config.hot_window_bytes;
    #[cfg(feature = "test-util")]
    let drop_voids_damage = config.mutation != Some(super::state::LogMutation::DropKeepsDamage);
    #[cfg(not(feature = "test-util"))]
    let drop_voids_damage = true;
    #[cfg(feature = "test-util")]
    let purge_keeps_commit = config.mutation != Some(super::state::LogMutation::CommitForgetsPurge);
    #[cfg(not(feature = "test-util"))]
    let purge_keeps_commit = true;
    let mut max_batch = 0;
    let mut commits: BTreeMap<u64, Commit> = BTreeMap::new();
    let mut votes: BTreeMap<u64, (ScannedVote, u64)> = BTreeMap::new();
    let mut purges: BTreeMap<u64, (ScannedPurge, u64)> = BTreeMap::new();
    let mut current = None;
    let mut kept: BTreeMap<u64, Kept> = BTreeMap::new();
    // Per group: rewrite copies of entries before its first kept one, not joined yet.
    let mut prefix: BTreeMap<u64, Kept> = BTreeMap::new();
    let hole = |seg: &SegInfo, offset: u64| Error::Corrupt {
        file: lossy(&seg.path),
        offset,
        reason: "rewritten entries leave a hole before the group's first entry",
    };
    // Per group: the first damage in its frames (indexes that do not follow, rewrites that do
    // not fit). A later truncation of all its entries (index 0: a drop's tombstone) voids the
    // frames before it, damaged ones included: a dropped group's frames may jump where an
    // installed snapshot purged past its last entry, and its meta file, whose purge point
    // covered the jump, is gone. Damage that no such truncation voids refuses at the end.
    let mut damaged: BTreeMap<u64, Error> = BTreeMap::new();
    let last_seq = segments.by_seq.keys().next_back().copied();
    for ((&seq, seg), scan) in segments.by_seq.iter().zip(scans) {
        max_batch = max_batch.max(scan.max_batch);
        let mut seg_commits = scan.commits.into_iter();
        let mut seg_votes = scan.votes.into_iter();
        let mut seg_purges = scan.purges.into_iter();
        let format_votes = seg.seal.version >= SEGMENT_VERSION_VOTES;
        for f in &scan.frames {
            let group = f.header.group;
            if f.header.kind != FrameKind::Rewrite
                && prefix.get(&group).is_some_and(|p| !p.is_empty())
            {
                damaged.entry(group).or_insert_with(|| hole(seg, f.offset));
                prefix.remove(&group);
            }
            match f.header.kind {
                FrameKind::Rewrite => {
                    let (idx, term) = (f.header.index, f.header.term);
                    let meta = metas.get(&group).map(|(m, _)| m);
                    if meta.is_some_and(|m| {
                        m.purged_index.is_some_and(|p| idx <= p) && f.header.batch < m.purged_batch
                    }) {
                        continue; // purged
                    }
                    let kept = kept.entry(group).or_default();
                    let first = kept.first().map(|k| k.0);
                    let last = kept.last().map(|k| k.0);
                    let here = (idx, term, seq, f.offset, f.len);
                    match (first, last) {
                        (Some(first), Some(last)) if (first..=last).contains(&idx) => {
                            let k = &mut kept[(idx - first) as usize];
                            if k.1 != term {
                                damaged.entry(group).or_insert_with(|| Error::Corrupt {
                                    file: lossy(&seg.path),
                                    offset: f.offset,
                                    reason: "a rewrite's term is not the term of the entry it copies",
                                });
                                continue;
                            }
                            *k = here;
                        }
                        (Some(first), _) if idx < first => {
                            let p = prefix.entry(group).or_default();
                            if p.last().is_some_and(|l| l.0 + 1 != idx) {
                                damaged.entry(group).or_insert_with(|| hole(seg, f.offset));
                                continue;
                            }
                            p.push(here);
                            if idx + 1 == first {
                                let mut joined = std::mem::take(p);
                                joined.append(kept);
                                *kept = joined;
                            }
                        }
                        // The first copies when the originals are gone, and the ones that
                        // continue them.
                        (None, _) => kept.push(here),
                        (_, Some(last)) if idx == last + 1 => kept.push(here),
                        _ => {
                            damaged.entry(group).or_insert_with(|| Error::Corrupt {
                                file: lossy(&seg.path),
                                offset: f.offset,
                                reason: "a rewrite of an entry the log never held",
                            });
                        }
                    }
                }
                FrameKind::Entry => {
                    let idx = f.header.index;
                    let meta = metas.get(&group).map(|(m, _)| m);
                    if meta.is_some_and(|m| {
                        m.purged_index.is_some_and(|p| idx <= p) && f.header.batch < m.purged_batch
                    }) {
                        continue; // purged
                    }
                    let kept = kept.entry(group).or_default();
                    if let Some(&(last, ..)) = kept.last()
                        && idx != last + 1
                    {
                        damaged.entry(group).or_insert_with(|| Error::Corrupt {
                            file: lossy(&seg.path),
                            offset: f.offset,
                            reason: "entry indexes are not consecutive",
                        });
                        continue;
                    }
                    kept.push((idx, f.header.term, seq, f.offset, f.len));
                }
                FrameKind::Truncate => {
                    let since = f.header.index;
                    match f.header.term {
                        0 => {}
                        DROP_TERM if format_votes && since == 0 => {
                            // The group's drop voids its votes and purge points.
                            votes.remove(&group);
                            purges.remove(&group);
                        }
                        _ if format_votes => {
                            return Err(Error::Corrupt {
                                file: lossy(&seg.path),
                                offset: f.offset,
                                reason: "a truncation frame with an unknown term",
                            });
                        }
                        _ => {} // formats before 8 never read the field
                    }
                    kept.entry(group).or_default().retain(|k| k.0 < since);
                    if since == 0 {
                        if drop_voids_damage {
                            damaged.remove(&group);
                        }
                        prefix.remove(&group);
                    }
                    if commits.get(&group).is_some_and(|c| c.frame.index >= since) {
                        commits.remove(&group);
                    }
                }
                FrameKind::Commit => {
                    let c = seg_commits.next().expect("a scanned commit per commit frame");
                    debug_assert_eq!((c.group, c.index), (group, f.header.index));
                    commits.insert(group, Commit { frame: c, purged_after: false, seq });
                }
                FrameKind::Vote => {
                    let v = seg_votes.next().expect("a scanned vote per vote frame");
                    debug_assert_eq!((v.group, v.after), (group, f.header.index));
                    if f.header.term != 0 {
                        return Err(Error::Corrupt {
                            file: lossy(&seg.path),
                            offset: f.offset,
                            reason: "a vote frame with a term",
                        });
                    }
                    votes.insert(group, (v, seq));
                }
                FrameKind::Purge => {
                    let p = seg_purges.next().expect("a scanned purge per purge frame");
                    debug_assert_eq!((p.group, p.index), (group, f.header.index));
                    if f.header.term != 0 {
                        return Err(Error::Corrupt {
                            file: lossy(&seg.path),
                            offset: f.offset,
                            reason: "a purge frame with a term",
                        });
                    }
                    // Everything of the group at or below it so far is gone (the writer puts
                    // no later entry at or below it into the frame's batch).
                    let upto = p.index;
                    kept.entry(group).or_default().retain(|k| k.0 > upto);
                    if let Some(pre) = prefix.get_mut(&group) {
                        pre.retain(|k| k.0 > upto);
                    }
                    if let Some(c) = commits.get_mut(&group).filter(|c| c.frame.index <= upto) {
                        c.purged_after = purge_keeps_commit;
                    }
                    if purges.get(&group).is_none_or(|(old, _)| upto > old.index) {
                        purges.insert(group, (p, seq));
                    }
                }
                FrameKind::Skip => {}
            }
        }
        if Some(seq) == last_seq {
            current = Some(Current {
                seq,
                seal: seg.seal,
                len: seg.len,
                file: Arc::clone(&seg.file),
                pos: scan.next_write,
            });
        }
    }
    if let Some(e) = damaged.into_values().next() {
        return Err(e);
    }
    if let Some((_, p)) = prefix.iter().find(|(_, p)| !p.is_empty()) {
        let (_, _, seq, offset, _) = p[0];
        let seg = segments.by_seq.get(&seq).expect("a scanned segment");
        return Err(hole(seg, offset));
    }
    if let Some((group, k)) = kept.iter().find(|(g, k)| !metas.contains_key(g) && !k.is_empty()) {
        let (_, _, seq, offset, _) = k[0];
        return Err(Error::Corrupt {
            file: segments.by_seq.get(&seq).map_or_else(String::new, |s| lossy(&s.path)),
            offset,
            reason: if *group > 0 {
                "live entries of a group that has no meta file"
            } else {
                "live entries of group 0 without its meta file"
            },
        });
    }
    let mut rebuilt = BTreeMap::new();
    for (&id, (meta, _)) in metas {
        let (commit, vote, purge) = (commits.remove(&id), votes.remove(&id), purges.remove(&id));
        let purged = meta.purged_index.max(purge.as_ref().map(|(p, _)| p.index));
        let mut ix = Index::new(purged.map_or(0, |p| p + 1), hot_window_bytes);
        let group_kept = kept.remove(&id).unwrap_or_default();
        if let Some(&(first, ..)) = group_kept.first() {
            ix = Index::new(first, hot_window_bytes);
        }
        for (idx, term, seq, offset, len) in group_kept {
            if let Some(seg) = segments.by_seq.get_mut(&seq) {
                seg.holds(id, idx);
            }
            ix.push(idx, Loc { term, seg: seq, offset, len, durable: true, hot: None });
        }
        rebuilt.insert(id, Rebuilt { index: ix, commit, vote, purge });
    }
    Ok((current, max_batch, rebuilt))
}
