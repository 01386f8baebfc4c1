//! The checkpoint: the copy-on-write image and two superblock flips (FORMAT.md, "Commit
//! protocol"). Without a journal every commit is one; with a journal it runs when the ring
//! fills, in the background, at open and at close, and stores where the ring's first batch
//! after it begins.
//!
//! 1. Data is already on the carrier (`commit::flush_data`: dirty pages written back, a
//!    barrier for plain data writes), and only attached extents are in the image.
//! 2. The dirty metadata goes copy-on-write into new blocks (record blocks, spines, root).
//! 3. The changed bitmap blocks are written in place (the bitmap is authoritative only for a
//!    clean volume whose checksum matches, so a torn bitmap write costs nothing).
//! 4. The superblock of generation G+1 goes to slot `(G+1) mod 2`. **Barrier.** Everything of
//!    G+1 is now durable, and that slot may be adopted.
//! 5. The same superblock goes to the other slot. **Barrier.**
//!
//! Two barriers, whatever changed (a third one first only when buffered data writes are
//! outstanding). A crash before the first barrier completes leaves the other slot at G (its
//! image untouched: freed blocks are reused only after the commit that freed them
//! completed); adoption passes over a first-written slot whose image did not land. A crash
//! between the barriers leaves one slot at G+1, durable. Ring space after the old tail is
//! reused only after step 5's barrier.
//!
//! Invariants (asserted before the flip): the generation moves forward by exactly one, the
//! journal sequence never moves back, and the superblock's own encoder checks its fields.
//! [`flip`] is the one place that writes both slots; growth uses it too.

use std::collections::BTreeSet;

use super::{CommitMutation, Inner, Meta, commit, grow};
use crate::bitmap::Bitmap;
use crate::error::{Error, Result};
use crate::format::checksum;
use crate::format::consts::SUPERBLOCK_LEN;
use crate::image::writer;
use crate::io::{Area, Io, Session};
use crate::layout::{MemberSpan, VolumeGeometry};
use crate::superblock::{self, Superblock, VolumeState};

/// Which barriers of a flip are taken (the mutants skip one; production takes both).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Barriers {
    pub(crate) first: bool,
    pub(crate) second: bool,
}

impl Barriers {
    pub(crate) const BOTH: Barriers = Barriers { first: true, second: true };
}

/// Writes `sb` to slot `(G+1) mod 2`, then to the other one, each followed by its barrier:
/// the commit point of a checkpoint and of a growth step.
pub(crate) fn flip(session: &Session<'_>, sb: &Superblock, barriers: Barriers) -> Result<()> {
    assert!(sb.generation >= 1, "generation 0 is never written");
    let first = superblock::first_slot(sb.generation);
    for (slot, barrier) in [(first, barriers.first), (1 - first, barriers.second)] {
        let mut buf = Io::buffer(SUPERBLOCK_LEN);
        buf.as_mut_slice().copy_from_slice(&sb.encode(slot));
        session.write(Area::Superblock(slot), superblock::slot_offset(slot), buf.as_slice())?;
        if barrier {
            session.barrier()?;
        }
    }
    Ok(())
}

/// A checkpoint with `state`, for callers outside a commit (open, close, the background
/// checkpointer, `Volume::checkpoint`). Any carrier failure poisons.
pub(crate) fn checkpoint(inner: &Inner, meta: &mut Meta, state: VolumeState) -> Result<()> {
    inner.writable()?;
    let since = inner.io.errors();
    run(inner, meta, state, since).inspect_err(|e| {
        if e.is_poisoning() {
            inner.poison(e);
        }
    })?;
    commit::check_invariants(meta);
    Ok(())
}

/// The checkpoint of a commit (`since`: the error sequence when the commit started).
pub(crate) fn run(inner: &Inner, meta: &mut Meta, state: VolumeState, since: u64) -> Result<()> {
    write(inner, meta, state, since, false)
}

/// A checkpoint that makes room in the journal ring (the next batch will reuse it).
pub(crate) fn run_for_ring(inner: &Inner, meta: &mut Meta, since: u64) -> Result<()> {
    write(inner, meta, VolumeState::Dirty, since, true)
}

