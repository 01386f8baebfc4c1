//! The commit protocol (FORMAT.md, "Commit protocol").
//!
//! 1. Data is already on the carrier: every data write returned before its extent was
//!    attached, and only attached extents are in the image. Data written without
//!    write-through (still in a cache) gets one barrier of its own before anything else.
//! 2. The dirty metadata goes copy-on-write into new blocks (record blocks, spines, root).
//! 3. The changed bitmap blocks are written in place (the bitmap is authoritative only for a
//!    clean volume whose checksum matches, so a torn bitmap write costs nothing).
//! 4. The superblock of generation G+1 goes to slot `(G+1) mod 2`. **Barrier.** Everything of
//!    G+1 is now durable, and that slot may be adopted.
//! 5. The same superblock goes to the other slot. **Barrier.**
//!
//! Two barriers per commit, whatever it changed (a third one first only when buffered data
//! writes are outstanding). A crash before the first barrier completes
//! leaves the other slot at G (its image untouched: freed blocks are reused only after the
//! commit that freed them completed); adoption passes over a first-written slot whose image
//! did not land. A crash between the barriers leaves one slot at G+1, durable.
//!
//! **Journaled volumes** (FORMAT.md, "Journaled commit"): a commit is step 1 then one batch
//! of the records queued since the last commit, written to the ring with one durable write
//! (write-through) or one write and one barrier: the batch is the commit point. Steps 2-5
//! become the *checkpoint*, which also stores where the ring's first batch after it begins;
//! it runs in the background when a commit leaves the ring half full or batches have waited
//! for the checkpoint interval (`checkpointer`), inline when the ring passes
//! [`CHECKPOINT_FILL_PERCENT`] or a batch does not fit in its free space, at open and at close. Ring space is reused only after the
//! checkpoint's superblock is durable.

use super::{CommitMutation, Inner, Meta};
use crate::error::{Error, Result};
use crate::format::checksum;
use crate::image::writer;
use crate::io::{Area, Io};
use crate::journal::{self, Ring, record};
use crate::superblock::{self, JOURNAL_LOSS, JournalFields, VolumeState};

/// A journaled commit that leaves the ring fuller than this checkpoints right after it, so
/// that a commit rarely finds the ring full (and replay stays short).
pub(crate) const CHECKPOINT_FILL_PERCENT: u64 = 75;

/// A barrier: every write that returned before it is durable.
pub(crate) fn barrier(inner: &Inner) -> Result<()> {
    inner.io.barrier()
}

/// Data before metadata: writes back every dirty page of the cache (and waits for the
/// writeback thread's writes in flight), then takes a barrier if plain data writes returned
/// since the last one.
///
/// Takes the metadata guard as proof that the caller holds the metadata mutex: a caller that
/// finds the flag already cleared by another thread's swap must not return before that
/// thread's barrier did, and the mutex (held by that thread until its barrier returned) is
/// what makes it wait.
pub(crate) fn flush_data(inner: &Inner, _meta: &mut Meta) -> Result<()> {
    let session = inner.io.session()?;
    if let Some(cache) = inner.io.cache() {
        cache.flush_all(&session)?;
    }
    if inner.io.take_unflushed() {
        session.barrier()?;
    }
    Ok(())
}

/// Drops the cached pages of blocks that become reusable when this commit completes (their
/// dirty bytes belong to no file any more), then marks the commit completed.
fn release_freed(inner: &Inner, meta: &mut Meta) {
    if let Some(cache) = inner.io.cache() {
        for run in meta.alloc.pending_release() {
            cache.discard(run.start, run.end());
        }
    }
    meta.alloc.commit_completed();
}

