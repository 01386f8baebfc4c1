//! On-disk framing of the raft log (docs/RAFT-LOG.md, "Frames" and "Segments").
//!
//! A segment file starts with a 4096-byte header; frames follow from byte 4096. Every flush
//! writes one *batch*: frames back to back, starting on a fresh 4096-byte boundary and padded
//! with zeros to the next one, so a flush never rewrites a sector that holds an acknowledged
//! frame. Each frame is checksummed with its segment's [`Seal`]: the segment's random salt
//! (bytes left in a reused block, or frames of another segment, never verify as entries of
//! this one) and, from segment format 2 on, the frame's own offset in the segment (a frame
//! written to the wrong place never verifies there).
//!
//! Decoding never panics on bytes read from the carrier: every length is checked against
//! the buffer before it is used.
//!
//! From segment format 4 on the header carries flags: `FENCE` marks a segment that recovery
//! activated to hold the fence of the previous segment's torn end (and says where that torn
//! end begins), so that a later recovery can tell such a segment from one an ordinary roll
//! activated (docs/RAFT-LOG.md, "Recovery"). A `Commit` frame of format 4 carries the
//! committed id's term in its `term` field; older formats wrote 0 there.
//!
//! From segment format 5 on a segment file may be *recycled* (a purged segment reused under a
//! fresh salt instead of a new zero-filled file), so the bytes past its last write may be an
//! earlier use's frames: they never verify under the new salt, and recovery reads them as
//! space never written. The header records where the previous segment's frames end
//! (`prev_end`), so that a sealed segment's end is known exactly rather than inferred from
//! the zeros after it.
//!
//! From segment format 6 on every frame names the raft *group* it belongs to (a `u64` after
//! the batch id, inside the checksum: a 48-byte header), so one log hosts many groups, each
//! with its own indexes. Frames of formats 1 to 5 belong to group 0. A `Skip` frame belongs
//! to the log, not to a group, and carries group 0.
//!
//! From segment format 7 on a frame may be a `Rewrite`: a copy of a live entry of its group,
//! written later in the log so that the segment holding the original can be freed while the
//! group still needs the entry (a laggard group's few live entries carried forward). It never
//! truncates: recovery moves the entry to the copy, and the copy's term must match.
//!
//! From segment format 8 on a frame may be a `Vote`: a group's vote (the caller's opaque
//! bytes), so that the votes of many groups share one durable write with everything else
//! instead of a meta file write each. Its `index` field is the sequence number of the
//! group's newest meta save queued before it: a meta slot of that sequence or lower is older
//! than the vote, a higher one holds it (or a newer one). A `Truncate` from index 0 with
//! `term` 1 (format 8 on) is a group's *drop*: its earlier `Vote` frames are void too.
//!
//! From segment format 9 on a frame may be a `Purge`: a group's purge point (`index`, the
//! caller's encoding of the purged id as payload), so that the purges of many groups share
//! one durable write instead of a meta file write each. It purges the group's entries at or
//! below `index` written in its own batch or before; a drop voids it like a vote.

use crate::error::{Error, Result};

pub const SEGMENT_HEADER_LEN: usize = 4096;
pub const ALIGN: usize = 4096;
/// Bytes of a frame header in segment formats 1 to 5.
pub const FRAME_HEADER_LEN: usize = 40;
/// Bytes of a frame header from segment format 6 on (the group id added).
pub const FRAME_HEADER_LEN_GROUPS: usize = 48;
pub const FRAME_MAGIC: [u8; 4] = *b"VLFR";
/// Magic of a segment header without its two version digits.
pub const SEGMENT_MAGIC_PREFIX: [u8; 6] = *b"VLMSEG";
/// The segment format new segments are written in.
pub const SEGMENT_VERSION: u8 = 9;
/// The first segment format whose header has flags and whose `Commit` frames carry a term.
pub const SEGMENT_VERSION_FLAGS: u8 = 4;
/// The first segment format whose file may be recycled (bytes past its last write may be an
/// earlier use's) and whose header records where the previous segment's frames end.
pub const SEGMENT_VERSION_RECYCLED: u8 = 5;
/// The first segment format whose frames carry a group id.
pub const SEGMENT_VERSION_GROUPS: u8 = 6;
/// The first segment format whose frames may be `Rewrite` copies of live entries.
pub const SEGMENT_VERSION_REWRITE: u8 = 7;
/// The first segment format whose frames may be `Vote`s, and whose `Truncate` frames mark a
/// group's drop (`term` [`DROP_TERM`]).
pub const SEGMENT_VERSION_VOTES: u8 = 8;
/// The first segment format whose frames may be `Purge`s.
pub const SEGMENT_VERSION_PURGES: u8 = 9;
/// The `term` of a `Truncate` frame that drops its group (format 8 on; 0 otherwise).
pub const DROP_TERM: u64 = 1;
/// The oldest segment format this build reads.
pub const SEGMENT_VERSION_MIN: u8 = 1;

