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

use super::{CommitMutation, Inner, Meta};
use crate::error::{Error, Result};
use crate::format::checksum;
use crate::image::writer;
use crate::io::{Area, Io};
use crate::superblock::{self, VolumeState};

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

/// Commits the in-memory state as generation G+1 with `state`. Any carrier failure poisons.
pub(crate) fn commit(inner: &Inner, meta: &mut Meta, state: VolumeState) -> Result<()> {
    inner.writable()?;
    commit_inner(inner, meta, state).inspect_err(|e| {
        if e.is_poisoning() {
            inner.poison(e);
        }
    })
}

fn commit_inner(inner: &Inner, meta: &mut Meta, state: VolumeState) -> Result<()> {
    // Data before metadata: buffered data writes still in the host's or the device's cache
    // get a barrier of their own first, so no superblock can become durable while the data
    // it references is not. Write-through data is durable already, and then a commit takes
    // exactly its two barriers.
    flush_data(inner, meta)?;
    let layout = inner.layout;
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
    let first = superblock::first_slot(generation);
    write_blocks(inner, &image.blocks)?;
    for block in dirty_bitmap {
        let words = bs / 8;
        let bytes = meta.alloc.live().encode_words(block as usize * words, words);
        inner.io.write(Area::Bitmap, layout.offset_of(layout.bitmap.start + block), &bytes)?;
    }
    let slot = Area::Superblock;
    inner.io.write(slot(first), superblock::slot_offset(first), &sb.encode(first))?;
    if mutation != Some(CommitMutation::SkipFirstBarrier) {
        barrier(inner)?;
    }
    inner.io.write(slot(1 - first), superblock::slot_offset(1 - first), &sb.encode(1 - first))?;
    barrier(inner)?;
    meta.sb = sb;
    release_freed(inner, meta);
    Ok(())
}
