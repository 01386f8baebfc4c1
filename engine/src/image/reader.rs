//! Loading an image: walk root -> spines -> record blocks, verifying each checksum link,
//! then rebuild the namespace from the records and refuse anything that is not a valid tree.
//!
//! Every metadata block and every extent is entered into the reachable set as it is found;
//! a block claimed twice, or outside the allocatable regions, refuses the image. The
//! reachable set is what a dirty volume's bitmap is rebuilt from.

use std::collections::{BTreeMap, HashMap};

use crate::bitmap::{Allocator, Bitmap};
use crate::io::AlignedBuf;
use crate::chain::{self, BlockKind, SPINE_ENTRY_LEN, Table, TableId};
use crate::error::{Corruption, Error, Region, Result};
use crate::format::codec::Reader;
use crate::format::consts::{ROOT_INO, Uuid};
use crate::io::{Area, AreaRead, Io};
use crate::layout::Layout;
use crate::namespace::{Attr, Child, Extent, Inode, Namespace};
use crate::records::{self, AttrPart, DirentRecord, ExtentRecord, InodeKind, InodeRecord};
use crate::superblock::{BlockRef, Superblock};

use super::{ROOT_RESERVED_AT, TABLE_ROOTS_AT};

/// A loaded image: the namespace and every block it reaches.
pub struct LoadedImage {
    pub namespace: Namespace,
    /// The commit that wrote the image (its root block's generation; a superblock flip that
    /// only grew the volume has a higher one).
    pub generation: u64,
    pub reachable: Bitmap,
    /// Metadata blocks (root, spines, record blocks) of the image.
    pub metadata_blocks: u64,
}

/// A spine entry: a record block and its live record count.
type SpineEntry = (BlockRef, u32);

/// Most record blocks read in one carrier call when they are contiguous.
const MAX_RUN_BLOCKS: usize = 256;

/// Reads of record blocks in flight at once, at most, when there are many.
const READ_THREADS: usize = 8;

/// Fewer reads than this go out one after another (threads would cost more than they save).
const PARALLEL_READS_FROM: usize = 16;

/// Record-block reads held in memory at once (each up to [`MAX_RUN_BLOCKS`] blocks).
const WINDOW_RUNS: usize = 64;

struct Loader<'a> {
    reader: &'a dyn AreaRead,
    layout: Layout,
    uuid: Uuid,
    generation: u64,
    reachable: Bitmap,
    metadata_blocks: u64,
}

fn image_error(offset: u64, reason: Corruption) -> Error {
    Error::corrupt(Region::Image, offset, reason)
}