/// What a segment's frames are checksummed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seal {
    pub salt: u64,
    /// The segment format: 1 (salt only), 2 (salt and the frame's offset), 3 (as 2, and
    /// `Commit` frames may appear), 4 (as 3; header flags, and `Commit` frames carry the
    /// committed id's term), 5 (as 4; the file may be recycled, the header records the
    /// previous segment's end), 6 (as 5; every frame carries a group id), 7 (as 6; `Rewrite`
    /// frames may appear), 8 (as 7; `Vote` frames may appear, a `Truncate` may be a drop),
    /// 9 (as 8; `Purge` frames may appear).
    pub version: u8,
}

impl Seal {
    /// Bytes of a frame header in this segment's format.
    pub fn header_len(self) -> usize {
        if self.version >= SEGMENT_VERSION_GROUPS {
            FRAME_HEADER_LEN_GROUPS
        } else {
            FRAME_HEADER_LEN
        }
    }

    /// Bytes a frame with `payload_len` bytes of payload takes in this segment: header,
    /// payload, zero padding to 8.
    pub fn frame_len(self, payload_len: usize) -> usize {
        self.header_len() + payload_len.next_multiple_of(8)
    }
}

// Frame header fields, each derived from the one before.
const KIND_AT: usize = FRAME_MAGIC.len();
const FLAGS_AT: usize = KIND_AT + 1;
const PAYLOAD_LEN_AT: usize = FLAGS_AT + 3;
const CRC_AT: usize = PAYLOAD_LEN_AT + 4;
const INDEX_AT: usize = CRC_AT + 4;
const TERM_AT: usize = INDEX_AT + 8;
const BATCH_AT: usize = TERM_AT + 8;
/// Format 6 on.
const GROUP_AT: usize = BATCH_AT + 8;
const _: () = assert!(GROUP_AT == FRAME_HEADER_LEN && GROUP_AT + 8 == FRAME_HEADER_LEN_GROUPS);

/// What a frame records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A log entry: `index`, `term`, payload.
    Entry = 1,
    /// Everything from `index` on is truncated (a durable tombstone).
    Truncate = 2,
    /// Recovery abandoned the bytes from `index` (a segment offset) up to this frame, which
    /// sits at offset `term`: a torn tail is declared dead instead of rewritten.
    Skip = 3,
    /// The committed log id is at least `index`; the payload is the caller's encoding of it
    /// (format 3 on), `term` its term (format 4 on; 0 in format 3). Written as the last frame
    /// of a batch that goes out anyway, so saving the committed id costs no write of its own.
    Commit = 4,
    /// A copy of the group's live entry `index` of term `term`, payload its bytes (format 7
    /// on): the entry now lives here, and the segment that held it no longer pins it.
    Rewrite = 5,
    /// The group's vote, payload its bytes (format 8 on); `index` the sequence number of the
    /// group's newest meta save queued before it, `term` 0.
    Vote = 6,
    /// The group's entries at or below `index` written up to this frame's batch are purged
    /// (format 9 on); payload the caller's encoding of the purged id, `term` 0.
    Purge = 7,
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameKind,
    pub payload_len: u32,
    pub index: u64,
    pub term: u64,
    /// The flush that wrote the frame (strictly increasing over the log).
    pub batch: u64,
    /// The raft group the frame belongs to (format 6 on; 0 before, and for `Skip`).
    pub group: u64,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn frame_crc(seal: Seal, offset: u64, header: &[u8], payload: &[u8]) -> u32 {
    let mut c = crc32c::crc32c(&seal.salt.to_le_bytes());
    if seal.version >= 2 {
        c = crc32c::crc32c_append(c, &offset.to_le_bytes());
    }
    c = crc32c::crc32c_append(c, &header[..CRC_AT]);
    c = crc32c::crc32c_append(c, &header[INDEX_AT..seal.header_len()]);
    crc32c::crc32c_append(c, payload)
}

