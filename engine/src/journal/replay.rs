//! Replay at open: the valid prefix of the ring, in order, applied to the checkpoint's state
//! through the live path's own operations (FORMAT.md, "Replay"). The journal knows no
//! namespace: the volume hands it an [`Apply`] (its namespace and a scratch allocator), so
//! replay and the live path share one implementation of every operation.
//!
//! Replay reads the ring and writes nothing. It decides three things the writable open then
//! makes durable, in this order (a power cut between any two steps reopens to the same
//! decision, see `volume::open`):
//! 1. a destroyed ring's loss (`lost_from`), recorded by a checkpoint before anything else;
//! 2. whether the ring must be filled again (a loss is recorded and no batch was replayed,
//!    but some block does not verify: the region was destroyed, or a fill was cut short);
//! 3. the next sequence: past every block that verifies, so a torn batch's number is never
//!    reused (a second torn batch at the same ring position could otherwise be stitched to
//!    the first one's stale blocks).

use crate::error::Result;
use crate::io::AreaRead;
use crate::superblock::{JOURNAL_LOSS, Superblock};

use super::record::Op;
use super::ring::Ring;
use super::scan::{self, ScanRules};

/// What journal replay found and did at open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Batches replayed (committed after the checkpoint).
    pub batches: u64,
    /// Records replayed.
    pub records: u64,
    /// Ring blocks the replayed batches took.
    pub blocks: u64,
    /// The valid prefix ended at a batch torn by a power cut (it was never acknowledged).
    pub torn_tail: bool,
    /// The journal region was destroyed: the volume opened at its checkpoint, and records
    /// after it are lost (reported until acknowledged: `vellum journal ack`).
    pub destroyed: bool,
    /// Set by an earlier open that found the region destroyed, not yet acknowledged.
    pub loss_unacknowledged: bool,
}

/// Where replay applies records: the volume's namespace and a scratch allocator.
pub(crate) trait Apply {
    /// Applies one record of batch `sequence` (whose first block is at carrier byte
    /// `offset`). A record that does not apply is `Corrupt`, never a panic.
    fn apply(&mut self, op: &Op, sequence: u64, offset: u64) -> Result<()>;
    /// The batch is over: as after its live commit, blocks it freed may be reused.
    fn batch_done(&mut self);
}

/// Rules of replay that the crash checkers break on purpose.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReplayRules {
    pub(crate) scan: ScanRules,
    /// The `JournalSequenceReuse` mutant: the next batch takes the number after the prefix
    /// even when a torn batch already carried it.
    pub(crate) reuse_sequence: bool,
}

/// What replay produced.
#[derive(Debug, Clone)]
pub(crate) struct Replayed {
    pub(crate) report: ReplayReport,
    /// The ring after the replayed batches, its next sequence past every verified block.
    pub(crate) ring: Ring,
    /// The last commit recovered: the last batch replayed, or the checkpoint's.
    pub(crate) commit_id: u64,
    /// The ring must be filled before the next batch (see the module docs).
    pub(crate) refill: bool,
}

/// Replays the journal of the journaled volume `sb` into `target`. Reads the ring; writes
/// nothing.
pub(crate) fn replay(
    reader: &dyn AreaRead,
    sb: &Superblock,
    rules: ReplayRules,
    target: &mut dyn Apply,
) -> Result<Replayed> {
    assert!(sb.journaled(), "replay of a volume without a journal");
    let scan = scan::scan(reader, sb, rules.scan)?;
    let mut report = ReplayReport {
        batches: scan.batches.len() as u64,
        blocks: scan.used,
        torn_tail: scan.torn_tail,
        destroyed: scan.destroyed,
        loss_unacknowledged: sb.journal.flags & JOURNAL_LOSS != 0,
        ..ReplayReport::default()
    };
    for batch in &scan.batches {
        for op in &batch.ops {
            target.apply(op, batch.sequence, batch.offset)?;
            report.records += 1;
        }
        target.batch_done();
    }
    let mut ring = Ring::at_checkpoint(sb);
    ring.used = scan.used;
    ring.next_sequence =
        if rules.reuse_sequence { scan.end_sequence } else { scan.next_sequence() };
    if scan.destroyed && ring.lost_from.is_none() {
        ring.lost_from = Some(sb.journal.sequence);
    }
    ring.check_invariants();
    assert!(ring.next_sequence >= sb.journal.sequence, "replay moved the sequence back");
    let refill = ring.lost_from.is_some() && scan.used == 0 && scan.unverified_blocks > 0;
    Ok(Replayed { report, ring, commit_id: scan.end_sequence - 1, refill })
}
