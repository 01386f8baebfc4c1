//! Recovery's scan of one segment: classify every byte after the header as frames, padding,
//! a gap an earlier recovery fenced, a torn tail, or damage (docs/RAFT-LOG.md, "Recovery").
//!
//! A segment is scanned frame by frame from byte 4096. Parsing stops at the first position E
//! that is not a valid frame (zero padding inside a block just skips to the next block). What
//! follows E decides:
//!
//! - nothing but zeros: the clean end of the segment;
//! - a `Skip` frame that names E: an earlier recovery abandoned `[E, skip)`; scanning goes on
//!   after it;
//! - bytes of the one write that was in flight at the power cut (valid frames of a single
//!   batch, the one at E or the next, and/or garbage): a torn tail. Only the log's last
//!   write can have left one, which the caller (`open.rs`) checks: it is the last segment's,
//!   or the segment before a last one that holds no frame yet;
//! - anything else (valid frames of another batch): the log is damaged where no crash can
//!   have left it, and open refuses. Truncating there would turn a voter into an amnesiac.
//!
//! A segment of format 5 on may be a recycled file: past its last write lie an earlier use's
//! bytes, sealed with another salt, which never verify here. The scan reads them like torn
//! bytes (it cannot tell them apart, and must not: a torn write of this salt could later be
//! completed by new bytes into a frame that verifies), so the fence never lets a write land
//! on them. A sealed segment's end is instead checked against its successor's record of it
//! (`open.rs`): there, bytes after that end are not the log's, whatever they are, as long as
//! no frame of this salt verifies among them.
//!
//! Pure functions of the bytes: nothing here reads the carrier or panics on what it finds.

use super::frame::{
    self, ALIGN, FrameHeader, FrameKind, Parsed, SEGMENT_HEADER_LEN, SEGMENT_VERSION_FLAGS,
    SEGMENT_VERSION_RECYCLED, Seal,
};
use super::state::Torn;
use crate::error::{Error, Result};

/// The `to` of a `Skip` frame at the start of a segment that fences the previous segment's
/// torn end (there was no room left in it for the fence).
pub const CROSS_SEGMENT: u64 = u64::MAX;

/// True when `next` (the following segment's bytes) opens with the fence for a torn end at
/// `from` of the segment before it.
pub fn fenced_from_next(next: &[u8], seal: Seal, from: u64) -> bool {
    matches!(
        frame::parse(&next[SEGMENT_HEADER_LEN.min(next.len())..], seal, SEGMENT_HEADER_LEN as u64),
        Parsed::Valid { header, .. } if header.kind == FrameKind::Skip && header.index == from && header.term == CROSS_SEGMENT
    )
}

/// A valid frame found by the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedFrame {
    pub header: FrameHeader,
    pub offset: u64,
    pub len: u32,
}

/// A `Commit` frame found by the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedCommit {
    /// The group whose committed id it is (0 before format 6).
    pub group: u64,
    /// The committed index.
    pub index: u64,
    /// The committed id's term (segment format 4 on); `None` in a format 3 segment, whose
    /// `Commit` frames carry 0 in that field.
    pub term: Option<u64>,
    /// The caller's encoding of the log id.
    pub payload: Vec<u8>,
}

/// A `Vote` frame found by the scan (segment format 8 on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedVote {
    pub group: u64,
    /// The seq of the group's newest meta save queued before the vote: a meta slot of this
    /// seq or lower is older than the vote.
    pub after: u64,
    /// The caller's encoding of the vote.
    pub payload: Vec<u8>,
}

/// A `Purge` frame found by the scan (segment format 9 on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedPurge {
    pub group: u64,
    /// The purged index.
    pub index: u64,
    /// The batch that wrote the frame: the group's entries at or below `index` written in it
    /// or before are purged.
    pub batch: u64,
    /// The caller's encoding of the purged id.
    pub payload: Vec<u8>,
}

/// The scan of one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    pub frames: Vec<ScannedFrame>,
    /// E: where the valid frames end (the segment's length when they fill it).
    pub end: u64,
    /// Where the next batch may be written (aligned); for a torn tail, after the `Skip`.
    pub next_write: u64,
    pub torn: Option<Torn>,
    /// Highest batch id in the segment (including dropped torn frames).
    pub max_batch: u64,
    /// The `from` of the cross-segment fence this segment opens with, if it has one.
    pub fences_from: Option<u64>,
    /// The segment's valid `Commit` frames, in frame order (the same order as theirs in
    /// `frames`).
    pub commits: Vec<ScannedCommit>,
    /// The segment's valid `Vote` frames, in frame order.
    pub votes: Vec<ScannedVote>,
    /// The segment's valid `Purge` frames, in frame order.
    pub purges: Vec<ScannedPurge>,
}

