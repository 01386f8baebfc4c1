//! The ring's live state and the one set of thresholds that decide when it is checkpointed.
//!
//! The ring holds `len` blocks. The last checkpoint left its `tail` (where the first batch it
//! does not contain begins) and the sequence that batch must carry; `used` blocks after the
//! tail hold the batches since. Everything here is program state under the metadata mutex:
//! its invariants are asserted, because breaking one writes a batch over records that the
//! durable superblock still needs, or a sequence that can be stitched to stale blocks.
//!
//! Invariants:
//! - `tail < len` and `used <= len - 1`: a batch never takes the whole ring (one block always
//!   verifies, so a torn batch cannot look like a destroyed region).
//! - `next_sequence >= 1` and it only grows: a checkpoint may move it forward (past a torn
//!   batch's number, past records it contains), never back.
//! - Blocks after `tail + used` are free for the next batch; blocks from `tail` to
//!   `tail + used` hold batches the durable superblock needs until the next checkpoint's
//!   second barrier.

use crate::format::consts::Uuid;
use crate::io::{AlignedBuf, Io};
use crate::layout::Layout;
use crate::superblock::{JOURNAL_LOSS, JournalFields, Superblock};

use super::block::{blocks_for, payload_per_block, seal_block};

/// A commit that leaves the ring at least this full wakes the background checkpointer.
pub(crate) const BACKGROUND_PERCENT: u64 = 50;
/// A commit that leaves the ring at least this full checkpoints in the committing thread
/// (the checkpointer did not keep up: records kept coming), so the next commit finds room.
pub(crate) const INLINE_PERCENT: u64 = 75;
const _: () = assert!(BACKGROUND_PERCENT < INLINE_PERCENT && INLINE_PERCENT < 100);

/// What a commit does after its batch is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterBatch {
    Nothing,
    /// Wake the background checkpointer.
    Background,
    /// Checkpoint now, in the committing thread.
    Inline,
}