/// Grows a thin carrier so that every block below `end_block` exists.
pub(crate) fn ensure_carrier_len(inner: &Inner, meta: &mut Meta, end_block: u64) -> Result<()> {
    let layout = &inner.layout;
    let need = end_block * u64::from(layout.block_size);
    if need <= meta.carrier_len {
        return Ok(());
    }
    // Grow by doubling (at least 1 MiB), capped at the capacity: few grows, bounded waste.
    let target =
        need.max(meta.carrier_len.saturating_mul(2)).max(1 << 20).min(layout.capacity_bytes());
    let sparse = meta.sb.layout_flags & superblock::LAYOUT_SPARSE != 0;
    inner.io.session()?.grow(meta.carrier_len, target, sparse)?;
    meta.carrier_len = target;
    Ok(())
}

/// Writes sealed blocks, one carrier call per run of consecutive addresses.
fn write_blocks(inner: &Inner, blocks: &[(u64, Vec<u8>)]) -> Result<()> {
    let bs = inner.layout.block_size as usize;
    let mut i = 0;
    while i < blocks.len() {
        let mut n = 1;
        while i + n < blocks.len() && blocks[i + n].0 == blocks[i].0 + n as u64 {
            n += 1;
        }
        let mut buf = Io::buffer(n * bs);
        for (k, (_, bytes)) in blocks[i..i + n].iter().enumerate() {
            buf.as_mut_slice()[k * bs..(k + 1) * bs].copy_from_slice(bytes);
        }
        inner.io.write(Area::Image, inner.layout.offset_of(blocks[i].0), buf.as_slice())?;
        i += n;
    }
    Ok(())
}

/// Commits the in-memory state as generation G+1 with `state` (on a journaled volume: a
/// checkpoint). Any carrier failure poisons.
pub(crate) fn commit(inner: &Inner, meta: &mut Meta, state: VolumeState) -> Result<()> {
    inner.writable()?;
    commit_inner(inner, meta, state, false).inspect_err(|e| {
        if e.is_poisoning() {
            inner.poison(e);
        }
    })
}

/// Makes every change so far durable: one journal batch on a journaled volume (a checkpoint
/// when the batch does not fit the ring), a full commit otherwise.
pub(crate) fn commit_changes(inner: &Inner, meta: &mut Meta) -> Result<()> {
    if meta.ring.is_none() {
        return commit(inner, meta, VolumeState::Dirty);
    }
    inner.writable()?;
    journal_commit(inner, meta).inspect_err(|e| {
        if e.is_poisoning() {
            inner.poison(e);
        }
    })
}

fn journal_commit(inner: &Inner, meta: &mut Meta) -> Result<()> {
    let ops = meta.ns.journal.as_ref().map_or(0, Vec::len);
    if ops == 0 {
        // Nothing to record: data first, and blocks whose freeing records are durable
        // already (an orphan's, after its last handle closed) become reusable.
        flush_data(inner, meta)?;
        release_freed(inner, meta);
        return Ok(());
    }
    let payload = record::encode_batch(meta.ns.journal.as_deref().unwrap_or_default());
    let blocks = journal::blocks_for(payload.len(), inner.layout.block_size);
    if blocks > meta.ring.as_ref().expect("journaled").free() {
        return commit_inner(inner, meta, VolumeState::Dirty, true);
    }
    // Ordered mode: the data the records reference reaches the carrier first.
    flush_data(inner, meta)?;
    let ring = meta.ring.as_ref().expect("journaled");
    let runs = ring.seal(&inner.layout, &meta.sb.uuid, &payload);
    let session = inner.io.session()?;
    if inner.io.options.write_through {
        for (offset, buf) in &runs {
            session.write_durable(Area::Journal, *offset, buf.as_slice())?;
        }
    } else {
        for (offset, buf) in &runs {
            session.write(Area::Journal, *offset, buf.as_slice())?;
        }
        session.barrier()?;
    }
    drop(session);
    let ring = meta.ring.as_mut().expect("journaled");
    ring.advance(blocks);
    let fill = ring.used * 100 / ring.len;
    meta.ns.journal = Some(Vec::new());
    release_freed(inner, meta);
    if fill >= CHECKPOINT_FILL_PERCENT {
        // The background checkpointer did not keep up (records kept coming): this commit
        // checkpoints itself, so the next one finds room.
        commit_inner(inner, meta, VolumeState::Dirty, true)?;
    } else if fill >= super::checkpointer::FILL_PERCENT {
        super::checkpointer::kick(inner);
    }
    Ok(())
}