impl SegmentScan {
    /// Nothing was ever written after the header but, at most, the write in flight into its
    /// first block (no valid frame, no fence, no damage past that block): a segment that a
    /// cross-segment fence had just activated when the power was cut.
    ///
    /// In a segment of format 5 on (`seal`), bytes past the first block may be a recycled
    /// file's earlier use, sealed with another salt: only the fence's write (its first block)
    /// was ever written under this one, so what no frame of this salt verifies in is not the
    /// log's.
    pub fn is_frameless(&self, seal: Seal) -> bool {
        let first_block_end = (SEGMENT_HEADER_LEN + ALIGN) as u64;
        let recycled = seal.version >= SEGMENT_VERSION_RECYCLED;
        self.frames.is_empty()
            && self.fences_from.is_none()
            && self
                .torn
                .is_none_or(|t| t.dropped_frames == 0 && (recycled || t.to <= first_block_end))
    }
}

fn corrupt(file: &str, offset: usize, reason: &'static str) -> Error {
    Error::Corrupt { file: file.into(), offset: offset as u64, reason }
}

/// The next valid frame at or after `from` (frames start on 8-byte boundaries), skipping
/// all-zero blocks quickly.
fn next_valid(bytes: &[u8], from: usize, seal: Seal) -> Option<(usize, FrameHeader, usize)> {
    let mut pos = from.next_multiple_of(8);
    while pos + seal.header_len() <= bytes.len() {
        if pos.is_multiple_of(ALIGN) && frame::is_zero(&bytes[pos..(pos + ALIGN).min(bytes.len())])
        {
            pos += ALIGN;
            continue;
        }
        if bytes[pos..pos + 4] == frame::FRAME_MAGIC
            && let Parsed::Valid { header, len } = frame::parse(&bytes[pos..], seal, pos as u64)
        {
            return Some((pos, header, len));
        }
        pos += 8;
    }
    None
}

fn last_nonzero(bytes: &[u8], from: usize) -> Option<usize> {
    frame::last_nonzero(&bytes[from..]).map(|i| from + i)
}

/// Scans one segment. `prev_batch` is the highest batch id of the segments before it;
/// `unreadable` are the byte ranges a read error (EIO) left unknown (filled with non-zero
/// garbage in `bytes`, so they never pass for padding or frames).
pub fn scan_segment(
    bytes: &[u8],
    seal: Seal,
    file: &str,
    prev_batch: u64,
    unreadable: &[std::ops::Range<u64>],
) -> Result<SegmentScan> {
    let mut frames = Vec::new();
    let mut last_batch = prev_batch;
    let mut fences_from = None;
    let mut commits = Vec::new();
    let mut votes = Vec::new();
    let mut purges = Vec::new();
    let mut pos = SEGMENT_HEADER_LEN;
    loop {
        if pos >= bytes.len() {
            let next_write = bytes.len() as u64;
            return Ok(SegmentScan {
                frames,
                end: next_write,
                next_write,
                torn: None,
                max_batch: last_batch,
                fences_from,
                commits,
                votes,
                purges,
            });
        }
        // Zeros up to the next block boundary are a batch's padding (a frame starts with its
        // non-zero magic, so it cannot start there).
        let boundary = pos.next_multiple_of(ALIGN).min(bytes.len());
        if !pos.is_multiple_of(ALIGN) && frame::is_zero(&bytes[pos..boundary]) {
            pos = boundary;
            continue;
        }
        match frame::parse(&bytes[pos..], seal, pos as u64) {
            Parsed::Valid { header, len } => {
                if header.kind == FrameKind::Skip {
                    // Only a fence for the previous segment's torn end may stand here.
                    if pos != SEGMENT_HEADER_LEN || header.term != CROSS_SEGMENT {
                        return Err(corrupt(file, pos, "a skip frame outside a scan gap"));
                    }
                    last_batch = last_batch.max(header.batch);
                    fences_from = Some(header.index);
                    pos += len;
                    continue;
                }
                if header.batch < last_batch {
                    return Err(corrupt(file, pos, "batch ids go backwards"));
                }
                last_batch = header.batch;
                if header.kind == FrameKind::Vote {
                    let payload = &bytes[pos + seal.header_len()..][..header.payload_len as usize];
                    votes.push(ScannedVote {
                        group: header.group,
                        after: header.index,
                        payload: payload.to_vec(),
                    });
                }
                if header.kind == FrameKind::Purge {
                    let payload = &bytes[pos + seal.header_len()..][..header.payload_len as usize];
                    purges.push(ScannedPurge {
                        group: header.group,
                        index: header.index,
                        batch: header.batch,
                        payload: payload.to_vec(),
                    });
                }
                if header.kind == FrameKind::Commit {
                    let payload = &bytes[pos + seal.header_len()..][..header.payload_len as usize];
                    let term = (seal.version >= SEGMENT_VERSION_FLAGS).then_some(header.term);
                    commits.push(ScannedCommit {
                        group: header.group,
                        index: header.index,
                        term,
                        payload: payload.to_vec(),
                    });
                }
                frames.push(ScannedFrame { header, offset: pos as u64, len: len as u32 });
                pos += len;
            }
            Parsed::Zero if !pos.is_multiple_of(ALIGN) => pos = boundary,
            Parsed::Zero | Parsed::Invalid => {
                let end = pos;
                let gap = gap(bytes, end, seal, last_batch, file).map_err(|e| {
                    if unreadable.iter().any(|r| r.end > end as u64) {
                        corrupt(
                            file,
                            end,
                            "blocks that cannot be read (EIO) lie before valid entries",
                        )
                    } else {
                        e
                    }
                })?;
                match gap {
                    Gap::Skip { resume, batch } => {
                        last_batch = last_batch.max(batch);
                        pos = resume;
                    }
                    Gap::End => {
                        return Ok(SegmentScan {
                            frames,
                            end: end as u64,
                            next_write: end as u64,
                            torn: None,
                            max_batch: last_batch,
                            fences_from,
                            commits,
                            votes,
                            purges,
                        });
                    }
                    Gap::Torn { dropped, max_batch } => {
                        // Damage, unless it is the log's last write (the caller decides).
                        let to =
                            last_nonzero(bytes, end).map_or(end, |i| i + 1).next_multiple_of(ALIGN);
                        let unreadable_bytes = unreadable
                            .iter()
                            .map(|r| r.end.min(to as u64).saturating_sub(r.start.max(end as u64)))
                            .sum();
                        let torn = Torn {
                            from: end as u64,
                            to: to as u64,
                            dropped_frames: dropped,
                            unreadable_bytes,
                            in_previous_segment: false,
                        };
                        return Ok(SegmentScan {
                            frames,
                            end: end as u64,
                            next_write: to as u64 + ALIGN as u64,
                            torn: Some(torn),
                            max_batch: last_batch.max(max_batch),
                            fences_from,
                            commits,
                            votes,
                            purges,
                        });
                    }
                }
            }
        }
    }
}

