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
//! Invariants (asserted in `ring`, relied on by `scan`):
//! - **One batch in flight (K = 1).** Batch `n + 1` is written only after batch `n` is
//!   durable (the metadata mutex serializes commits). So a damaged batch followed by an
//!   intact later one was acknowledged before the damage: open refuses (`JournalGap`) instead
//!   of replaying a prefix that silently drops acknowledged commits. A damaged batch with
//!   nothing intact after it is the torn tail of a power cut: replay stops there.
//! - **Nothing after the tail is overwritten before a checkpoint moves the tail.** Batches go
//!   to the ring in order from the tail; a batch that does not fit in the space left makes
//!   the commit a checkpoint instead, and the ring is reused only once the checkpoint's
//!   superblock is durable.
//! - **Sequences only grow, also across power cuts.** A checkpoint stores the next sequence;
//!   after a torn batch, open moves the next sequence past the highest one that any block of
//!   the ring carries, so no stale block (of an earlier lap, or of a torn batch at the same
//!   position) can ever be taken for part of a new batch.
//! - **Self-locating blocks.** A block's checksum is seeded with its address and the volume
//!   UUID: a block written elsewhere, or left by another volume, never verifies here.
//! - **Every block verifies, except the batch in flight.** Enabling the journal fills the ring
//!   with *filler* blocks (sequence 0), and batches only replace blocks with blocks; a batch
//!   never takes the whole ring. So a ring where no block verifies was destroyed (not torn,
//!   not new), and open says so: the loss is made durable first, then the ring is filled
//!   again, then the tail moves.
//!
//! Files: `block` (the block codec), `record` (operation records), `ring` (live state and
//! thresholds), `scan` (the valid prefix at open), `replay` (applying it), `writer` (batches
//! and fillers), `checkpointer` (the background thread).

pub mod block;
pub(crate) mod checkpointer;
pub mod record;
pub(crate) mod replay;
pub(crate) mod ring;
pub(crate) mod scan;
pub(crate) mod writer;

pub use record::Op;
pub use replay::ReplayReport;
pub(crate) use ring::{AfterBatch, Ring};

/// Whether a volume's commits go through the journal (and where its ring stands) or are each
/// a copy-on-write checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Journal {
    /// No journal: every commit writes an image and flips both superblocks.
    Off,
    /// Journaled: commits are batches in this ring.
    On(Ring),
}

impl Journal {
    pub(crate) fn ring(&self) -> Option<&Ring> {
        match self {
            Journal::On(ring) => Some(ring),
            Journal::Off => None,
        }
    }

    pub(crate) fn ring_mut(&mut self) -> Option<&mut Ring> {
        match self {
            Journal::On(ring) => Some(ring),
            Journal::Off => None,
        }
    }

    pub(crate) fn is_on(&self) -> bool {
        matches!(self, Journal::On(_))
    }
}