/// Fills the ring with filler blocks and makes them durable: the step that enables a
/// journal (at format, or offline on an existing volume), before the superblock that claims
/// the feature.
pub(crate) fn fill_ring(inner: &Inner, meta: &Meta) -> Result<()> {
    let ring = meta.ring.as_ref().expect("journaled");
    let (offset, buf) = ring.fillers(&inner.layout, &meta.sb.uuid);
    let session = inner.io.session()?;
    session.write(Area::Journal, offset, buf.as_slice())?;
    session.barrier()
}

/// The journal fields a checkpoint of `ring` stores; the sequence moves past the records
/// still queued, which the checkpoint's image contains.
fn checkpoint_fields(ring: &Ring, queued: bool) -> JournalFields {
    let flags = if ring.lost_from.is_some() { JOURNAL_LOSS } else { 0 };
    JournalFields {
        tail: ring.head(),
        sequence: ring.next_sequence + u64::from(queued),
        lost_from: ring.lost_from.unwrap_or(0),
        flags,
    }
}

/// `for_ring`: the checkpoint makes room in the journal ring (the next batch will reuse it).
fn commit_inner(inner: &Inner, meta: &mut Meta, state: VolumeState, for_ring: bool) -> Result<()> {
    // Data before metadata: buffered data writes still in the host's or the device's cache
    // get a barrier of their own first, so no superblock can become durable while the data
    // it references is not. Write-through data is durable already, and then a commit takes
    // exactly its two barriers.
    flush_data(inner, meta)?;
    let layout = inner.layout;
    // Room for the image first (a growth step is a flip of its own, generation G+1).
    grow(inner, meta, writer::blocks_needed(&meta.ns, layout.block_size as usize))?;
    let generation = meta.sb.generation + 1;
    let old_root = (meta.sb.generation > 0).then_some(meta.sb.root);
    let uuid = meta.sb.uuid;
    let mutation = inner.options.mutation();
    if mutation == Some(CommitMutation::ReuseFreedBlocksEarly) {
        release_freed(inner, meta);
    }
    let image = writer::write(&mut meta.ns, &mut meta.alloc, generation, &uuid, old_root)
        .inspect_err(|e| {
            if !matches!(e, Error::NoSpace) {
                inner.poison(e);
            }
        })?;
    if let Some(&(last, _)) = image.blocks.last() {
        ensure_carrier_len(inner, meta, last + 1)?;
    }
    let bs = layout.block_size as usize;
    let dirty_bitmap = meta.alloc.take_dirty_bitmap_blocks();
    let bitmap_checksum = if state == VolumeState::Clean {
        checksum::plain(&meta.alloc.live().encode((layout.bitmap.len as usize) * bs))
    } else {
        0
    };
    let mut sb = meta.sb.clone();
    sb.generation = generation;
    sb.root = image.root;
    sb.state = state;
    sb.bitmap_checksum = bitmap_checksum;
    let queued = meta.ns.journal.as_ref().is_some_and(|q| !q.is_empty());
    if let Some(ring) = &meta.ring {
        sb.journal = checkpoint_fields(ring, queued);
    }
    // The mutant frees the ring without waiting for the flip to be durable: the next batch
    // may then overwrite records that the superblock still on the medium needs.
    let hold_ring = !(for_ring && mutation == Some(CommitMutation::CheckpointFreesJournalEarly));
    let first = superblock::first_slot(generation);
    write_blocks(inner, &image.blocks)?;
    for block in dirty_bitmap {
        let words = bs / 8;
        let bytes = meta.alloc.live().encode_words(block as usize * words, words);
        inner.io.write(Area::Bitmap, layout.offset_of(layout.bitmap.start + block), &bytes)?;
    }
    let slot = Area::Superblock;
    inner.io.write(slot(first), superblock::slot_offset(first), &sb.encode(first))?;
    if mutation != Some(CommitMutation::SkipFirstBarrier) && hold_ring {
        barrier(inner)?;
    }
    inner.io.write(slot(1 - first), superblock::slot_offset(1 - first), &sb.encode(1 - first))?;
    if hold_ring {
        barrier(inner)?;
    }
    if let Some(ring) = &mut meta.ring {
        // Only now, with the new tail durable, may batches overwrite the old ones.
        *ring = Ring {
            tail: sb.journal.tail,
            used: 0,
            next_sequence: sb.journal.sequence,
            ..ring.clone()
        };
        meta.ns.journal = Some(Vec::new());
    }
    meta.sb = sb;
    meta.image_generation = generation;
    meta.last_checkpoint = std::time::Instant::now();
    release_freed(inner, meta);
    Ok(())
}

