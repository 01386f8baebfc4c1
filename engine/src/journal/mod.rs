//! The metadata journal: a physical ring of blocks in the journal region (FORMAT.md,
//! "Journal").
//!
//! A journaled commit writes the records queued since the last commit as one **batch**: one
//! sequence number, one or more ring blocks, written with one durable write (or one write and
//! its barrier) after the data they reference reached the carrier (ordered mode). The batch
//! is the commit point; the copy-on-write image and the superblock flips move to the
//! **checkpoint**, which records in the superblock where the first batch it does not contain
//! starts (`tail`) and which sequence it carries.
//!
//! Invariants:
//! - **One batch in flight (K = 1).** Batch `n + 1` is written only after batch `n` is
//!   durable (the metadata mutex serializes commits). So a damaged batch followed by an
//!   intact later one was acknowledged before the damage: open refuses (`JournalGap`) instead
//!   of replaying a prefix that silently drops acknowledged commits. A damaged batch with
//!   nothing intact after it is the torn tail of a power cut: replay stops there.
//! - **Nothing after the tail is overwritten before a checkpoint moves the tail.** Batches go
//!   to the ring in order from the tail; a batch that does not fit in the space left makes
//!   the commit a checkpoint instead, and the ring is reused only once the checkpoint's
//!   superblock is durable.
//! - **Sequences only grow.** A checkpoint stores the next sequence, so every stale block of
//!   an earlier lap carries a lower one and can never be taken for a batch after the tail.
//! - **Self-locating blocks.** A block's checksum is seeded with its address and the volume
//!   UUID: a block written elsewhere, or left by another volume, never verifies here.
//! - **Every block verifies, except the batch in flight.** Enabling the journal fills the ring
//!   with *filler* blocks (sequence 0), and batches only replace blocks with blocks; a batch
//!   never takes the whole ring. So a ring where no block verifies was destroyed (not torn,
//!   not new), and open says so.
//!
//! Replay (`scan` here, the operations in `Namespace::apply`) reads the ring and writes
//! nothing.

pub mod record;

pub use record::Op;

use crate::carrier::AlignedBuf;
use crate::error::{Corruption, Error, Region, Result, Unsupported};
use crate::format::checksum;
use crate::format::consts::Uuid;
use crate::io::{Area, AreaRead, Io};
use crate::layout::Layout;
use crate::superblock::{JOURNAL_LOSS, Superblock};

/// `VLMJRNL\0`: the first 8 bytes of every journal block.
pub const MAGIC: [u8; 8] = *b"VLMJRNL\0";

// Header fields (FORMAT.md, "Journal blocks").
pub const SEQUENCE_AT: usize = 8;
pub const INDEX_AT: usize = 16;
pub const COUNT_AT: usize = 20;
pub const USED_AT: usize = 24;
pub const CHECKSUM_AT: usize = 28;
/// Bytes of a journal block's header; the payload follows.
pub const HEADER_LEN: usize = 32;

/// Most ring blocks read in one carrier call at open.
const SCAN_CHUNK_BLOCKS: u64 = 1024;

/// Payload bytes one block of `block_size` carries.
pub fn payload_per_block(block_size: u32) -> usize {
    block_size as usize - HEADER_LEN
}

/// Blocks a batch payload of `len` bytes takes.
pub fn blocks_for(len: usize, block_size: u32) -> u64 {
    len.div_ceil(payload_per_block(block_size)).max(1) as u64
}

