//! The writer state (held by whichever caller is writing, see `queue.rs`): everything queued
//! becomes as few aligned write-through writes as the segment boundaries allow, and only then
//! are the queued items completed.
//!
//! Each flush is one *batch*: frames encoded back to back, padded with zeros to the next
//! 4096-byte boundary, written with one `write_at` at a fresh aligned offset. A durable append
//! is that write returning: under write-through there is no `fsync`; without write-through
//! (buffered carriers) a barrier follows each flush.
//!
//! Invariants, asserted before each write: a batch starts on a fresh aligned block of the
//! current segment and ends inside it; every frame is sealed for the offset it lands at.
//!
//! The committed id a batch carries (a `Commit` frame, last in the batch) is the one pending
//! when the batch was dequeued, never one saved while it was being encoded, and only when the
//! entry it names is durable or in the batch (so a `Commit` frame never names an entry the
//! log could not hold after the write); the frame records the id's term, which recovery
//! checks against the entry it keeps at that index.
//!
//! A segment activated by `fence` (recovery's fence for a torn end with no room left in its
//! segment) is marked so in its header, with the offset where the torn end begins: the mark
//! is what lets a later recovery accept that torn end, and an ordinary roll never sets it.
//! Every roll records where the sealed segment's frames end (`prev_end`), and seals the new
//! segment with a salt its file's earlier frames do not verify under (a recycled spare).
//!
//! One batch carries the frames of every group queued (one durable write for all of them).
//! A frame of a group other than 0 never goes into a segment of a format before 6 (whose
//! frames have no group id), nor a `Rewrite` frame into one before 7, nor a `Vote` or a
//! drop's `Truncate` into one before 8, nor a `Purge` into one before 9: the writer rolls to
//! a new segment first.
//!
//! A vote is a `Vote` frame in the batch like any other (the votes of many groups, during a
//! mass election, share one write). Once its write returned, the group's `vote_seq` names
//! the segment holding it, until a meta save of the group (which holds that vote or a newer
//! one) is durable; a purge saves the meta file before it frees that segment.
//!
//! A purge is a `Purge` frame the same way (`purge_seq` for its segment): it purges the
//! group's entries at or below its index written in its batch or before, so the writer
//! never places a later entry or rewrite of the group at or below that index into the same
//! batch (it flushes first), never ends that batch with a `Commit` frame the purge covers,
//! and stamps the group's later meta saves with the batch after the frame's (`purged_batch`,
//! the same rule in the meta file's terms). Once its write returned the purge point is
//! durable, and segments it releases may be freed.
//!
//! A rewrite (a group's live entries copied forward as `Rewrite` frames) moves the group's
//! index to the copies, and only once its last frame is durable does it release the group
//! from every segment older than the one its first copy landed in.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use vellum_engine::AlignedBuf;

use super::frame::{
    ALIGN, DROP_TERM, FRAME_HEADER_LEN_GROUPS, FrameHeader, FrameKind, SEGMENT_HEADER_LEN,
    SEGMENT_VERSION, SEGMENT_VERSION_FLAGS, SEGMENT_VERSION_GROUPS, SEGMENT_VERSION_PURGES,
    SEGMENT_VERSION_REWRITE, SEGMENT_VERSION_VOTES, Seal, SegmentHeader, encode_into,
};
use super::meta::MetaState;
use super::recovery::CROSS_SEGMENT;
use super::segments::{SegInfo, SpareMaker, fresh_salt};
use super::state::{Group, Item, PendingCommit, Shared, Torn, lock, write_lock};
use crate::error::{Error, Result, SharedError};
use crate::metrics as m;

/// The segment being appended to.
#[derive(Debug)]
pub(super) struct Current {
    pub seq: u64,
    pub seal: Seal,
    /// Bytes of the segment file.
    pub len: u64,
    pub file: Arc<vellum_engine::File>,
    pub pos: u64,
}

/// A frame placed into the batch buffer, for the index update after the write.
struct Placed {
    group: Arc<Group>,
    index: u64,
    term: u64,
    offset: u64,
    len: u32,
    kind: FrameKind,
}

