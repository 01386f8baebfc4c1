//! Growth: a thin carrier extended toward the capacity, and auto-grow of the capacity itself
//! (FORMAT.md, "Auto-grow"). The data path calls here when the allocator runs out; growth
//! never goes through the commit protocol, only through its own flip ([`checkpoint::flip`]).
//!
//! A growth step (auto-grow), when the volume may grow and its allocator has fewer free
//! blocks than asked:
//! 1. The carrier is extended to the new bound (zeros written unless sparse). **Barrier.**
//! 2. The last durable superblock, with the new `total_blocks` and nothing else changed (the
//!    same image, the same journal tail), goes to both slots, generation G+1, each behind its
//!    own barrier, as in a checkpoint.
//!
//! A crash before the first slot's barrier leaves the old bound (the other slot); after it,
//! the new bound, whose bitmap bits are zero, free, already (the bitmap is sized for the
//! cap). Nothing moves: journal records and extents keep their block numbers, and the commit
//! id does not change.
//!
//! Invariants (asserted): the bound only grows, never past the cap; the generation moves by
//! exactly one; the carrier is as long as the new bound before the flip that claims it.

use super::checkpoint::{self, Barriers};
use super::{Inner, Meta};
use crate::error::Result;
use crate::superblock::{self, VolumeState};

/// Grows a thin carrier so that every block below `end_block` exists.
pub(crate) fn ensure_carrier_len(inner: &Inner, meta: &mut Meta, end_block: u64) -> Result<()> {
    if meta.sb.carrier_count > 1 {
        // Several members: every one preallocated, whole (FORMAT.md, "Members").
        return Ok(());
    }
    let layout = &inner.layout;
    let need = end_block * u64::from(layout.block_size);
    if need <= meta.carrier_len {
        return Ok(());
    }
    // Grow by doubling (at least 1 MiB), capped at the capacity: few grows, bounded waste.
    let target =
        need.max(meta.carrier_len.saturating_mul(2)).max(1 << 20).min(layout.capacity_bytes());
    assert!(target >= need, "a carrier grown to {target} bytes cannot hold block {end_block}");
    let sparse = meta.sb.layout_flags & superblock::LAYOUT_SPARSE != 0;
    inner.io.session()?.grow(meta.carrier_len, target, sparse)?;
    meta.carrier_len = target;
    Ok(())
}

/// Auto-grow: when the volume may still grow and its allocator has fewer than `want` free
/// blocks (beyond the metadata reserve), doubles the bound (until `want` fits, at most to the
/// cap). Returns whether it grew. A failure poisons.
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

pub(crate) fn grow_to(inner: &Inner, meta: &mut Meta, total: u64) -> Result<()> {
    let old = meta.sb.layout;
    assert!(total > old.total_blocks, "growth to {total} blocks from {}", old.total_blocks);
    assert!(total <= old.max_blocks, "growth to {total} blocks past the cap {}", old.max_blocks);
    let grown = old.grown_to(total);
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
    checkpoint::flip(&session, &sb, Barriers::BOTH)?;
    drop(session);
    tracing::info!(
        from_blocks = old.total_blocks,
        to_blocks = total,
        max_blocks = grown.max_blocks,
        "volume grew"
    );
    meta.sb = sb;
    meta.alloc.grow(grown);
    Ok(())
}
