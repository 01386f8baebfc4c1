//! The scan of the ring at open: the valid prefix after the checkpoint, and what lies past
//! it (FORMAT.md, "Replay" steps 1 to 3). Reads the ring; writes nothing; never panics on
//! what it reads.
//!
//! Invariants the scan relies on (kept by the writer and the checkpoint):
//! - One batch in flight (K = 1): a block past the prefix that verifies with a sequence
//!   above the expected one means a damaged batch was acknowledged: refuse (`JournalGap`).
//! - Sequences only grow, also across torn batches: every stale block carries a lower
//!   sequence than the next batch, so no stale block is ever stitched into a new batch.
//!   The scan reports the highest sequence it saw, and open moves the next batch past it.

use crate::error::{Corruption, Error, Region, Result};
use crate::io::{Area, AreaRead, Io};
use crate::superblock::Superblock;

use super::block::{BlockView, open_block};
use super::record::{self, Op};
use super::ring::Ring;

/// Most ring blocks read in one carrier call.
const SCAN_CHUNK_BLOCKS: u64 = 1024;

/// One batch found by the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub sequence: u64,
    /// Ring block where it begins, and its length in blocks.
    pub at: u64,
    pub blocks: u64,
    /// Carrier byte offset of its first block (for errors).
    pub offset: u64,
    pub ops: Vec<Op>,
}

/// What the scan of the ring found after the checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// The valid prefix, in order: every batch to replay.
    pub batches: Vec<Batch>,
    /// Ring blocks the valid prefix takes from the tail.
    pub used: u64,
    /// The sequence after the prefix: the last batch replayed is this minus one.
    pub end_sequence: u64,
    /// The highest sequence of any block that verifies (0 when only fillers do).
    pub highest_sequence: u64,
    /// Ring blocks that do not verify (never written, torn, damaged).
    pub unverified_blocks: u64,
    /// The prefix ended at a block that does not verify, or at part of a batch (a batch torn
    /// by a power cut).
    pub torn_tail: bool,
    /// No block of the ring verifies: the region was destroyed, and the volume can only go
    /// on from its checkpoint.
    pub destroyed: bool,
}

impl Scan {
    /// The sequence the next batch must carry: past the prefix and past every block that
    /// verifies (a torn batch's number is never used again, so its stale blocks can never be
    /// stitched to a new batch's).
    pub fn next_sequence(&self) -> u64 {
        self.end_sequence.max(self.highest_sequence + 1)
    }
}

/// Options of the scan that the crash checkers break on purpose.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ScanRules {
    /// The `ReplayAcceptsDamage` mutant: stop at the first bad batch whatever follows.
    pub(crate) accept_damage: bool,
}

/// Reads the whole ring, `ring.len` blocks of the journal region.
fn read_ring(reader: &dyn AreaRead, sb: &Superblock, ring: &Ring) -> Result<crate::io::AlignedBuf> {
    let layout = sb.layout;
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
    Ok(bytes)
}

/// The batch whose first block is at ring block `pos`, if it is whole: every block verifies
/// with the first one's sequence and count and consecutive indexes.
fn whole_batch(views: &[Option<BlockView<'_>>], pos: u64, first: BlockView<'_>) -> Option<Vec<u8>> {
    let len = views.len() as u64;
    let mut payload = Vec::new();
    for k in 0..u64::from(first.count) {
        match views[((pos + k) % len) as usize] {
            Some(v) if v.sequence == first.sequence && u64::from(v.index) == k && v.count == first.count => {
                payload.extend_from_slice(v.payload);
            }
            _ => return None,
        }
    }
    Some(payload)
}

/// Reads the whole ring of the volume `sb` describes and finds the valid prefix after its
/// checkpoint. Writes nothing.
pub(crate) fn scan(reader: &dyn AreaRead, sb: &Superblock, rules: ScanRules) -> Result<Scan> {
    let layout = sb.layout;
    let ring = Ring::at_checkpoint(sb);
    let bs = u64::from(layout.block_size);
    let bytes = read_ring(reader, sb, &ring)?;
    let all = bytes.as_slice();
    let mut views = Vec::with_capacity(ring.len as usize);
    for i in 0..ring.len {
        let block = &all[(i * bs) as usize..((i + 1) * bs) as usize];
        views.push(open_block(block, layout.journal.start + i, &sb.uuid)?);
    }
    let mut scan = Scan { end_sequence: ring.next_sequence, ..Scan::default() };
    let mut pos = ring.tail;
    while let Some(first) = views[pos as usize].filter(|v| v.sequence == scan.end_sequence) {
        let count = u64::from(first.count);
        if first.index != 0 || count > ring.len - 1 - scan.used {
            break;
        }
        let Some(payload) = whole_batch(&views, pos, first) else { break };
        let offset = layout.offset_of(layout.journal.start + pos);
        let ops = record::decode_batch(&payload, offset)?;
        scan.batches.push(Batch { sequence: first.sequence, at: pos, blocks: count, offset, ops });
        scan.used += count;
        scan.end_sequence += 1;
        pos = (pos + count) % ring.len;
    }
    let at_end = views[pos as usize];
    scan.torn_tail = at_end.is_none_or(|v| v.sequence == scan.end_sequence);
    // What lies after the prefix: nothing that verifies with a higher sequence may exist
    // (K = 1), blocks of the batch in flight may.
    for (i, v) in views.iter().enumerate() {
        let Some(v) = v else {
            scan.unverified_blocks += 1;
            continue;
        };
        scan.highest_sequence = scan.highest_sequence.max(v.sequence);
        if v.sequence > scan.end_sequence && !rules.accept_damage {
            return Err(Error::corrupt(
                Region::Journal,
                layout.offset_of(layout.journal.start + i as u64),
                Corruption::JournalGap { missing: scan.end_sequence, found: v.sequence },
            ));
        }
        if v.sequence == scan.end_sequence {
            scan.torn_tail = true;
        }
    }
    scan.destroyed = scan.unverified_blocks == ring.len;
    Ok(scan)
}