enum Gap {
    /// Only zeros follow.
    End,
    /// A skip frame names this gap; resume scanning at `resume`.
    Skip { resume: usize, batch: u64 },
    /// The in-flight write's bytes: `dropped` valid frames, of batch `max_batch`.
    Torn { dropped: usize, max_batch: u64 },
}

/// Classifies what follows the end of the valid frames at `end`.
fn gap(bytes: &[u8], end: usize, seal: Seal, last_batch: u64, file: &str) -> Result<Gap> {
    let mut torn_batch: Option<u64> = None;
    let mut dropped = 0;
    let mut at = end + 8;
    while let Some((pos, header, len)) = next_valid(bytes, at, seal) {
        if header.kind == FrameKind::Skip {
            if header.index != end as u64 || header.term != pos as u64 {
                return Err(corrupt(file, pos, "a skip frame that names another gap"));
            }
            return Ok(Gap::Skip { resume: pos + len, batch: header.batch });
        }
        // Only the one write in flight may have left frames here: the batch that ends at
        // `end`, or the one after it, and a single one of them.
        let ok = header.batch == last_batch || header.batch == last_batch + 1;
        if !ok || torn_batch.is_some_and(|b| b != header.batch) {
            return Err(corrupt(file, pos, "valid entries after a damaged frame"));
        }
        torn_batch = Some(header.batch);
        dropped += 1;
        at = pos + len;
    }
    if torn_batch.is_none() && last_nonzero(bytes, end).is_none() {
        return Ok(Gap::End);
    }
    Ok(Gap::Torn { dropped, max_batch: torn_batch.unwrap_or(last_batch) })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALT: Seal = Seal { salt: 0x5A17, version: 2 };

    fn batch(out: &mut Vec<u8>, batch: u64, first: u64, n: u64) {
        for i in first..first + n {
            let payload = vec![i as u8; 100];
            let h = FrameHeader {
                kind: FrameKind::Entry,
                payload_len: 100,
                index: i,
                term: 1,
                batch,
                group: 0,
            };
            let at = out.len() as u64;
            frame::encode(out, SALT, at, &h, &payload);
        }
        out.resize(out.len().next_multiple_of(ALIGN), 0);
    }

    fn scan(s: &[u8], prev: u64) -> Result<SegmentScan> {
        scan_segment(s, SALT, "s", prev, &[])
    }

    fn segment(batches: &[(u64, u64, u64)]) -> Vec<u8> {
        let mut s = vec![0u8; SEGMENT_HEADER_LEN];
        for &(b, first, n) in batches {
            batch(&mut s, b, first, n);
        }
        s.resize(64 * 1024, 0);
        s
    }

    fn indexes(scan: &SegmentScan) -> Vec<u64> {
        scan.frames.iter().map(|f| f.header.index).collect()
    }

    #[test]
    fn a_clean_segment_scans_to_its_end() {
        let s = segment(&[(1, 1, 3), (2, 4, 2)]);
        let scan = scan(&s, 0).unwrap();
        assert_eq!(indexes(&scan), vec![1, 2, 3, 4, 5]);
        assert_eq!(scan.torn, None);
        assert_eq!(scan.next_write, 3 * 4096);
    }

    #[test]
    fn a_torn_last_write_is_dropped() {
        let mut s = segment(&[(1, 1, 3), (2, 4, 30)]);
        // Tear batch 2: garbage over its second sector.
        for b in &mut s[4096 * 2 + 512..4096 * 2 + 1024] {
            *b = 0xEE;
        }
        let scan = scan(&s, 0).unwrap();
        let torn = scan.torn.expect("torn tail");
        assert!(indexes(&scan).starts_with(&[1, 2, 3, 4]));
        assert!(torn.dropped_frames > 0, "later frames of the torn batch are dropped");
        assert!(torn.to > torn.from);
        assert_eq!(torn.to % 4096, 0);
    }

    #[test]
    fn valid_entries_after_damage_are_corruption() {
        let mut s = segment(&[(1, 1, 3), (2, 4, 3), (3, 7, 3)]);
        s[4096 + 50] ^= 0xFF; // inside batch 1, with batches 2 and 3 intact behind it
        assert!(matches!(scan(&s, 0), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn padding_that_ends_just_before_a_block_boundary_is_padding() {
        // A batch whose frames end 8 bytes short of the block: the frame header "there"
        // would overlap the next batch, and must not be read as a damaged frame.
        let mut s = vec![0u8; SEGMENT_HEADER_LEN];
        let payload = vec![7u8; 4096 - 40 - 8];
        let h = FrameHeader {
            kind: FrameKind::Entry,
            payload_len: payload.len() as u32,
            index: 1,
            term: 1,
            batch: 1,
            group: 0,
        };
        frame::encode(&mut s, SALT, 4096, &h, &payload);
        assert_eq!(s.len(), 8192 - 8);
        s.resize(8192, 0);
        batch(&mut s, 2, 2, 3);
        s.resize(64 * 1024, 0);
        let scan = scan(&s, 0).unwrap();
        assert_eq!(indexes(&scan), vec![1, 2, 3, 4]);
        assert_eq!(scan.torn, None);
    }

    #[test]
    fn torn_tail_of_a_sealed_segment_needs_a_fence_in_the_next() {
        let mut s = segment(&[(1, 1, 3)]);
        s[4096 * 3] = 1;
        let torn = scan(&s, 0).unwrap().torn.expect("torn");
        let mut next = vec![0u8; 64 * 1024];
        assert!(!fenced_from_next(&next, SALT, torn.from));
        let h = FrameHeader {
            kind: FrameKind::Skip,
            payload_len: 0,
            index: torn.from,
            term: CROSS_SEGMENT,
            batch: 5,
            group: 0,
        };
        let mut f = Vec::new();
        frame::encode(&mut f, SALT, 4096, &h, &[]);
        next[SEGMENT_HEADER_LEN..SEGMENT_HEADER_LEN + f.len()].copy_from_slice(&f);
        assert!(fenced_from_next(&next, SALT, torn.from));
        assert!(scan(&next, 1).unwrap().frames.is_empty());
    }

    #[test]
    fn a_skip_frame_bridges_an_abandoned_tail() {
        let mut s = segment(&[(1, 1, 3)]);
        s[8192..8192 + 700].fill(0xAB); // a torn write that an earlier recovery found
        let mut skip = Vec::new();
        let at = 12288;
        let h = FrameHeader {
            kind: FrameKind::Skip,
            payload_len: 0,
            index: 8192,
            term: 12288,
            batch: 3,
            group: 0,
        };
        frame::encode(&mut skip, SALT, at, &h, &[]);
        s[12288..12288 + skip.len()].copy_from_slice(&skip);
        let mut after = vec![0u8; 16384];
        batch(&mut after, 4, 4, 2);
        s[16384..after.len()].copy_from_slice(&after[16384..]);
        let scan = scan(&s, 0).unwrap();
        assert_eq!(indexes(&scan), vec![1, 2, 3, 4, 5]);
        assert_eq!(scan.torn, None);
    }
}
