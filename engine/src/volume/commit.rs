//! Commits and syncs: data before metadata, then one journal batch on a journaled volume or a
//! checkpoint otherwise (FORMAT.md, "Commit protocol", "Journaled commit and checkpoint").
//!
//! 1. **Data first** ([`flush_data`]): every dirty page of the cache is written back (and
//!    every writeback in flight waited for), then a barrier if plain data writes returned
//!    since the last one. Write-through data is durable already.
//! 2. **Nothing over a failed write.** Every sync and commit samples the IO layer's error
//!    sequence when it starts and fails (`Poisoned`) if any write, writeback or barrier
//!    failed since, also one that another thread's writeback issued and this sync only
//!    waited for (the fsyncgate shape: the failed page was marked clean, so no dirty page
//!    is left to tell). A failed write also poisons the volume, so the IO layer refuses every
//!    later write, the journal batch included.
//! 3. **The commit point.** Journaled: one batch of the records queued since the last commit
//!    (`journal::writer`), then the ring decides whether a checkpoint follows
//!    (`journal::ring` thresholds: in the background past half full, in this thread past
//!    75 %, instead of the batch when it does not fit). Copy-on-write: a checkpoint
//!    (`checkpoint`).
//!
//! Invariants (asserted): the ring only advances by the blocks a durable batch took; the
//! record queue is empty after a batch; freed blocks are released only after the commit
//! that freed them is durable; in debug builds, the namespace and the allocator check their
//! invariants after every commit.

use super::{CommitMutation, Inner, Meta, checkpoint};
use crate::error::Result;
use crate::journal::{AfterBatch, record, writer};
use crate::superblock::VolumeState;

/// Data before metadata (see the module docs, steps 1 and 2). `since` is the IO layer's error
/// sequence when the caller's sync or commit started.
///
/// Takes the metadata guard as proof that the caller holds the metadata mutex: a caller that
/// finds the flag already cleared by another thread's swap must not return before that
/// thread's barrier did, and the mutex (held by that thread until its barrier returned) is
/// what makes it wait.
pub(crate) fn flush_data(inner: &Inner, _meta: &mut Meta, since: u64) -> Result<()> {
    let session = inner.io.session()?;
    if let Some(cache) = inner.io.cache() {
        cache.flush_all(&session)?;
    }
    if inner.io.take_unflushed() {
        session.barrier()?;
    }
    if inner.options.mutation() == Some(CommitMutation::SyncIgnoresWritebackError) {
        return Ok(());
    }
    inner.io.check_errors_since(since)
}

/// Drops the cached pages of blocks that become reusable when this commit completes (their
/// dirty bytes belong to no file any more), then marks the commit completed.
pub(crate) fn release_freed(inner: &Inner, meta: &mut Meta) {
    if let Some(cache) = inner.io.cache() {
        for run in meta.alloc.pending_release() {
            cache.discard(run.start, run.end());
        }
    }
    meta.alloc.commit_completed();
}

/// Makes every change so far durable (see the module docs). Any carrier failure poisons.
pub(crate) fn commit_changes(inner: &Inner, meta: &mut Meta, since: u64) -> Result<()> {
    inner.writable()?;
    let result = if meta.journal.is_on() {
        journal_commit(inner, meta, since)
    } else {
        checkpoint::run(inner, meta, VolumeState::Dirty, since)
    };
    if let Err(e) = &result
        && e.is_poisoning()
    {
        inner.poison(e);
    }
    result?;
    check_invariants(meta);
    Ok(())
}

/// The in-memory invariants, after every commit in debug builds (tests and fuzzers call
/// `Volume::check_invariants` themselves).
pub(crate) fn check_invariants(meta: &Meta) {
    if cfg!(debug_assertions) {
        meta.ns.check_invariants();
        meta.alloc.check_invariants();
    }
}

fn journal_commit(inner: &Inner, meta: &mut Meta, since: u64) -> Result<()> {
    let queue = meta.ns.journal.as_deref().unwrap_or_default();
    if queue.is_empty() {
        // Nothing to record: data first, and blocks whose freeing records are durable
        // already (an orphan's, after its last handle closed) become reusable.
        flush_data(inner, meta, since)?;
        release_freed(inner, meta);
        return Ok(());
    }
    let payload = record::encode_batch(queue);
    let ring = meta.journal.ring().expect("a journaled commit has a ring");
    if !ring.fits(payload.len(), inner.layout.block_size) {
        // Larger than the ring's free space: the checkpoint takes the records instead.
        return checkpoint::run_for_ring(inner, meta, since);
    }
    // Ordered mode: the data the records reference reaches the carrier first.
    flush_data(inner, meta, since)?;
    let ring = meta.journal.ring().expect("a journaled commit has a ring");
    let blocks = {
        let session = inner.io.session()?;
        let write_through = inner.io.options.write_through;
        writer::write_batch(&session, ring, &inner.layout, &meta.sb.uuid, &payload, write_through)?
    };
    let ring = meta.journal.ring_mut().expect("a journaled commit has a ring");
    let after = ring.advance(blocks);
    meta.ns.journal = Some(Vec::new());
    release_freed(inner, meta);
    match after {
        AfterBatch::Nothing => {}
        AfterBatch::Background => inner.kick_checkpointer(),
        // The background checkpointer did not keep up (records kept coming): this commit
        // checkpoints itself, so the next one finds room.
        AfterBatch::Inline => checkpoint::run_for_ring(inner, meta, since)?,
    }
    Ok(())
}

/// Like a commit, but with nothing to record only the data part (`Volume::sync`).
pub(crate) fn sync(inner: &Inner, meta: &mut Meta, since: u64) -> Result<()> {
    if meta.is_dirty() {
        return commit_changes(inner, meta, since);
    }
    flush_data(inner, meta, since).inspect_err(|e| {
        if e.is_poisoning() {
            inner.poison(e);
        }
    })
}