/// Appends one frame that will sit at segment offset `offset` to `out`.
#[cfg(any(test, feature = "internals"))]
pub fn encode(out: &mut Vec<u8>, seal: Seal, offset: u64, h: &FrameHeader, payload: &[u8]) {
    let start = out.len();
    out.resize(start + seal.frame_len(payload.len()), 0);
    encode_into(&mut out[start..], seal, offset, h, payload);
}

/// Encodes one frame that will sit at segment offset `offset` into `out`, exactly
/// `seal.frame_len(payload.len())` bytes (padding included).
pub fn encode_into(out: &mut [u8], seal: Seal, offset: u64, h: &FrameHeader, payload: &[u8]) {
    assert_eq!(h.payload_len as usize, payload.len());
    assert_eq!(out.len(), seal.frame_len(payload.len()), "a frame fills its slot exactly");
    assert!(offset.is_multiple_of(8), "frames start on 8-byte boundaries");
    // A frame of another group in a segment without group ids would be read as group 0's.
    assert!(
        h.group == 0 || seal.version >= SEGMENT_VERSION_GROUPS,
        "segment format {} has no group ids",
        seal.version
    );
    assert!(
        h.kind != FrameKind::Rewrite || seal.version >= SEGMENT_VERSION_REWRITE,
        "segment format {} has no rewrite frames",
        seal.version
    );
    assert!(
        h.kind != FrameKind::Vote || seal.version >= SEGMENT_VERSION_VOTES,
        "segment format {} has no vote frames",
        seal.version
    );
    assert!(
        h.kind != FrameKind::Purge || seal.version >= SEGMENT_VERSION_PURGES,
        "segment format {} has no purge frames",
        seal.version
    );
    let header_len = seal.header_len();
    out[..KIND_AT].copy_from_slice(&FRAME_MAGIC);
    out[KIND_AT] = h.kind as u8;
    out[FLAGS_AT..PAYLOAD_LEN_AT].fill(0);
    out[PAYLOAD_LEN_AT..CRC_AT].copy_from_slice(&h.payload_len.to_le_bytes());
    out[CRC_AT..INDEX_AT].fill(0); // checksum, below
    out[INDEX_AT..TERM_AT].copy_from_slice(&h.index.to_le_bytes());
    out[TERM_AT..BATCH_AT].copy_from_slice(&h.term.to_le_bytes());
    out[BATCH_AT..GROUP_AT].copy_from_slice(&h.batch.to_le_bytes());
    if header_len == FRAME_HEADER_LEN_GROUPS {
        out[GROUP_AT..header_len].copy_from_slice(&h.group.to_le_bytes());
    }
    let (header, rest) = out.split_at_mut(header_len);
    rest[..payload.len()].copy_from_slice(payload);
    rest[payload.len()..].fill(0);
    let crc = frame_crc(seal, offset, header, payload);
    header[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// What lies at a position of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A frame that verifies; `len` is its full length with padding.
    Valid { header: FrameHeader, len: usize },
    /// An all-zero frame header: padding, or space never written.
    Zero,
    /// Anything else: torn, stale, foreign or damaged bytes.
    Invalid,
}

/// Whether every byte of `bytes` is zero. Tested 64 bytes at a time, which the compiler
/// turns into vector ORs: recovery runs this over the unwritten rest of the last segment
/// (up to a whole segment of zeros), where a test byte by byte took about 30 ms per 64 MiB.
pub fn is_zero(bytes: &[u8]) -> bool {
    let (chunks, rest) = bytes.as_chunks::<64>();
    chunks.iter().all(|c| c.iter().fold(0, |acc, &b| acc | b) == 0) && rest.iter().all(|&b| b == 0)
}

/// The offset of the last non-zero byte of `bytes`, tested from the end 64 bytes at a time
/// (see [`is_zero`]).
pub fn last_nonzero(bytes: &[u8]) -> Option<usize> {
    let (head, chunks) = bytes.as_rchunks::<64>();
    match chunks.iter().rposition(|c| c.iter().fold(0, |acc, &b| acc | b) != 0) {
        Some(i) => {
            let at = head.len() + i * 64;
            chunks[i].iter().rposition(|&b| b != 0).map(|j| at + j)
        }
        None => head.iter().rposition(|&b| b != 0),
    }
}

/// Parses the frame at the start of `buf` (the rest of the segment from there), which lies
/// at segment offset `offset`.
pub fn parse(buf: &[u8], seal: Seal, offset: u64) -> Parsed {
    let header_len = seal.header_len();
    if buf.len() < header_len {
        return if is_zero(buf) { Parsed::Zero } else { Parsed::Invalid };
    }
    let h = &buf[..header_len];
    if is_zero(h) {
        return Parsed::Zero;
    }
    if h[..4] != FRAME_MAGIC || h[FLAGS_AT..PAYLOAD_LEN_AT] != [0, 0, 0] {
        return Parsed::Invalid;
    }
    let kind = match h[KIND_AT] {
        1 => FrameKind::Entry,
        2 => FrameKind::Truncate,
        3 => FrameKind::Skip,
        4 if seal.version >= 3 => FrameKind::Commit,
        5 if seal.version >= SEGMENT_VERSION_REWRITE => FrameKind::Rewrite,
        6 if seal.version >= SEGMENT_VERSION_VOTES => FrameKind::Vote,
        7 if seal.version >= SEGMENT_VERSION_PURGES => FrameKind::Purge,
        _ => return Parsed::Invalid,
    };
    let payload_len = u32_at(h, PAYLOAD_LEN_AT);
    let len = seal.frame_len(payload_len as usize);
    if len > buf.len() {
        return Parsed::Invalid;
    }
    let payload = &buf[header_len..header_len + payload_len as usize];
    if frame_crc(seal, offset, h, payload) != u32_at(h, CRC_AT) {
        return Parsed::Invalid;
    }
    if !is_zero(&buf[header_len + payload_len as usize..len]) {
        return Parsed::Invalid;
    }
    let group = if header_len == FRAME_HEADER_LEN_GROUPS { u64_at(h, GROUP_AT) } else { 0 };
    if kind == FrameKind::Skip && group != 0 {
        // A fence belongs to the log; the checksum held, so this is no torn write.
        return Parsed::Invalid;
    }
    let header = FrameHeader {
        kind,
        payload_len,
        index: u64_at(h, INDEX_AT),
        term: u64_at(h, TERM_AT),
        batch: u64_at(h, BATCH_AT),
        group,
    };
    Parsed::Valid { header, len }
}

/// Segment header flag (format 4 on): recovery activated this segment to hold the fence of
/// the previous segment's torn end, which begins at `fence_from`. An ordinary roll never sets
/// it, so a sealed segment that ends torn before a frame-less segment without it is damage.
pub const SEGMENT_FENCE: u32 = 1 << 0;
const KNOWN_SEGMENT_FLAGS: u32 = SEGMENT_FENCE;

/// The header of an active segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment format (`SEGMENT_VERSION_MIN..=SEGMENT_VERSION`).
    pub version: u8,
    /// Order of the segment in the log (strictly increasing, consecutive).
    pub seq: u64,
    pub salt: u64,
    /// Index of the first entry the segment was opened for (informational).
    pub first_index: u64,
    /// With [`SEGMENT_FENCE`] (format 4 on): the offset in the previous segment where the
    /// torn end this segment was activated to fence begins. `None`: an ordinary roll.
    pub fence_from: Option<u64>,
    /// Format 5 on: the offset in the previous segment where its frames end (the write
    /// position it was sealed at; with [`SEGMENT_FENCE`], where its torn end begins, the same
    /// as `fence_from`). 0: no previous segment, or a format before 5 (unknown).
    pub prev_end: u64,
}