impl Loader<'_> {
    fn claim(&mut self, block: u64) -> Result<()> {
        let offset = block.saturating_mul(u64::from(self.layout.block_size));
        if !self.layout.allocatable().contains(block) {
            return Err(image_error(offset, Corruption::OutOfRange { block }));
        }
        if self.reachable.get(block) {
            return Err(image_error(offset, Corruption::DoubleUse { block }));
        }
        self.reachable.set(block);
        Ok(())
    }

    fn read(&self, first: u64, blocks: usize) -> Result<AlignedBuf> {
        let bs = self.layout.block_size as usize;
        let mut buf = Io::buffer(blocks * bs);
        let offset = self.layout.offset_of(first);
        self.reader.read_in(Some(&self.layout), Area::Image, offset, buf.as_mut_slice())?;
        Ok(buf)
    }

    /// Reads each of `reads` (first block, blocks): one result per read, in order, so that
    /// the caller meets a read's error where it met it reading one run at a time (a damaged
    /// block before it still refuses first, which adoption may fall back from; a read error
    /// never is). Many of them go out from a few threads at once: a copy-on-write image's
    /// record blocks lie scattered over the volume, and read one after another each waits for
    /// the one before (a volume of a thousand files took 120 reads, 9 ms, to open, against
    /// 2 ms for a few files).
    fn read_runs(&self, reads: &[(u64, usize)]) -> Vec<Result<AlignedBuf>> {
        let read_part = |part: &[(u64, usize)]| -> Vec<Result<AlignedBuf>> {
            part.iter().map(|&(first, n)| self.read(first, n)).collect()
        };
        if reads.len() < PARALLEL_READS_FROM {
            return read_part(reads);
        }
        let per_thread = reads.len().div_ceil(READ_THREADS);
        std::thread::scope(|scope| {
            let workers: Vec<_> =
                reads.chunks(per_thread).map(|part| scope.spawn(move || read_part(part))).collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    }

    /// Reads, claims and verifies one metadata block of `kind` (and `table`).
    fn metadata_block(
        &mut self,
        at: BlockRef,
        bytes: &[u8],
        kind: BlockKind,
        table: u16,
    ) -> Result<chain::BlockHeader> {
        let offset = self.layout.offset_of(at.block);
        let header = chain::open_block(bytes, at, &self.uuid, offset)?;
        if header.kind != kind {
            return Err(image_error(
                offset,
                Corruption::BadValue { field: "block kind", value: header.kind as u64 },
            ));
        }
        if header.table != table {
            return Err(image_error(
                offset,
                Corruption::BadValue { field: "block table", value: u64::from(header.table) },
            ));
        }
        if header.generation == 0 || header.generation > self.generation {
            return Err(image_error(
                offset,
                Corruption::BadValue { field: "block generation", value: header.generation },
            ));
        }
        self.metadata_blocks += 1;
        Ok(header)
    }

    /// Walks a table's spine; returns its entries and the spine blocks themselves.
    fn spine(
        &mut self,
        table: TableId,
        head: BlockRef,
        blocks: u64,
    ) -> Result<(Vec<SpineEntry>, Vec<BlockRef>)> {
        let bs = self.layout.block_size as usize;
        let eps = chain::entries_per_spine(bs) as u64;
        let mut entries = Vec::new();
        let mut spine = Vec::new();
        let mut next = head;
        while next.block != 0 {
            spine.push(next);
            if entries.len() as u64 >= blocks {
                // More spine blocks than the root declared: a cycle or a forged chain.
                return Err(image_error(
                    self.layout.offset_of(next.block.min(self.layout.total_blocks - 1)),
                    Corruption::BadValue { field: "spine length", value: blocks },
                ));
            }
            self.claim(next.block)?;
            let buf = self.read(next.block, 1)?;
            let header =
                self.metadata_block(next, buf.as_slice(), BlockKind::Spine, table as u16)?;
            let count = u64::from(header.count);
            if count == 0 || count > eps || header.record_len != 0 {
                return Err(image_error(
                    self.layout.offset_of(next.block),
                    Corruption::BadValue { field: "spine count", value: count },
                ));
            }
            let payload = &buf.as_slice()[chain::PAYLOAD_AT..bs - chain::TRAILER_LEN];
            let mut r = Reader::new(
                payload,
                Region::Image,
                self.layout.offset_of(next.block) + chain::PAYLOAD_AT as u64,
            );
            for _ in 0..count {
                let r_ref = BlockRef { block: r.u64_le()?, checksum: r.u32_le()? };
                entries.push((r_ref, r.u32_le()?));
            }
            r.expect_zero(payload.len() - count as usize * SPINE_ENTRY_LEN, "spine padding")?;
            if header.next.block == 0 && header.next.checksum != 0 {
                return Err(Error::Unsupported(crate::error::Unsupported::ReservedNonZero {
                    field: "spine next",
                }));
            }
            next = header.next;
        }
        if entries.len() as u64 != blocks {
            return Err(image_error(
                self.layout.offset_of(head.block.max(1).min(self.layout.total_blocks - 1)),
                Corruption::BadValue { field: "table blocks", value: blocks },
            ));
        }
        Ok((entries, spine))
    }

    fn table(&mut self, id: TableId, head: BlockRef, blocks: u64, records: u64) -> Result<Table> {
        let bs = self.layout.block_size as usize;
        let mut table = Table::new(id, bs);
        if blocks == 0 {
            if head != BlockRef::default() || records != 0 {
                return Err(image_error(
                    0,
                    Corruption::BadValue { field: "empty table", value: records },
                ));
            }
            return Ok(table);
        }
        let (entries, spine) = self.spine(id, head, blocks)?;
        table.spine = spine;
        for &(r, _) in &entries {
            self.claim(r.block)?;
        }
        // Contiguous record blocks are read with one call each (entry index, blocks).
        let mut runs = Vec::new();
        let mut i = 0;
        while i < entries.len() {
            let mut n = 1;
            while i + n < entries.len()
                && n < MAX_RUN_BLOCKS
                && entries[i + n].0.block == entries[i].0.block + n as u64
            {
                n += 1;
            }
            runs.push((i, n));
            i += n;
        }
        for window in runs.chunks(WINDOW_RUNS) {
            let reads: Vec<(u64, usize)> =
                window.iter().map(|&(i, n)| (entries[i].0.block, n)).collect();
            for (&(i, n), buf) in window.iter().zip(self.read_runs(&reads)) {
                let buf = buf?;
                for k in 0..n {
                    let (at, live) = entries[i + k];
                    let bytes = &buf.as_slice()[k * bs..(k + 1) * bs];
                    self.record_block(&mut table, at, live, bytes)?;
                }
            }
        }
        if table.live_records() != records {
            return Err(image_error(
                self.layout.offset_of(head.block),
                Corruption::BadValue { field: "table records", value: records },
            ));
        }
        Ok(table)
    }

    fn record_block(
        &mut self,
        table: &mut Table,
        at: BlockRef,
        live: u32,
        bytes: &[u8],
    ) -> Result<()> {
        let offset = self.layout.offset_of(at.block);
        let header = self.metadata_block(at, bytes, BlockKind::Records, table.id as u16)?;
        if header.count as usize != table.per_block
            || usize::from(header.record_len) != table.record_len
            || header.next != BlockRef::default()
        {
            return Err(image_error(
                offset,
                Corruption::BadValue {
                    field: "record block header",
                    value: u64::from(header.count),
                },
            ));
        }
        let used = table.per_block * table.record_len;
        let payload = &bytes[chain::PAYLOAD_AT..chain::PAYLOAD_AT + used];
        let mut count = 0;
        for rec in payload.chunks(table.record_len) {
            if rec[..2] == [0, 0] {
                records::check_free(rec, table.id.name())?;
            } else {
                count += 1;
            }
        }
        if count != live {
            return Err(image_error(
                offset,
                Corruption::BadValue { field: "live records", value: u64::from(live) },
            ));
        }
        let tail = &bytes[chain::PAYLOAD_AT + used..bytes.len() - chain::TRAILER_LEN];
        records::check_free(tail, "record block padding")?;
        table.push_committed_block(at, payload);
        Ok(())
    }
}

/// Loads the image `sb` points to.
pub(crate) fn load(reader: &dyn AreaRead, sb: &Superblock) -> Result<LoadedImage> {
    let geometry = sb.geometry();
    let layout = geometry.layout();
    let mut loader = Loader {
        reader,
        layout,
        uuid: sb.uuid,
        generation: sb.generation,
        reachable: Allocator::fixed_regions(&geometry),
        metadata_blocks: 0,
    };
    loader.claim(sb.root.block)?;
    let buf = loader.read(sb.root.block, 1)?;
    let bytes = buf.as_slice();
    let header = loader.metadata_block(sb.root, bytes, BlockKind::Root, 0)?;
    let image_generation = header.generation;
    let root_offset = layout.offset_of(sb.root.block);
    if header.count != 4 || header.record_len != 0 || header.next != BlockRef::default() {
        return Err(image_error(
            root_offset,
            Corruption::BadValue { field: "root header", value: u64::from(header.count) },
        ));
    }
    let mut r = Reader::new(
        &bytes[chain::PAYLOAD_AT..ROOT_RESERVED_AT],
        Region::Image,
        root_offset + chain::PAYLOAD_AT as u64,
    );
    let next_ino = r.u64_le()?;
    let next_attr_id = r.u64_le()?;
    debug_assert_eq!(r.position() + chain::PAYLOAD_AT, TABLE_ROOTS_AT);
    let mut roots = Vec::new();
    for id in TableId::ALL {
        let head = BlockRef { block: r.u64_le()?, checksum: r.u32_le()? };
        let record_len = r.u16_le()?;
        let table = r.u16_le()?;
        if usize::from(record_len) != id.record_len() || table != id as u16 {
            return Err(r.bad_value("table root", u64::from(table)));
        }
        roots.push((id, head, r.u64_le()?, r.u64_le()?));
    }
    records::check_free(
        &bytes[ROOT_RESERVED_AT..bytes.len() - chain::TRAILER_LEN],
        "root reserved",
    )?;
    let mut tables = Vec::new();
    for (id, head, blocks, recs) in roots {
        tables.push(loader.table(id, head, blocks, recs)?);
    }
    let tables: [Table; 4] = tables.try_into().map_err(|_| {
        image_error(root_offset, Corruption::BadValue { field: "tables", value: 0 })
    })?;
    let namespace =
        build_namespace(tables, next_ino, next_attr_id, layout.block_size, &mut loader)?;
    Ok(LoadedImage {
        namespace,
        generation: image_generation,
        reachable: loader.reachable,
        metadata_blocks: loader.metadata_blocks,
    })
}

fn dangling(what: &'static str, id: u64) -> Error {
    image_error(0, Corruption::Dangling { what, id })
}

fn duplicate(what: &'static str, id: u64) -> Error {
    image_error(0, Corruption::Duplicate { what, id })
}

/// Rebuilds the namespace from decoded tables and checks that it is a tree.
fn build_namespace(
    tables: [Table; 4],
    next_ino: u64,
    next_attr_id: u64,
    block_size: u32,
    loader: &mut Loader<'_>,
) -> Result<Namespace> {
    let [inodes_t, dirents_t, extents_t, attrs_t] = &tables;
    let mut inodes: HashMap<u64, Inode> = HashMap::new();
    for (slot, bytes) in inodes_t.records() {
        let rec = InodeRecord::decode(bytes, 0)?;
        if rec.ino >= next_ino {
            return Err(image_error(
                0,
                Corruption::BadValue { field: "next_ino", value: next_ino },
            ));
        }
        let inode = Inode {
            ino: rec.ino,
            kind: rec.kind,
            size: rec.size,
            created_ns: rec.created_ns,
            modified_ns: rec.modified_ns,
            slot,
            extents: BTreeMap::new(),
            attrs: BTreeMap::new(),
            children: BTreeMap::new(),
            parent: 0,
            name: Vec::new(),
        };
        if inodes.insert(rec.ino, inode).is_some() {
            return Err(duplicate("inode", rec.ino));
        }
    }
    match inodes.get(&ROOT_INO) {
        Some(root) if root.kind == InodeKind::Directory => {}
        _ => return Err(dangling("root directory", ROOT_INO)),
    }
    for (slot, bytes) in dirents_t.records() {
        let d = DirentRecord::decode(bytes, 0)?;
        if d.child == ROOT_INO {
            return Err(image_error(0, Corruption::NotATree { ino: ROOT_INO }));
        }
        let child = inodes.get_mut(&d.child).ok_or_else(|| dangling("dirent child", d.child))?;
        if child.parent != 0 {
            return Err(duplicate("dirent for inode", d.child));
        }
        child.parent = d.parent;
        child.name.clone_from(&d.name);
        let parent =
            inodes.get_mut(&d.parent).ok_or_else(|| dangling("dirent parent", d.parent))?;
        if parent.kind != InodeKind::Directory {
            return Err(image_error(0, Corruption::NotATree { ino: d.parent }));
        }
        if parent.children.insert(d.name, Child { ino: d.child, slot }).is_some() {
            return Err(duplicate("name in directory", d.parent));
        }
    }
    check_tree(&inodes)?;
    for (slot, bytes) in extents_t.records() {
        let e = ExtentRecord::decode(bytes, 0)?;
        let inode = inodes.get_mut(&e.ino).ok_or_else(|| dangling("extent owner", e.ino))?;
        if inode.kind != InodeKind::File {
            return Err(dangling("extent of a directory", e.ino));
        }
        let len = u64::from(e.len);
        if e.logical + len > inode.size.div_ceil(u64::from(block_size)) {
            return Err(image_error(
                0,
                Corruption::BadValue { field: "extent past end of file", value: e.ino },
            ));
        }
        for b in e.physical..e.physical.saturating_add(len) {
            loader.claim(b)?;
        }
        if inode.extents.insert(e.logical, Extent { physical: e.physical, len, slot }).is_some() {
            return Err(duplicate("extent", e.ino));
        }
    }
    for inode in inodes.values() {
        let mut end = 0;
        for (&s, e) in &inode.extents {
            if s < end {
                return Err(duplicate("overlapping extent", inode.ino));
            }
            end = s + e.len;
        }
    }
    load_attrs(attrs_t, &mut inodes, next_attr_id)?;
    Ok(Namespace {
        inodes,
        orphans: HashMap::new(),
        next_ino,
        next_attr_id,
        tables,
        block_size: u64::from(block_size),
        journal: None,
    })
}

/// Every inode but the root has a parent, and following parents always reaches the root.
fn check_tree(inodes: &HashMap<u64, Inode>) -> Result<()> {
    for (&ino, inode) in inodes {
        if ino != ROOT_INO && inode.parent == 0 {
            return Err(image_error(0, Corruption::NotATree { ino }));
        }
    }
    let mut seen = 1usize;
    let mut stack = vec![ROOT_INO];
    while let Some(d) = stack.pop() {
        for c in inodes[&d].children.values() {
            seen += 1;
            if seen > inodes.len() {
                return Err(image_error(0, Corruption::NotATree { ino: c.ino }));
            }
            stack.push(c.ino);
        }
    }
    if seen != inodes.len() {
        let lost = inodes.keys().copied().find(|&i| i != ROOT_INO).unwrap_or(ROOT_INO);
        return Err(image_error(0, Corruption::NotATree { ino: lost }));
    }
    Ok(())
}

fn load_attrs(table: &Table, inodes: &mut HashMap<u64, Inode>, next_attr_id: u64) -> Result<()> {
    let mut parts: BTreeMap<(u64, u64), BTreeMap<u32, (u64, AttrPart)>> = BTreeMap::new();
    for (slot, bytes) in table.records() {
        let p = AttrPart::decode(bytes, 0)?;
        if p.attr_id >= next_attr_id {
            return Err(image_error(
                0,
                Corruption::BadValue { field: "next_attr_id", value: next_attr_id },
            ));
        }
        let part = p.part;
        if parts.entry((p.ino, p.attr_id)).or_default().insert(part, (slot, p)).is_some() {
            return Err(duplicate("attribute part", u64::from(part)));
        }
    }
    for ((ino, id), mut chunks) in parts {
        let inode = inodes.get_mut(&ino).ok_or_else(|| dangling("attribute owner", ino))?;
        let (_, first) = chunks.get(&0).ok_or_else(|| dangling("attribute first part", id))?;
        let (key_len, value_len) = (usize::from(first.key_len), first.value_len as usize);
        let total = key_len + value_len;
        let expected_parts = total.div_ceil(records::ATTR_CHUNK_LEN);
        if chunks.len() != expected_parts
            || chunks.keys().last().copied() != Some(expected_parts as u32 - 1)
        {
            return Err(dangling("attribute part", id));
        }
        let mut stream = Vec::with_capacity(total);
        let mut slots = Vec::with_capacity(expected_parts);
        for (i, (slot, p)) in std::mem::take(&mut chunks).into_values().enumerate() {
            let want = (total - i * records::ATTR_CHUNK_LEN).min(records::ATTR_CHUNK_LEN);
            if p.chunk.len() != want {
                return Err(image_error(
                    0,
                    Corruption::BadValue { field: "attribute chunk", value: p.chunk.len() as u64 },
                ));
            }
            stream.extend_from_slice(&p.chunk);
            slots.push(slot);
        }
        let value = stream.split_off(key_len);
        if inode.attrs.insert(stream, Attr { value, id, slots }).is_some() {
            return Err(duplicate("attribute key", ino));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::IoOp;

    /// Reads that fill each block with its number, fail at one block, and take longer the
    /// earlier the block: the threads of `read_runs` finish in the reverse of read order.
    struct Slow {
        block_size: u64,
        fails_at: u64,
    }

    impl AreaRead for Slow {
        fn read_in(&self, _: Option<&Layout>, _: Area, offset: u64, buf: &mut [u8]) -> Result<()> {
            let first = offset / self.block_size;
            std::thread::sleep(Duration::from_micros(2_000u64.saturating_sub(first * 10)));
            let blocks = buf.len() as u64 / self.block_size;
            if (first..first + blocks).contains(&self.fails_at) {
                return Err(Error::Io {
                    op: IoOp::Read,
                    offset,
                    len: buf.len() as u64,
                    source: std::io::Error::other("injected"),
                });
            }
            for (k, block) in buf.chunks_mut(self.block_size as usize).enumerate() {
                block.fill((first + k as u64) as u8);
            }
            Ok(())
        }

        fn carrier_len(&self) -> u64 {
            0
        }
    }

    #[test]
    fn many_reads_give_one_result_each_in_read_order() {
        let layout = Layout::for_format(16 << 20, 4096, 0, None).unwrap();
        let bs = u64::from(layout.block_size);
        let first = layout.allocatable().start;
        // Runs of 1 to 3 blocks with a gap after each; the read of run 11 fails.
        let reads: Vec<(u64, usize)> = (0..40).map(|i| (first + 4 * i, 1 + i as usize % 3)).collect();
        let fails_at = reads[11].0 + 1;
        let slow = Slow { block_size: bs, fails_at };
        let loader = Loader {
            reader: &slow,
            layout,
            uuid: Uuid::default(),
            generation: 0,
            reachable: Bitmap::new(layout.total_blocks),
            metadata_blocks: 0,
        };
        assert!(reads.len() >= PARALLEL_READS_FROM, "the reads go out from threads");
        let got = loader.read_runs(&reads);
        assert_eq!(got.len(), reads.len());
        for (i, (&(at, n), r)) in reads.iter().zip(&got).enumerate() {
            match r {
                Err(Error::Io { offset, .. }) => {
                    assert_eq!((i, *offset), (11, layout.offset_of(at)), "the error is its read's");
                }
                Err(e) => panic!("read {i}: {e}"),
                Ok(buf) => {
                    assert_ne!(i, 11, "the failed read has no bytes");
                    assert_eq!(buf.as_slice().len(), n * bs as usize);
                    for (k, block) in buf.as_slice().chunks(bs as usize).enumerate() {
                        assert!(block.iter().all(|&b| b == (at + k as u64) as u8), "read {i}");
                    }
                }
            }
        }
    }
}