/// Seals block `index` of `count` of batch `sequence` into `out` (one block), for `address`.
pub fn seal_block(
    out: &mut [u8],
    address: u64,
    uuid: &Uuid,
    sequence: u64,
    (index, count): (u32, u32),
    payload: &[u8],
) {
    assert!(payload.len() <= out.len() - HEADER_LEN, "journal payload overflows its block");
    out.fill(0);
    out[..8].copy_from_slice(&MAGIC);
    out[SEQUENCE_AT..INDEX_AT].copy_from_slice(&sequence.to_le_bytes());
    out[INDEX_AT..COUNT_AT].copy_from_slice(&index.to_le_bytes());
    out[COUNT_AT..USED_AT].copy_from_slice(&count.to_le_bytes());
    let used = u32::try_from(payload.len()).expect("a block's payload fits u32");
    out[USED_AT..CHECKSUM_AT].copy_from_slice(&used.to_le_bytes());
    out[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
    let crc = checksum::journal(address, uuid, &out[..CHECKSUM_AT], &out[HEADER_LEN..]);
    out[CHECKSUM_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// A journal block that verified at its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockView<'a> {
    pub sequence: u64,
    pub index: u32,
    pub count: u32,
    pub payload: &'a [u8],
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Decodes one block read at `address`. `Ok(None)`: not a journal block of this volume at
/// this address (bad magic or checksum: never written, torn, stale from elsewhere). `Err`:
/// the block verifies but breaks a rule, which only a newer or broken writer produces.
pub fn open_block<'a>(bytes: &'a [u8], address: u64, uuid: &Uuid) -> Result<Option<BlockView<'a>>> {
    if bytes.len() <= HEADER_LEN || bytes[..8] != MAGIC {
        return Ok(None);
    }
    let stored = le_u32(bytes, CHECKSUM_AT);
    if stored != checksum::journal(address, uuid, &bytes[..CHECKSUM_AT], &bytes[HEADER_LEN..]) {
        return Ok(None);
    }
    let offset = address.saturating_mul(bytes.len() as u64);
    let bad = |field: &'static str, value: u64| {
        Err(Error::corrupt(Region::Journal, offset, Corruption::BadValue { field, value }))
    };
    let (sequence, index, count) =
        (le_u64(bytes, SEQUENCE_AT), le_u32(bytes, INDEX_AT), le_u32(bytes, COUNT_AT));
    let used = le_u32(bytes, USED_AT) as usize;
    if sequence == 0 && (index, count, used) != (0, 1, 0) {
        return bad("journal filler", u64::from(count));
    }
    if count == 0 || index >= count {
        return bad("journal block index", u64::from(index));
    }
    if used > bytes.len() - HEADER_LEN {
        return bad("journal block used", used as u64);
    }
    if bytes[HEADER_LEN + used..].iter().any(|&b| b != 0) {
        return Err(Error::Unsupported(Unsupported::ReservedNonZero {
            field: "journal block padding",
        }));
    }
    Ok(Some(BlockView { sequence, index, count, payload: &bytes[HEADER_LEN..HEADER_LEN + used] }))
}

/// The journal's live state (under the metadata mutex).
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    /// Ring blocks.
    pub(crate) len: u64,
    /// Ring block of the checkpoint's tail (where the first batch it lacks begins).
    pub(crate) tail: u64,
    /// Blocks written since the checkpoint: the next batch begins at `tail + used`.
    pub(crate) used: u64,
    /// The sequence of the next batch.
    pub(crate) next_sequence: u64,
    /// A destroyed ring was found at the sequence here and not yet acknowledged.
    pub(crate) lost_from: Option<u64>,
}

impl Ring {
    /// The ring as a checkpoint left it (`used` = 0).
    pub(crate) fn at_checkpoint(sb: &Superblock) -> Ring {
        Ring {
            len: sb.layout.journal.len,
            tail: sb.journal.tail,
            used: 0,
            next_sequence: sb.journal.sequence,
            lost_from: (sb.journal.flags & JOURNAL_LOSS != 0).then_some(sb.journal.lost_from),
        }
    }

    /// Blocks a batch may still take before the next checkpoint (never the whole ring: one
    /// block always keeps verifying, so a torn batch cannot look like a destroyed region).
    pub(crate) fn free(&self) -> u64 {
        self.len - 1 - self.used
    }

    /// Ring block where the next batch begins.
    pub(crate) fn head(&self) -> u64 {
        (self.tail + self.used) % self.len
    }