const SEQ_AT: usize = 8;
const SALT_AT: usize = SEQ_AT + 8;
const FIRST_INDEX_AT: usize = SALT_AT + 8;
/// Formats 1 to 3: reserved (zero) from here to the checksum.
const RESERVED_AT: usize = FIRST_INDEX_AT + 8;
/// Format 4 on: flags (u32), 4 zero bytes, the fence's offset (u64; format 5: the previous
/// segment's end, which is the fence's offset with the flag), then reserved.
const FLAGS_AT_V4: usize = RESERVED_AT;
const FENCE_FROM_AT: usize = FLAGS_AT_V4 + 8;
const RESERVED_AT_V4: usize = FENCE_FROM_AT + 8;
const HEADER_CRC_AT: usize = SEGMENT_HEADER_LEN - 4;
const _: () = assert!(FLAGS_AT_V4 == 32 && FENCE_FROM_AT == 40 && RESERVED_AT_V4 == 48);
const _: () = assert!(RESERVED_AT_V4 < HEADER_CRC_AT);

impl SegmentHeader {
    /// The seal of this segment's frames.
    pub fn seal(&self) -> Seal {
        Seal { salt: self.salt, version: self.version }
    }

    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        assert!(
            (SEGMENT_VERSION_MIN..=SEGMENT_VERSION).contains(&self.version),
            "segment format {} is not one this build writes",
            self.version
        );
        assert!(
            self.fence_from.is_none() || self.version >= SEGMENT_VERSION_FLAGS,
            "segment format {} has no flags",
            self.version
        );
        assert!(
            self.prev_end == 0 || self.version >= SEGMENT_VERSION_RECYCLED,
            "segment format {} records no previous end",
            self.version
        );
        assert!(
            self.version < SEGMENT_VERSION_RECYCLED
                || self.fence_from.is_none_or(|from| from == self.prev_end),
            "a fence's offset is the previous segment's end"
        );
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[..6].copy_from_slice(&SEGMENT_MAGIC_PREFIX);
        b[6] = b'0' + self.version / 10;
        b[7] = b'0' + self.version % 10;
        b[SEQ_AT..SALT_AT].copy_from_slice(&self.seq.to_le_bytes());
        b[SALT_AT..FIRST_INDEX_AT].copy_from_slice(&self.salt.to_le_bytes());
        b[FIRST_INDEX_AT..RESERVED_AT].copy_from_slice(&self.first_index.to_le_bytes());
        if let Some(from) = self.fence_from {
            b[FLAGS_AT_V4..FLAGS_AT_V4 + 4].copy_from_slice(&SEGMENT_FENCE.to_le_bytes());
            b[FENCE_FROM_AT..RESERVED_AT_V4].copy_from_slice(&from.to_le_bytes());
        }
        if self.version >= SEGMENT_VERSION_RECYCLED {
            b[FENCE_FROM_AT..RESERVED_AT_V4].copy_from_slice(&self.prev_end.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..HEADER_CRC_AT]);
        b[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `Ok(None)` for an all-zero header (a spare segment, never activated).
    pub fn decode(b: &[u8], file: &str) -> Result<Option<SegmentHeader>> {
        let corrupt = |offset: u64, reason| Error::Corrupt { file: file.into(), offset, reason };
        if b.len() < SEGMENT_HEADER_LEN {
            return Err(corrupt(0, "short segment header"));
        }
        let b = &b[..SEGMENT_HEADER_LEN];
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let crc = u32_at(b, HEADER_CRC_AT);
        if b[..6] != SEGMENT_MAGIC_PREFIX || crc32c::crc32c(&b[..HEADER_CRC_AT]) != crc {
            return Err(corrupt(0, "bad segment header"));
        }
        let version = match (b[6], b[7]) {
            (d1 @ b'0'..=b'9', d2 @ b'0'..=b'9') => (d1 - b'0') * 10 + (d2 - b'0'),
            _ => return Err(corrupt(6, "bad segment header")),
        };
        if !(SEGMENT_VERSION_MIN..=SEGMENT_VERSION).contains(&version) {
            return Err(Error::Unsupported {
                file: file.into(),
                what: "a raft log segment format newer than this build reads",
                found: u64::from(version),
            });
        }
        let mut fence_from = None;
        let mut prev_end = 0;
        let mut reserved_at = RESERVED_AT;
        if version >= SEGMENT_VERSION_FLAGS {
            let flags = u32_at(b, FLAGS_AT_V4);
            if flags & !KNOWN_SEGMENT_FLAGS != 0 {
                return Err(Error::Unsupported {
                    file: file.into(),
                    what: "a raft log segment header flag this build does not know",
                    found: u64::from(flags),
                });
            }
            let from = u64_at(b, FENCE_FROM_AT);
            if flags & SEGMENT_FENCE != 0 {
                fence_from = Some(from);
            } else if from != 0 && version < SEGMENT_VERSION_RECYCLED {
                return Err(corrupt(FENCE_FROM_AT as u64, "a fence offset without the flag"));
            }
            if version >= SEGMENT_VERSION_RECYCLED {
                prev_end = from;
            }
            if u32_at(b, FLAGS_AT_V4 + 4) != 0 {
                return Err(corrupt(
                    (FLAGS_AT_V4 + 4) as u64,
                    "non-zero reserved bytes in segment header",
                ));
            }
            reserved_at = RESERVED_AT_V4;
        }
        if b[reserved_at..HEADER_CRC_AT].iter().any(|&x| x != 0) {
            return Err(corrupt(reserved_at as u64, "non-zero reserved bytes in segment header"));
        }
        Ok(Some(SegmentHeader {
            version,
            seq: u64_at(b, SEQ_AT),
            salt: u64_at(b, SALT_AT),
            first_index: u64_at(b, FIRST_INDEX_AT),
            fence_from,
            prev_end,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V2: Seal = Seal { salt: 77, version: 2 };

    fn frame(kind: FrameKind, index: u64, payload: &[u8]) -> FrameHeader {
        FrameHeader { kind, payload_len: payload.len() as u32, index, term: 3, batch: 9, group: 0 }
    }

    /// The 64-byte-wide zero tests answer as a test byte by byte does, for every length
    /// up to a few chunks and a non-zero byte (or two) at every place.
    #[test]
    fn zero_tests_agree_with_a_byte_by_byte_test() {
        for len in 0..=300 {
            let zeros = vec![0u8; len];
            assert!(is_zero(&zeros));
            assert_eq!(last_nonzero(&zeros), None);
            for at in 0..len {
                for also in [None, Some(at / 2), Some(len - 1)] {
                    let mut bytes = zeros.clone();
                    bytes[at] = 0x80;
                    if let Some(b) = also {
                        bytes[b] = 1;
                    }
                    assert!(!is_zero(&bytes), "len {len}, byte {at}");
                    let naive = bytes.iter().rposition(|&b| b != 0);
                    assert_eq!(last_nonzero(&bytes), naive, "len {len}, byte {at}");
                }
            }
        }
    }

    #[test]
    fn frames_round_trip_and_bind_to_their_salt_and_place() {
        let mut buf = Vec::new();
        let h = frame(FrameKind::Entry, 42, b"payload!!");
        encode(&mut buf, V2, 4096, &h, b"payload!!");
        assert_eq!(buf.len(), V2.frame_len(9));
        assert_eq!(parse(&buf, V2, 4096), Parsed::Valid { header: h, len: buf.len() });
        assert_eq!(parse(&buf, Seal { salt: 78, ..V2 }, 4096), Parsed::Invalid, "another salt");
        assert_eq!(parse(&buf, V2, 8192), Parsed::Invalid, "a frame written to the wrong place");
        let mut torn = buf.clone();
        torn[45] ^= 1;
        assert_eq!(parse(&torn, V2, 4096), Parsed::Invalid);
        assert_eq!(parse(&[0u8; 64], V2, 4096), Parsed::Zero);
        assert_eq!(parse(&buf[..20], V2, 4096), Parsed::Invalid);
    }

    #[test]
    fn format_1_frames_do_not_bind_their_offset() {
        let v1 = Seal { salt: 77, version: 1 };
        let mut buf = Vec::new();
        let h = frame(FrameKind::Entry, 42, b"old");
        encode(&mut buf, v1, 4096, &h, b"old");
        assert!(matches!(parse(&buf, v1, 12_288), Parsed::Valid { .. }));
        assert_eq!(parse(&buf, V2, 4096), Parsed::Invalid, "the formats do not mix");
    }

    #[test]
    fn commit_frames_exist_from_format_3_on() {
        for (version, valid) in [(2, false), (3, true)] {
            let seal = Seal { salt: 77, version };
            let mut buf = Vec::new();
            let h = frame(FrameKind::Commit, 42, b"log id");
            encode(&mut buf, seal, 4096, &h, b"log id");
            let parsed = parse(&buf, seal, 4096);
            assert_eq!(parsed == (Parsed::Valid { header: h, len: buf.len() }), valid);
            assert_eq!(parsed == Parsed::Invalid, !valid, "format {version}");
        }
    }

    #[test]
    fn format_6_frames_carry_their_group_inside_the_checksum() {
        let v6 = Seal { salt: 77, version: 6 };
        let mut buf = Vec::new();
        let h = FrameHeader { group: 0xFEED_0001, ..frame(FrameKind::Entry, 42, b"payload!!") };
        encode(&mut buf, v6, 4096, &h, b"payload!!");
        assert_eq!(buf.len(), 48 + 16);
        assert_eq!(u64_at(&buf, 40), 0xFEED_0001);
        assert_eq!(parse(&buf, v6, 4096), Parsed::Valid { header: h, len: buf.len() });
        // Another group's id in the same bytes does not verify.
        let mut other = buf.clone();
        other[40] ^= 1;
        assert_eq!(parse(&other, v6, 4096), Parsed::Invalid);
        // Format 5 reads a 40-byte header: the formats do not mix.
        assert_eq!(parse(&buf, Seal { version: 5, ..v6 }, 4096), Parsed::Invalid);
        // A fence belongs to the log: a `Skip` frame of a group refuses even when it verifies.
        let mut skip = Vec::new();
        let s = FrameHeader { group: 3, ..frame(FrameKind::Skip, 4096, &[]) };
        encode(&mut skip, v6, 4096, &s, &[]);
        assert_eq!(parse(&skip, v6, 4096), Parsed::Invalid);
    }

    #[test]
    fn rewrite_vote_and_purge_frames_exist_from_their_formats_on() {
        for (kind, first) in [(FrameKind::Rewrite, 7), (FrameKind::Vote, 8), (FrameKind::Purge, 9)]
        {
            // The format before never wrote this kind: a frame of it there is damage, never
            // a rewrite or a vote, even with a checksum that holds.
            let before = Seal { salt: 77, version: first - 1 };
            let mut buf = Vec::new();
            let entry = FrameHeader { group: 2, ..frame(FrameKind::Entry, 9, b"e") };
            encode(&mut buf, before, 4096, &entry, b"e");
            buf[KIND_AT] = kind as u8;
            let crc = frame_crc(before, 4096, &buf[..48], b"e");
            buf[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(parse(&buf, before, 4096), Parsed::Invalid, "{kind:?}");
            let from = Seal { salt: 77, version: first };
            let mut buf = Vec::new();
            let h = FrameHeader { group: 2, term: 0, ..frame(kind, 41, b"payload") };
            encode(&mut buf, from, 4096, &h, b"payload");
            assert_eq!(buf[KIND_AT], kind as u8);
            assert_eq!(parse(&buf, from, 4096), Parsed::Valid { header: h, len: buf.len() });
        }
        assert_eq!((FrameKind::Rewrite as u8, FrameKind::Vote as u8), (5, 6));
        assert_eq!(FrameKind::Purge as u8, 7);
    }

    #[test]
    #[should_panic(expected = "has no purge frames")]
    fn a_purge_frame_is_never_encoded_into_an_older_format() {
        let mut buf = Vec::new();
        let h = FrameHeader { group: 1, ..frame(FrameKind::Purge, 1, b"x") };
        encode(&mut buf, Seal { salt: 77, version: 8 }, 4096, &h, b"x");
    }

    #[test]
    #[should_panic(expected = "has no vote frames")]
    fn a_vote_frame_is_never_encoded_into_an_older_format() {
        let mut buf = Vec::new();
        let h = FrameHeader { group: 1, ..frame(FrameKind::Vote, 1, b"x") };
        encode(&mut buf, Seal { salt: 77, version: 7 }, 4096, &h, b"x");
    }

    #[test]
    #[should_panic(expected = "has no rewrite frames")]
    fn a_rewrite_frame_is_never_encoded_into_an_older_format() {
        let mut buf = Vec::new();
        let h = FrameHeader { group: 1, ..frame(FrameKind::Rewrite, 1, b"x") };
        encode(&mut buf, Seal { salt: 77, version: 6 }, 4096, &h, b"x");
    }

    #[test]
    #[should_panic(expected = "has no group ids")]
    fn a_group_frame_is_never_encoded_into_an_older_format() {
        let mut buf = Vec::new();
        let h = FrameHeader { group: 1, ..frame(FrameKind::Entry, 1, b"x") };
        encode(&mut buf, Seal { salt: 77, version: 5 }, 4096, &h, b"x");
    }

    fn resealed(mut b: [u8; SEGMENT_HEADER_LEN]) -> [u8; SEGMENT_HEADER_LEN] {
        let crc = crc32c::crc32c(&b[..HEADER_CRC_AT]);
        b[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn segment_headers_round_trip_and_refuse_unknown_formats() {
        for version in [1, 2, 3, 4, 5, 6] {
            let h = SegmentHeader {
                version,
                seq: 5,
                salt: 0xABCD,
                first_index: 1000,
                fence_from: None,
                prev_end: 0,
            };
            assert_eq!(SegmentHeader::decode(&h.encode(), "s").unwrap(), Some(h));
        }
        // Format 5: the previous segment's end, with or without the fence flag.
        for fence_from in [None, Some(61_440)] {
            let h = SegmentHeader {
                version: 5,
                seq: 7,
                salt: 0xABCD,
                first_index: 1000,
                fence_from,
                prev_end: 61_440,
            };
            let b = h.encode();
            assert_eq!(&b[..8], b"VLMSEG05");
            assert_eq!(u64_at(&b, 40), 61_440);
            assert_eq!(SegmentHeader::decode(&b, "s").unwrap(), Some(h));
        }
        let fenced = SegmentHeader {
            version: 4,
            seq: 6,
            salt: 0xABCD,
            first_index: 1000,
            fence_from: Some(61_440),
            prev_end: 0,
        };
        let b = fenced.encode();
        assert_eq!(&b[..8], b"VLMSEG04");
        assert_eq!(u32_at(&b, 32), SEGMENT_FENCE);
        assert_eq!(u64_at(&b, 40), 61_440);
        assert_eq!(SegmentHeader::decode(&b, "s").unwrap(), Some(fenced));
        // The flag without its offset's meaning, an unknown flag, and the flag in a format
        // that has none.
        let mut unknown = fenced.encode();
        unknown[32] = 0b10;
        assert!(matches!(
            SegmentHeader::decode(&resealed(unknown), "s"),
            Err(Error::Unsupported { .. })
        ));
        let mut stray = fenced.encode();
        stray[32] = 0;
        assert!(matches!(SegmentHeader::decode(&resealed(stray), "s"), Err(Error::Corrupt { .. })));
        let mut old = fenced.encode();
        old[7] = b'3';
        assert!(matches!(SegmentHeader::decode(&resealed(old), "s"), Err(Error::Corrupt { .. })));
        let h = SegmentHeader {
            version: 3,
            seq: 5,
            salt: 0xABCD,
            first_index: 1000,
            fence_from: None,
            prev_end: 0,
        };
        assert_eq!(&h.encode()[..8], b"VLMSEG03");
        assert_eq!(SegmentHeader::decode(&[0u8; 4096], "s").unwrap(), None);
        let mut bad = h.encode();
        bad[9] ^= 1;
        assert!(matches!(SegmentHeader::decode(&bad, "s"), Err(Error::Corrupt { .. })));
        let mut newer = h.encode();
        newer[6..8].copy_from_slice(b"10");
        assert!(matches!(
            SegmentHeader::decode(&resealed(newer), "s"),
            Err(Error::Unsupported { .. })
        ));
        for version in [3, 4, 5] {
            let h = SegmentHeader { version, ..h };
            let mut reserved = h.encode();
            reserved[100] = 1;
            assert!(matches!(
                SegmentHeader::decode(&resealed(reserved), "s"),
                Err(Error::Corrupt { .. })
            ));
        }
    }
}