/// The frames of the write being built, encoded straight into the aligned buffer the write
/// goes out from (kept from flush to flush: no allocation, no copy per flush), and where
/// each landed in it.
struct Pending {
    buf: AlignedBuf,
    /// Bytes of frames in `buf`.
    len: usize,
    placed: Vec<Placed>,
    /// Rewrites whose last frame is in this write: `(group, seq)`, where `seq` is the segment
    /// its first copy landed in.
    released: Vec<(Arc<Group>, u64)>,
    /// `Purge` frames in this write: `(group, index)`.
    purges: Vec<(u64, u64)>,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            buf: AlignedBuf::zeroed(0, ALIGN),
            len: 0,
            placed: Vec::new(),
            released: Vec::new(),
            purges: Vec::new(),
        }
    }
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The next `n` bytes, growing the buffer (keeping what it holds) so that the padded
    /// write always fits.
    fn slot(&mut self, n: usize) -> &mut [u8] {
        let need = (self.len + n).next_multiple_of(ALIGN);
        if self.buf.len() < need {
            let mut bigger = AlignedBuf::zeroed(need.next_power_of_two(), ALIGN);
            bigger.as_mut_slice()[..self.len].copy_from_slice(&self.buf.as_slice()[..self.len]);
            self.buf = bigger;
        }
        let at = self.len;
        self.len += n;
        &mut self.buf.as_mut_slice()[at..at + n]
    }

    /// The frames padded with zeros to the next 4096-byte boundary: the bytes of one write.
    fn padded(&mut self) -> &[u8] {
        let end = self.len.next_multiple_of(ALIGN);
        self.buf.as_mut_slice()[self.len..end].fill(0);
        &self.buf.as_slice()[..end]
    }

    fn clear(&mut self) {
        self.len = 0;
        self.placed.clear();
        self.released.clear();
        self.purges.clear();
    }
}

pub(super) struct Writer {
    pub current: Option<Current>,
    pub next_seq: u64,
    /// Batch id of the next flush.
    pub batch: u64,
    /// Per group: the first batch after its newest purge (stamped into its meta saves).
    pub purged_batch: BTreeMap<u64, u64>,
    /// Per group: index of the last entry it holds that is durable or placed into the write
    /// being built (after truncations): a committed id past it is not carried yet. Absent:
    /// none.
    pub last_entry: BTreeMap<u64, u64>,
    pub spares: SpareMaker,
    /// The write being built, kept from flush to flush.
    scratch: Pending,
}

pub(super) fn random_salt() -> u64 {
    let u = vellum_engine::Uuid::random().map_or([0x5A; 16], |u| u.0);
    u64::from_le_bytes([u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7]])
}

impl Writer {
    pub fn new(
        current: Option<Current>,
        next_seq: u64,
        batch: u64,
        purged_batch: BTreeMap<u64, u64>,
        last_entry: BTreeMap<u64, u64>,
        spares: SpareMaker,
    ) -> Writer {
        Writer {
            current,
            next_seq,
            batch,
            purged_batch,
            last_entry,
            spares,
            scratch: Pending::default(),
        }
    }

    /// Makes one batch of queued items durable, in queue order. A failure fails the batch
    /// and (through the combiner) every later item: the log is poisoned until reopened.
    pub fn write_batch(&mut self, shared: &Shared, items: &mut [Item]) -> Result<(), SharedError> {
        let started = Instant::now();
        let result = self.write_items(shared, items);
        let took = started.elapsed();
        match &result {
            Err(e) => tracing::error!(error = %e, "raft log write failed; the log is poisoned"),
            Ok(()) => shared.disk.record(took),
        }
        metrics::histogram!(m::WRITER_BATCH_DURATION).record(took.as_secs_f64());
        result.map_err(Arc::new)
    }

    fn write_items(&mut self, shared: &Shared, items: &mut [Item]) -> Result<()> {
        let mut pending = std::mem::take(&mut self.scratch);
        let result = self.write_into(shared, items, &mut pending);
        pending.clear();
        // One oversized entry must not pin its buffer for the life of the log.
        if pending.buf.len() > 2 * shared.config.max_batch_bytes.next_multiple_of(ALIGN) {
            pending = Pending::default();
        }
        self.scratch = pending;
        result
    }