    /// Seals `payload` as batch `next_sequence` at the head: the writes to make, as
    /// `(byte offset, bytes)`, one per contiguous run of ring blocks (two when it wraps).
    pub(crate) fn seal(&self, layout: &Layout, uuid: &Uuid, payload: &[u8]) -> Vec<(u64, AlignedBuf)> {
        let bs = layout.block_size;
        let count = blocks_for(payload.len(), bs);
        assert!(count <= self.free(), "a batch of {count} blocks past the ring's free space");
        let per = payload_per_block(bs);
        let count32 = u32::try_from(count).expect("ring blocks fit u32");
        let mut runs = Vec::new();
        let mut at = self.head();
        let mut index = 0u64;
        while index < count {
            let n = (count - index).min(self.len - at);
            let mut buf = Io::buffer((n * u64::from(bs)) as usize);
            for (k, out) in buf.as_mut_slice().chunks_mut(bs as usize).enumerate() {
                let i = index + k as u64;
                let from = (i as usize * per).min(payload.len());
                let to = (from + per).min(payload.len());
                let address = layout.journal.start + at + k as u64;
                let i32 = u32::try_from(i).expect("ring blocks fit u32");
                seal_block(out, address, uuid, self.next_sequence, (i32, count32), &payload[from..to]);
            }
            runs.push((layout.offset_of(layout.journal.start + at), buf));
            index += n;
            at = (at + n) % self.len;
        }
        runs
    }

    /// Accounts for a batch of `blocks` written and durable.
    pub(crate) fn advance(&mut self, blocks: u64) {
        assert!(blocks <= self.free());
        self.used += blocks;
        self.next_sequence += 1;
    }

    /// The writes that fill the whole ring with filler blocks (enabling the journal).
    pub(crate) fn fillers(&self, layout: &Layout, uuid: &Uuid) -> (u64, AlignedBuf) {
        let bs = layout.block_size as usize;
        let mut buf = Io::buffer(self.len as usize * bs);
        for (i, out) in buf.as_mut_slice().chunks_mut(bs).enumerate() {
            seal_block(out, layout.journal.start + i as u64, uuid, 0, (0, 1), &[]);
        }
        (layout.offset_of(layout.journal.start), buf)
    }
}

/// One batch found by the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub sequence: u64,
    /// Ring block where it begins, and its length in blocks.
    pub at: u64,
    pub blocks: u64,
    pub ops: Vec<Op>,
}

/// What the scan of the ring found after the checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// The valid prefix, in order: every batch to replay.
    pub batches: Vec<Batch>,
    /// Ring blocks the valid prefix takes from the tail.
    pub used: u64,
    /// The sequence the next batch must carry.
    pub next_sequence: u64,
    /// The prefix ended at a block that does not verify, or at part of a batch (a batch torn
    /// by a power cut).
    pub torn_tail: bool,
    /// No block of the ring verifies: the region was destroyed, and the volume can only go
    /// on from its checkpoint.
    pub destroyed: bool,
}

/// Options of the scan that the crash checkers break on purpose.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ScanRules {
    /// The `ReplayAcceptsDamage` mutant: stop at the first bad batch whatever follows.
    pub(crate) accept_damage: bool,
}