/// Auto-grow: when the volume may still grow and its allocator has fewer than `want` free
/// blocks (beyond the metadata reserve), doubles the bound (until `want` fits, at most to the
/// cap). Returns whether it grew.
///
/// 1. The carrier is extended to the new bound (zeros written unless sparse). **Barrier.**
/// 2. The last durable superblock, with the new `total_blocks` and nothing else changed (the
///    same image, the same journal tail), goes to both slots, generation G+1, each behind its
///    own barrier, as in a commit.
///
/// A crash before the first slot's barrier leaves the old bound (the other slot); after it,
/// the new bound, whose bitmap bits are zero, free, already (the bitmap is sized for the
/// cap). Nothing moves: journal records and extents keep their block numbers.
pub(crate) fn grow(inner: &Inner, meta: &mut Meta, want: u64) -> Result<bool> {
    let layout = meta.sb.layout;
    let need = want.saturating_add(crate::bitmap::META_RESERVE_BLOCKS);
    if !layout.can_grow() || meta.alloc.free_blocks() >= need {
        return Ok(false);
    }
    let mut total = layout.total_blocks;
    while total < layout.max_blocks
        && meta.alloc.free_blocks() + (total - layout.total_blocks) < need
    {
        total = total.saturating_mul(2).min(layout.max_blocks);
    }
    grow_to(inner, meta, total).inspect_err(|e| inner.poison(e))?;
    Ok(true)
}

fn grow_to(inner: &Inner, meta: &mut Meta, total: u64) -> Result<()> {
    let grown = meta.sb.layout.grown_to(total);
    let sparse = meta.sb.layout_flags & superblock::LAYOUT_SPARSE != 0;
    let session = inner.io.session()?;
    if meta.carrier_len < grown.capacity_bytes() {
        session.grow(meta.carrier_len, grown.capacity_bytes(), sparse)?;
        meta.carrier_len = grown.capacity_bytes();
    }
    session.barrier()?;
    let mut sb = meta.sb.clone();
    sb.generation += 1;
    sb.layout = grown;
    sb.members[0].capacity_blocks = total;
    sb.state = VolumeState::Dirty;
    sb.bitmap_checksum = 0;
    let first = superblock::first_slot(sb.generation);
    session.write(Area::Superblock(first), superblock::slot_offset(first), &sb.encode(first))?;
    session.barrier()?;
    let second = 1 - first;
    session.write(Area::Superblock(second), superblock::slot_offset(second), &sb.encode(second))?;
    session.barrier()?;
    drop(session);
    tracing::info!(
        from_blocks = meta.sb.layout.total_blocks,
        to_blocks = total,
        max_blocks = grown.max_blocks,
        "volume grew"
    );
    meta.sb = sb;
    meta.alloc.grow(grown);
    Ok(())
}