fn write(
    inner: &Inner,
    meta: &mut Meta,
    state: VolumeState,
    since: u64,
    for_ring: bool,
) -> Result<()> {
    // Data before metadata: buffered data writes still in the host's or the device's cache
    // get a barrier of their own first, so no superblock can become durable while the data
    // it references is not. Write-through data is durable already, and then a checkpoint
    // takes exactly its two barriers.
    commit::flush_data(inner, meta, since)?;
    let layout = inner.layout;
    let bs = layout.block_size as usize;
    // Room for the image first (a growth step is a flip of its own, generation G+1).
    grow::grow(inner, meta, writer::blocks_needed(&meta.ns, layout.block_size as usize))?;
    let generation = meta.sb.generation + 1;
    let old_root = (meta.sb.generation > 0).then_some(meta.sb.root);
    let uuid = meta.sb.uuid;
    let mutation = inner.options.mutation();
    if mutation == Some(CommitMutation::ReuseFreedBlocksEarly) {
        commit::release_freed(inner, meta);
    }
    let image = writer::write(&mut meta.ns, &mut meta.alloc, generation, &uuid, old_root)
        .inspect_err(|e| {
            if !matches!(e, Error::NoSpace) {
                inner.poison(e);
            }
        })?;
    if let Some(&(last, _)) = image.blocks.last() {
        grow::ensure_carrier_len(inner, meta, last + 1)?;
    }
    let geometry = meta.sb.geometry();
    let dirty_bitmap = bitmap_writes(&geometry, &meta.alloc.take_dirty_bitmap_blocks());
    let bitmap_checksum = if state == VolumeState::Clean {
        let mut crc = 0;
        for span in &geometry.spans {
            let bytes = member_bitmap(meta.alloc.live(), span, 0, span.layout.bitmap.len);
            crc = checksum::plain_append(crc, &bytes);
        }
        crc
    } else {
        0
    };
    let mut sb = meta.sb.clone();
    sb.generation = generation;
    sb.root = image.root;
    sb.state = state;
    sb.bitmap_checksum = bitmap_checksum;
    let queued = meta.ns.journal.as_ref().is_some_and(|q| !q.is_empty());
    if let Some(ring) = meta.journal.ring() {
        sb.journal = ring.checkpoint_fields(queued);
        assert!(sb.journal.sequence >= meta.sb.journal.sequence, "journal sequence moves back");
    }
    assert_eq!(sb.generation, meta.sb.generation + 1, "a checkpoint is the next generation");
    // The mutant frees the ring without waiting for the flip to be durable: the next batch
    // may then overwrite records that the superblock still on the medium needs.
    let hold_ring = !(for_ring && mutation == Some(CommitMutation::CheckpointFreesJournalEarly));
    let barriers = Barriers {
        first: hold_ring && mutation != Some(CommitMutation::SkipFirstBarrier),
        second: hold_ring,
    };
    {
        let session = inner.io.session()?;
        write_blocks(&session, inner, &image.blocks)?;
        for (member, block) in dirty_bitmap {
            let span = &geometry.spans[member];
            let mut buf = Io::buffer(bs);
            buf.as_mut_slice().copy_from_slice(&member_bitmap(meta.alloc.live(), span, block, 1));
            let at = (span.base + span.layout.bitmap.start + block) * bs as u64;
            session.write(Area::Bitmap, at, buf.as_slice())?;
        }
        flip(&session, &sb, barriers)?;
    }
    if let Some(ring) = meta.journal.ring_mut() {
        // Only now, with the new tail durable, may batches overwrite the old ones.
        ring.checkpointed(&sb.journal);
        meta.ns.journal = Some(Vec::new());
    }
    meta.sb = sb;
    meta.image_generation = generation;
    meta.last_checkpoint = std::time::Instant::now();
    commit::release_freed(inner, meta);
    Ok(())
}

/// Writes sealed image blocks, one carrier call per run of consecutive addresses.
fn write_blocks(session: &Session<'_>, inner: &Inner, blocks: &[(u64, Vec<u8>)]) -> Result<()> {
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
        session.write(Area::Image, blocks[i].0 * bs as u64, buf.as_slice())?;
        i += n;
    }
    Ok(())
}

/// The on-disk bytes of `blocks` blocks of `span`'s bitmap region from its block `first`:
/// the member's share of the volume's bitmap, zero past the member's blocks.
fn member_bitmap(live: &Bitmap, span: &MemberSpan, first: u64, blocks: u64) -> Vec<u8> {
    let bits_per_block = u64::from(span.layout.block_size) * 8;
    let from = first * bits_per_block;
    let bits = span.layout.total_blocks.saturating_sub(from).min(blocks * bits_per_block);
    let len = (blocks * u64::from(span.layout.block_size)) as usize;
    live.encode_span(span.base + from, bits, len)
}

/// The bitmap-region blocks `(member, block of its region)` that the allocator's dirty blocks
/// of the volume-wide bitmap touch (a volume-wide bitmap block may cover two members: their
/// spans are aligned to 64 blocks, not to a bitmap block).
fn bitmap_writes(geometry: &VolumeGeometry, dirty: &[u64]) -> BTreeSet<(usize, u64)> {
    let bits_per_block = u64::from(geometry.spans[0].layout.block_size) * 8;
    let mut out = BTreeSet::new();
    for &g in dirty {
        let (lo, hi) = (g * bits_per_block, (g + 1) * bits_per_block);
        for (k, span) in geometry.spans.iter().enumerate() {
            let (from, to) = (lo.max(span.base), hi.min(span.end()));
            if from < to {
                let first = (from - span.base) / bits_per_block;
                let last = (to - 1 - span.base) / bits_per_block;
                out.extend((first..=last).map(|b| (k, b)));
            }
        }
    }
    out
}