/// Reads the whole ring of the volume `sb` describes and finds the valid prefix after its
/// checkpoint. Writes nothing.
pub(crate) fn scan(reader: &dyn AreaRead, sb: &Superblock, rules: ScanRules) -> Result<Scan> {
    let layout = sb.layout;
    let ring = Ring::at_checkpoint(sb);
    let bs = u64::from(layout.block_size);
    let ring_end = layout.journal.end().saturating_mul(bs);
    if ring_end > reader.carrier_len() {
        // Nothing past the carrier is read (or allocated for).
        return Err(Error::corrupt(
            Region::Journal,
            layout.journal.start.saturating_mul(bs),
            Corruption::Truncated { needed: ring_end, available: reader.carrier_len() },
        ));
    }
    let mut bytes = Io::buffer((ring.len * bs) as usize);
    let mut at = 0;
    while at < ring.len {
        let n = (ring.len - at).min(SCAN_CHUNK_BLOCKS);
        let buf = &mut bytes.as_mut_slice()[(at * bs) as usize..((at + n) * bs) as usize];
        reader.read_in(Some(&layout), Area::Journal, layout.offset_of(layout.journal.start + at), buf)?;
        at += n;
    }
    let all = bytes.as_slice();
    let mut views = Vec::with_capacity(ring.len as usize);
    for i in 0..ring.len {
        let block = &all[(i * bs) as usize..((i + 1) * bs) as usize];
        views.push(open_block(block, layout.journal.start + i, &sb.uuid)?);
    }
    let mut scan = Scan { next_sequence: ring.next_sequence, ..Scan::default() };
    let mut pos = ring.tail;
    while let Some(first) =
        views[pos as usize].filter(|v| v.sequence == scan.next_sequence)
    {
        let count = u64::from(first.count);
        if first.index != 0 || count > ring.len - scan.used {
            break;
        }
        let mut payload = Vec::new();
        let mut whole = true;
        for k in 0..count {
            let p = ((pos + k) % ring.len) as usize;
            match views[p] {
                Some(v) if v.sequence == first.sequence && u64::from(v.index) == k && v.count == first.count => {
                    payload.extend_from_slice(v.payload);
                }
                _ => {
                    whole = false;
                    break;
                }
            }
        }
        if !whole {
            break;
        }
        let offset = layout.offset_of(layout.journal.start + pos);
        let ops = record::decode_batch(&payload, offset)?;
        scan.batches.push(Batch { sequence: first.sequence, at: pos, blocks: count, ops });
        scan.used += count;
        scan.next_sequence += 1;
        pos = (pos + count) % ring.len;
        if scan.used == ring.len {
            break;
        }
    }
    if scan.used < ring.len {
        let at = views[pos as usize];
        scan.torn_tail = at.is_none_or(|v| v.sequence == scan.next_sequence);
    }
    // What lies after the prefix: nothing that verifies with a higher sequence may exist
    // (K = 1), blocks of the batch in flight may.
    let mut any_valid = false;
    for (i, v) in views.iter().enumerate() {
        let Some(v) = v else { continue };
        any_valid = true;
        if v.sequence > scan.next_sequence && !rules.accept_damage {
            return Err(Error::corrupt(
                Region::Journal,
                layout.offset_of(layout.journal.start + i as u64),
                Corruption::JournalGap { missing: scan.next_sequence, found: v.sequence },
            ));
        }
        if v.sequence == scan.next_sequence {
            scan.torn_tail = true;
        }
    }
    scan.destroyed = !any_valid;
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_verify_only_at_their_address() {
        let uuid = Uuid([3; 16]);
        let mut b = vec![0u8; 4096];
        seal_block(&mut b, 10, &uuid, 5, (0, 1), b"records");
        let v = open_block(&b, 10, &uuid).unwrap().unwrap();
        assert_eq!((v.sequence, v.index, v.count, v.payload), (5, 0, 1, &b"records"[..]));
        assert_eq!(open_block(&b, 11, &uuid).unwrap(), None);
        assert_eq!(open_block(&b, 10, &Uuid([4; 16])).unwrap(), None);
        let mut torn = b.clone();
        torn[2048] ^= 1;
        assert_eq!(open_block(&torn, 10, &uuid).unwrap(), None);
    }

    #[test]
    fn a_verified_block_that_breaks_a_rule_refuses() {
        let uuid = Uuid([3; 16]);
        let mut b = vec![0u8; 4096];
        seal_block(&mut b, 10, &uuid, 5, (2, 1), b"x");
        assert!(open_block(&b, 10, &uuid).is_err(), "index past count");
    }
}