    fn write_into(
        &mut self,
        shared: &Shared,
        items: &mut [Item],
        pending: &mut Pending,
    ) -> Result<()> {
        // The committed ids this batch may carry: those pending now, as the batch is
        // dequeued. One saved while the batch is being encoded waits for the next write.
        let committed = shared.committed_pending();
        for item in items.iter_mut() {
            match item {
                Item::Entries { group, entries, .. } => {
                    for e in entries {
                        let (kind, index, term) = (FrameKind::Entry, e.index, e.term);
                        self.add_frame(shared, pending, group, kind, index, term, &e.payload)?;
                    }
                }
                Item::Truncate { group, since, drop, .. } => {
                    let term = if *drop { DROP_TERM } else { 0 };
                    self.add_frame(shared, pending, group, FrameKind::Truncate, *since, term, &[])?;
                }
                Item::Vote { group, vote, after, .. } => {
                    self.add_frame(shared, pending, group, FrameKind::Vote, *after, 0, vote)?;
                }
                Item::Purge { group, upto, purged, .. } => {
                    self.add_frame(shared, pending, group, FrameKind::Purge, *upto, 0, purged)?;
                    // The frame's batch is fixed once placed: a meta save after it stamps the
                    // batch after (the meta rule is "written before `purged_batch`").
                    self.purged_batch.insert(group.id, self.batch + 1);
                }
                Item::Rewrite { group, entries, commit, .. } => {
                    let mut first_seq = None;
                    for e in entries.iter() {
                        let (kind, index, term) = (FrameKind::Rewrite, e.index, e.term);
                        self.add_frame(shared, pending, group, kind, index, term, &e.payload)?;
                        first_seq.get_or_insert_with(|| {
                            self.current.as_ref().expect("a frame was placed").seq
                        });
                    }
                    if let Some(c) = commit {
                        let (kind, index, term) = (FrameKind::Commit, c.index, c.term);
                        self.add_frame(shared, pending, group, kind, index, term, &c.payload)?;
                    }
                    if let Some(seq) = first_seq {
                        pending.released.push((Arc::clone(group), seq));
                    }
                }
                Item::Meta { group, state, .. } => {
                    self.flush(shared, pending)?;
                    state.purged_batch = self.purged_batch.get(&group.id).copied().unwrap_or(0);
                    Self::write_meta(shared, group, state)?;
                    group.committed_durable(state.committed_index);
                    group.purged_durable(state.purged_index);
                }
            }
        }
        let carried: Vec<(Arc<Group>, u64)> = committed
            .into_iter()
            .filter_map(|(g, c)| self.add_commit(shared, pending, &g, &c).map(|i| (g, i)))
            .collect();
        self.flush(shared, pending)?;
        for (g, index) in carried {
            g.committed_durable(Some(index));
        }
        Ok(())
    }

    /// Ends the batch about to go out with a `Commit` frame for `committed` (the id pending
    /// when the batch was dequeued), when the batch has frames anyway, the frame fits, the id
    /// is not durable already, and the entry it names is kept (not purged) and durable or in
    /// this batch: the id then costs no write of its own. Last in the batch, so that it
    /// survives a torn write only with every entry before it (recovery stops at the first
    /// damaged frame).
    fn add_commit(
        &mut self,
        shared: &Shared,
        pending: &mut Pending,
        group: &Arc<Group>,
        committed: &PendingCommit,
    ) -> Option<u64> {
        let PendingCommit { index, term, ref payload } = *committed;
        if pending.is_empty() || group.durable_committed().is_some_and(|d| d >= index) {
            return None; // nothing goes out, or a meta save of this batch made it durable
        }
        if self.last_entry.get(&group.id).is_none_or(|&last| index > last) {
            return None; // its entry is queued after this batch: the next write carries it
        }
        // A `Purge` frame of the group in this write purges as much as a durable one.
        let in_write = pending.purges.iter().filter(|&&(g, _)| g == group.id).map(|&(_, p)| p);
        let purged = group.durable_purged().max(in_write.max());
        #[cfg(feature = "test-util")]
        let purged = if shared.config.mutation == Some(super::state::LogMutation::CommitPurged) {
            None
        } else {
            purged
        };
        if purged.is_some_and(|p| index <= p) {
            // Its entry is purged (a snapshot install purges past the log's end, and the
            // committed id follows): recovery adopts a `Commit` frame only beside the entry
            // it names, so only a meta save makes this id durable.
            return None;
        }
        let cur = self.current.as_ref()?;
        let flen = cur.seal.frame_len(payload.len());
        let fits = cur.pos + (pending.len + flen).next_multiple_of(ALIGN) as u64 <= cur.len
            && pending.len + flen <= shared.config.max_batch_bytes.max(ALIGN);
        // Format 3 segments have `Commit` frames without a term: this build writes none; and
        // a segment before format 6 has no group ids.
        let format_ok = cur.seal.version >= SEGMENT_VERSION_FLAGS
            && (group.id == 0 || cur.seal.version >= SEGMENT_VERSION_GROUPS);
        if !format_ok || !fits {
            return None;
        }
        let h = FrameHeader {
            kind: FrameKind::Commit,
            payload_len: payload.len() as u32,
            index,
            term,
            batch: self.batch,
            group: group.id,
        };
        let at = cur.pos + pending.len as u64;
        let seal = cur.seal;
        encode_into(pending.slot(flen), seal, at, &h, payload);
        pending.placed.push(Placed {
            group: Arc::clone(group),
            index,
            term,
            offset: at - cur.pos,
            len: flen as u32,
            kind: FrameKind::Commit,
        });
        metrics::counter!(m::COMMITTED_CARRIED_TOTAL).increment(1);
        Some(index)
    }

