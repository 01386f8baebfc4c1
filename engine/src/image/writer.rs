//! Writing the image of a commit: dirty record blocks to new addresses, the spines of the
//! tables that moved, and a new root block.
//!
//! Nothing here touches the carrier: the result is a list of sealed blocks that the commit
//! protocol writes ahead of its first barrier. Old addresses are freed with
//! `Hold::UntilCommit`, so they are not reused before this commit is durable.

use crate::bitmap::{Allocator, Hold};
use crate::chain::{self, BlockHeader, BlockKind, SPINE_ENTRY_LEN, Table};
use crate::error::{Error, Result};
use crate::format::codec::Writer;
use crate::format::consts::Uuid;
use crate::layout::BlockRange;
use crate::namespace::Namespace;
use crate::superblock::BlockRef;

use super::{ROOT_RESERVED_AT, TABLE_ROOTS_AT};

/// Sealed blocks to write, in address order, and the new root.
pub struct ImageWrite {
    pub blocks: Vec<(u64, Vec<u8>)>,
    pub root: BlockRef,
}

/// Metadata blocks the next image write will allocate (checked before anything changes, so
/// a full volume fails the commit cleanly instead of half-way).
pub fn blocks_needed(ns: &Namespace, block_size: usize) -> u64 {
    let eps = chain::entries_per_spine(block_size) as u64;
    let mut n = 1; // root
    for t in &ns.tables {
        n += t.blocks.iter().filter(|b| b.dirty).count() as u64;
        if t.is_dirty() {
            n += (t.blocks.len() as u64).div_ceil(eps);
        }
    }
    n
}

fn free_ref(alloc: &mut Allocator, r: BlockRef) {
    alloc.free(BlockRange { start: r.block, len: 1 }, Hold::UntilCommit);
}

fn write_records(
    t: &mut Table,
    alloc: &mut Allocator,
    ctx: &Ctx<'_>,
    out: &mut Vec<(u64, Vec<u8>)>,
) -> Result<()> {
    for freed in t.trim() {
        free_ref(alloc, freed);
    }
    for i in 0..t.blocks.len() {
        if !t.blocks[i].dirty {
            continue;
        }
        let addr = alloc.alloc_meta()?;
        let mut block = vec![0u8; ctx.block_size];
        let records = t.block_records(i);
        block[chain::PAYLOAD_AT..chain::PAYLOAD_AT + records.len()].copy_from_slice(records);
        let header = BlockHeader {
            kind: BlockKind::Records,
            table: t.id as u16,
            generation: ctx.generation,
            count: t.per_block as u32,
            record_len: t.record_len as u16,
            next: BlockRef::default(),
        };
        let at = chain::seal(&mut block, addr, ctx.uuid, &header);
        if let Some(old) = t.blocks[i].committed.replace(at) {
            free_ref(alloc, old);
        }
        t.blocks[i].dirty = false;
        t.spine_dirty = true;
        out.push((addr, block));
    }
    Ok(())
}

fn write_spine(
    t: &mut Table,
    alloc: &mut Allocator,
    ctx: &Ctx<'_>,
    out: &mut Vec<(u64, Vec<u8>)>,
) -> Result<()> {
    if !t.spine_dirty {
        return Ok(());
    }
    for old in std::mem::take(&mut t.spine) {
        free_ref(alloc, old);
    }
    let entries: Vec<(BlockRef, u32)> = t
        .blocks
        .iter()
        .map(|b| (b.committed.expect("every record block was just written"), b.live))
        .collect();
    let chunks: Vec<&[(BlockRef, u32)]> =
        entries.chunks(chain::entries_per_spine(ctx.block_size)).collect();
    let addrs = (0..chunks.len()).map(|_| alloc.alloc_meta()).collect::<Result<Vec<u64>>>()?;
    // Seal from the tail: each spine block carries its successor's checksum.
    let mut next = BlockRef::default();
    let mut spine = Vec::with_capacity(chunks.len());
    for (chunk, &addr) in chunks.iter().zip(&addrs).rev() {
        let mut block = vec![0u8; ctx.block_size];
        let mut w = Writer::new(
            &mut block[chain::PAYLOAD_AT..chain::PAYLOAD_AT + chunk.len() * SPINE_ENTRY_LEN],
        );
        for (r, live) in *chunk {
            w.u64_le(r.block);
            w.u32_le(r.checksum);
            w.u32_le(*live);
        }
        let header = BlockHeader {
            kind: BlockKind::Spine,
            table: t.id as u16,
            generation: ctx.generation,
            count: chunk.len() as u32,
            record_len: 0,
            next,
        };
        next = chain::seal(&mut block, addr, ctx.uuid, &header);
        spine.push(next);
        out.push((addr, block));
    }
    spine.reverse();
    t.spine = spine;
    t.spine_dirty = false;
    Ok(())
}

struct Ctx<'a> {
    block_size: usize,
    generation: u64,
    uuid: &'a Uuid,
}

/// Builds the image of `ns` for commit `generation`, replacing `old_root`.
pub fn write(
    ns: &mut Namespace,
    alloc: &mut Allocator,
    generation: u64,
    uuid: &Uuid,
    old_root: Option<BlockRef>,
) -> Result<ImageWrite> {
    let block_size = ns.block_size as usize;
    if blocks_needed(ns, block_size) > alloc.free_blocks() {
        return Err(Error::NoSpace);
    }
    let ctx = Ctx { block_size, generation, uuid };
    let mut blocks = Vec::new();
    for t in &mut ns.tables {
        write_records(t, alloc, &ctx, &mut blocks)?;
        write_spine(t, alloc, &ctx, &mut blocks)?;
    }
    let addr = alloc.alloc_meta()?;
    let mut block = vec![0u8; block_size];
    {
        let mut w = Writer::new(&mut block[chain::PAYLOAD_AT..ROOT_RESERVED_AT]);
        w.u64_le(ns.next_ino);
        w.u64_le(ns.next_attr_id);
        w.assert_at(TABLE_ROOTS_AT - chain::PAYLOAD_AT);
        for t in &ns.tables {
            let head = t.spine.first().copied().unwrap_or_default();
            w.u64_le(head.block);
            w.u32_le(head.checksum);
            w.u16_le(t.record_len as u16);
            w.u16_le(t.id as u16);
            w.u64_le(t.blocks.len() as u64);
            w.u64_le(t.live_records());
        }
    }
    let header = BlockHeader {
        kind: BlockKind::Root,
        table: 0,
        generation,
        count: 4,
        record_len: 0,
        next: BlockRef::default(),
    };
    let root = chain::seal(&mut block, addr, uuid, &header);
    if let Some(old) = old_root {
        free_ref(alloc, old);
    }
    blocks.push((addr, block));
    blocks.sort_by_key(|(a, _)| *a);
    Ok(ImageWrite { blocks, root })
}