/// The journal's live state (under the metadata mutex).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The ring as the checkpoint of `sb` left it (`used` = 0).
    pub(crate) fn at_checkpoint(sb: &Superblock) -> Ring {
        let ring = Ring {
            len: sb.layout.journal.len,
            tail: sb.journal.tail,
            used: 0,
            next_sequence: sb.journal.sequence,
            lost_from: (sb.journal.flags & JOURNAL_LOSS != 0).then_some(sb.journal.lost_from),
        };
        ring.check_invariants();
        ring
    }

    pub(crate) fn check_invariants(&self) {
        assert!(self.len >= 2, "a ring of {} blocks", self.len);
        assert!(self.tail < self.len, "tail {} outside a ring of {}", self.tail, self.len);
        assert!(self.used < self.len, "{} blocks used of a ring of {}", self.used, self.len);
        assert!(self.next_sequence >= 1, "journal sequence 0 is the fillers'");
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

    /// Percent of the ring holding batches since the checkpoint.
    pub(crate) fn fill_percent(&self) -> u64 {
        self.used * 100 / self.len
    }

    /// Blocks a batch of `payload_len` bytes takes, and whether it fits the free space (a
    /// batch that does not makes its commit a checkpoint).
    pub(crate) fn fits(&self, payload_len: usize, block_size: u32) -> bool {
        blocks_for(payload_len, block_size) <= self.free()
    }

    /// Seals `payload` as batch `next_sequence` at the head: the writes to make, as
    /// `(byte offset, bytes)`, one per contiguous run of ring blocks (two when it wraps).
    pub(crate) fn seal(&self, layout: &Layout, uuid: &Uuid, payload: &[u8]) -> Vec<(u64, AlignedBuf)> {
        let bs = layout.block_size;
        let count = blocks_for(payload.len(), bs);
        assert!(count <= self.free(), "a batch of {count} blocks past the ring's free space");
        assert_eq!(layout.journal.len, self.len, "the ring is the journal region");
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

    /// Accounts for a batch of `blocks` written and durable; says what the commit does next.
    pub(crate) fn advance(&mut self, blocks: u64) -> AfterBatch {
        assert!(blocks >= 1 && blocks <= self.free(), "a batch of {blocks} blocks, {}", self.free());
        self.used += blocks;
        self.next_sequence += 1;
        self.check_invariants();
        match self.fill_percent() {
            f if f >= INLINE_PERCENT => AfterBatch::Inline,
            f if f >= BACKGROUND_PERCENT => AfterBatch::Background,
            _ => AfterBatch::Nothing,
        }
    }

    /// Whether the background checkpointer should checkpoint now: batches are waiting, and
    /// the ring is half full or the oldest has waited `interval` (`waited`).
    pub(crate) fn background_due(&self, waited: std::time::Duration, interval: std::time::Duration) -> bool {
        self.used > 0 && (self.fill_percent() >= BACKGROUND_PERCENT || waited >= interval)
    }

    /// The writes that fill the whole ring with filler blocks: when the journal is enabled,
    /// and after a destroyed region's loss is durable.
    pub(crate) fn fillers(&self, layout: &Layout, uuid: &Uuid) -> (u64, AlignedBuf) {
        assert_eq!(layout.journal.len, self.len, "the ring is the journal region");
        let bs = layout.block_size as usize;
        let mut buf = Io::buffer(self.len as usize * bs);
        for (i, out) in buf.as_mut_slice().chunks_mut(bs).enumerate() {
            seal_block(out, layout.journal.start + i as u64, uuid, 0, (0, 1), &[]);
        }
        (layout.offset_of(layout.journal.start), buf)
    }

    /// The journal fields a checkpoint of this ring stores: the tail moves to the head, and
    /// the sequence past the records still queued (`queued`), which the checkpoint's image
    /// contains.
    pub(crate) fn checkpoint_fields(&self, queued: bool) -> JournalFields {
        JournalFields {
            tail: self.head(),
            sequence: self.next_sequence + u64::from(queued),
            lost_from: self.lost_from.unwrap_or(0),
            flags: if self.lost_from.is_some() { JOURNAL_LOSS } else { 0 },
        }
    }

    /// The ring once the checkpoint that stored `fields` is durable (both flips behind their
    /// barriers): only now may batches overwrite the blocks after the old tail.
    pub(crate) fn checkpointed(&mut self, fields: &JournalFields) {
        assert!(
            fields.sequence >= self.next_sequence,
            "a checkpoint moves the journal sequence back: {} < {}",
            fields.sequence,
            self.next_sequence
        );
        self.tail = fields.tail;
        self.used = 0;
        self.next_sequence = fields.sequence;
        self.check_invariants();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(len: u64) -> Ring {
        Ring { len, tail: 0, used: 0, next_sequence: 1, lost_from: None }
    }

    #[test]
    fn thresholds_say_when_to_checkpoint() {
        let mut r = ring(8);
        assert_eq!(r.advance(1), AfterBatch::Nothing);
        assert_eq!(r.advance(3), AfterBatch::Background);
        assert_eq!(r.advance(2), AfterBatch::Inline);
        assert_eq!(r.free(), 1);
        assert_eq!(r.next_sequence, 4);
    }

    #[test]
    #[should_panic(expected = "moves the journal sequence back")]
    fn a_checkpoint_never_moves_the_sequence_back() {
        let mut r = ring(8);
        r.advance(1);
        let fields = JournalFields { tail: 1, sequence: 1, lost_from: 0, flags: 0 };
        r.checkpointed(&fields);
    }

    #[test]
    #[should_panic(expected = "past the ring's free space")]
    fn a_batch_never_takes_the_whole_ring() {
        let layout = Layout::for_growing_format(8 << 20, None, 4096, 4 * 4096, None).unwrap();
        let r = ring(layout.journal.len);
        let payload = vec![1u8; 4 * payload_per_block(4096)];
        drop(r.seal(&layout, &Uuid([1; 16]), &payload));
    }
}