    #[allow(clippy::too_many_arguments)] // one frame's fields, each used once
    fn add_frame(
        &mut self,
        shared: &Shared,
        pending: &mut Pending,
        group: &Arc<Group>,
        kind: FrameKind,
        index: u64,
        term: u64,
        payload: &[u8],
    ) -> Result<()> {
        // The largest frame this payload makes in any segment this build writes into.
        let flen_max = FRAME_HEADER_LEN_GROUPS + payload.len().next_multiple_of(8);
        // `LogCore::append` refuses entries that cannot fit before they are queued; this is
        // the last line, and it must never be reached with a segment half written.
        let max = shared.segment_bytes - SEGMENT_HEADER_LEN as u64;
        if flen_max as u64 > max {
            return Err(Error::EntryTooLarge { len: payload.len(), max });
        }
        let fits = |cur: &Current, buffered: usize| {
            let flen = cur.seal.frame_len(payload.len());
            cur.pos + (buffered + flen).next_multiple_of(ALIGN) as u64 <= cur.len
        };
        // A segment of a format without group ids takes group 0's frames only, one before
        // format 7 no rewrites.
        let needs = if kind == FrameKind::Purge {
            SEGMENT_VERSION_PURGES
        } else if kind == FrameKind::Vote || kind == FrameKind::Truncate && term != 0 {
            SEGMENT_VERSION_VOTES
        } else if kind == FrameKind::Rewrite {
            SEGMENT_VERSION_REWRITE
        } else if group.id != 0 {
            SEGMENT_VERSION_GROUPS
        } else {
            0
        };
        let holds_group = |cur: &Current| cur.seal.version >= needs;
        // An entry at or below a purge point placed in this write goes into the next one:
        // recovery purges the entries of the frame's batch, and this one was queued after.
        let after_purge = matches!(kind, FrameKind::Entry | FrameKind::Rewrite)
            && pending.purges.iter().any(|&(g, p)| g == group.id && index <= p);
        if after_purge
            || pending.len + flen_max > shared.config.max_batch_bytes && !pending.is_empty()
        {
            self.flush(shared, pending)?;
        }
        if !self.current.as_ref().is_some_and(|c| holds_group(c) && fits(c, pending.len)) {
            self.flush(shared, pending)?;
            if !self.current.as_ref().is_some_and(|c| holds_group(c) && fits(c, 0)) {
                self.roll(shared, index, None)?;
            }
        }
        let cur = self.current.as_ref().expect("a current segment after the roll");
        let flen = cur.seal.frame_len(payload.len());
        let offset = pending.len as u64;
        let h = FrameHeader {
            kind,
            payload_len: payload.len() as u32,
            index,
            term,
            batch: self.batch,
            group: group.id,
        };
        encode_into(pending.slot(flen), cur.seal, cur.pos + offset, &h, payload);
        pending.placed.push(Placed {
            group: Arc::clone(group),
            index,
            term,
            offset,
            len: flen as u32,
            kind,
        });
        if kind == FrameKind::Purge {
            pending.purges.push((group.id, index));
        }
        match kind {
            FrameKind::Entry => {
                self.last_entry.insert(group.id, index);
            }
            FrameKind::Truncate => {
                if self.last_entry.get(&group.id).is_some_and(|&l| l >= index) {
                    match index.checked_sub(1) {
                        Some(last) => self.last_entry.insert(group.id, last),
                        None => self.last_entry.remove(&group.id),
                    };
                }
            }
            FrameKind::Skip
            | FrameKind::Commit
            | FrameKind::Rewrite
            | FrameKind::Vote
            | FrameKind::Purge => {}
        }
        Ok(())
    }

    /// Writes the buffered frames as one aligned write.
    fn flush(&mut self, shared: &Shared, pending: &mut Pending) -> Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let cur = self.current.as_mut().expect("frames are only buffered into a current segment");
        let bytes = pending.padded();
        let len = bytes.len();
        assert!(cur.pos.is_multiple_of(ALIGN as u64), "a batch starts on a fresh aligned block");
        assert!(cur.pos + len as u64 <= cur.len, "a batch stays inside its segment");
        cur.file.write_at(bytes, cur.pos)?;
        if shared.needs_barrier {
            shared.volume.sync()?;
        }
        let (seq, base) = (cur.seq, cur.pos);
        cur.pos += len as u64;
        let placed = &pending.placed;
        let entries = placed.iter().filter(|p| p.kind == FrameKind::Entry).count();
        // Each group's index, locked once per run of its frames.
        let mut at = 0;
        while at < placed.len() {
            let group = &placed[at].group;
            let mut ix = write_lock(&group.index);
            while at < placed.len() && Arc::ptr_eq(&placed[at].group, group) {
                let p = &placed[at];
                match p.kind {
                    FrameKind::Entry => ix.written(p.index, p.term, seq, base + p.offset, p.len),
                    FrameKind::Rewrite => {
                        ix.relocated(p.index, p.term, seq, base + p.offset, p.len);
                    }
                    FrameKind::Truncate
                    | FrameKind::Skip
                    | FrameKind::Commit
                    | FrameKind::Vote
                    | FrameKind::Purge => {}
                }
                at += 1;
            }
            ix.evict();
        }
        {
            // Track each group's newest live entry in each segment, in frame order: a
            // truncation lowers it everywhere (purge frees a segment only when no group has
            // anything newer than its purge point in it).
            let mut segs = lock(&shared.segments);
            for p in placed {
                match p.kind {
                    // Set before this segment can stop being the newest: a purge that finds
                    // it freeable sees where the vote is.
                    FrameKind::Vote => p.group.vote_seq.store(seq, Ordering::Release),
                    // The same for the committed id this frame made durable.
                    FrameKind::Commit => p.group.commit_seq.store(seq, Ordering::Release),
                    FrameKind::Purge => {
                        // The same for the purge point, which is durable from now on.
                        p.group.purge_seq.store(seq, Ordering::Release);
                        p.group.purged_durable(Some(p.index));
                    }
                    FrameKind::Entry | FrameKind::Rewrite => {
                        if let Some(seg) = segs.by_seq.get_mut(&seq) {
                            seg.holds(p.group.id, p.index);
                        }
                    }
                    FrameKind::Truncate => {
                        for seg in segs.by_seq.values_mut() {
                            seg.truncated(p.group.id, p.index);
                        }
                    }
                    FrameKind::Skip => {}
                }
            }
            // Every copy of these rewrites is durable now: the older segments hold nothing
            // their groups need.
            for (group, first_seq) in &pending.released {
                for (_, seg) in segs.by_seq.range_mut(..first_seq) {
                    seg.released(group.id);
                }
            }
        }
        metrics::histogram!(m::APPEND_BATCH_ENTRIES).record(entries as f64);
        metrics::counter!(m::APPENDED_ENTRIES_TOTAL).increment(entries as u64);
        self.batch += 1;
        pending.clear();
        Ok(())
    }

    /// Activates the spare segment: one durable write of its header. `fence_from` marks a
    /// segment that recovery activates for the fence of the previous segment's torn end
    /// (beginning at that offset); an ordinary roll passes `None`.
    fn roll(&mut self, shared: &Shared, first_index: u64, fence_from: Option<u64>) -> Result<()> {
        let spare = self.spares.take()?;
        // Where the segment being sealed ends: its write position, or where the torn end a
        // fence roll is for begins.
        let prev_end = fence_from.or(self.current.as_ref().map(|c| c.pos)).unwrap_or(0);
        #[allow(unused_mut)] // the test-util mutant below
        let mut salt = fresh_salt(spare.stale_salt);
        #[cfg(feature = "test-util")]
        if shared.config.mutation == Some(super::state::LogMutation::ReuseSalt) {
            salt = spare.stale_salt.unwrap_or(salt);
        }
        let header = SegmentHeader {
            version: SEGMENT_VERSION,
            seq: self.next_seq,
            salt,
            first_index,
            fence_from,
            prev_end,
        };
        spare.file.write_at(&header.encode(), 0)?;
        if shared.needs_barrier {
            shared.volume.sync()?;
        }
        let info = SegInfo {
            seal: header.seal(),
            len: spare.len,
            file: Arc::clone(&spare.file),
            path: spare.path,
            max_index: BTreeMap::new(),
        };
        lock(&shared.segments).by_seq.insert(header.seq, info);
        self.current = Some(Current {
            seq: header.seq,
            seal: header.seal(),
            len: spare.len,
            file: spare.file,
            pos: SEGMENT_HEADER_LEN as u64,
        });
        self.next_seq += 1;
        metrics::counter!(m::SEGMENTS_ROLLED_TOTAL).increment(1);
        Ok(())
    }

    /// Declares a torn tail dead with one durable `Skip` frame: at the torn bytes' aligned
    /// end in the current segment; or, with no room left there, at the start of a fresh
    /// segment (a roll first: two writes, and a power cut between them leaves a torn segment
    /// followed by a frame-less one, which recovery accepts and fences again); or at the
    /// start of the current segment when the torn bytes end the one before it.
    pub fn fence(&mut self, shared: &Shared, torn: Torn) -> Result<()> {
        let (at, to) = if torn.in_previous_segment {
            let cur = self.current.as_ref().expect("a frame-less last segment follows");
            assert_eq!(cur.pos, SEGMENT_HEADER_LEN as u64, "the last segment holds no frame");
            (SEGMENT_HEADER_LEN as u64, CROSS_SEGMENT)
        } else if self.current.as_ref().is_some_and(|c| torn.to + ALIGN as u64 <= c.len) {
            (torn.to, torn.to)
        } else {
            // `first_index` is informational: the fence's segment opens with no entry.
            self.roll(shared, 0, Some(torn.from))?;
            (SEGMENT_HEADER_LEN as u64, CROSS_SEGMENT)
        };
        let cur = self.current.as_mut().expect("a torn tail lies in the current segment");
        let h = FrameHeader {
            kind: FrameKind::Skip,
            payload_len: 0,
            index: torn.from,
            term: to,
            batch: self.batch,
            group: 0,
        };
        let mut aligned = AlignedBuf::zeroed(ALIGN, ALIGN);
        encode_into(&mut aligned.as_mut_slice()[..cur.seal.frame_len(0)], cur.seal, at, &h, &[]);
        assert!(at.is_multiple_of(ALIGN as u64) && at + ALIGN as u64 <= cur.len);
        cur.file.write_at(aligned.as_slice(), at)?;
        if shared.needs_barrier {
            shared.volume.sync()?;
        }
        cur.pos = at + ALIGN as u64;
        self.batch += 1;
        Ok(())
    }

    fn write_meta(shared: &Shared, group: &Group, state: &MetaState) -> Result<()> {
        group.meta_file.write_at(&state.encode()?, state.slot_offset())?;
        if shared.needs_barrier {
            shared.volume.sync()?;
        }
        // The slot holds the group's newest vote, purge point and committed id: every `Vote`
        // or `Purge` frame queued before this save is in it, and so is every committed id a
        // `Commit` frame carried before it; later ones are flushed after it.
        group.vote_seq.store(0, Ordering::Release);
        group.purge_seq.store(0, Ordering::Release);
        group.commit_seq.store(0, Ordering::Release);
        Ok(())
    }
}
