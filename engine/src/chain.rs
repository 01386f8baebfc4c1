//! Metadata blocks and the fixed-record tables built from them (FORMAT.md, "Metadata blocks"
//! and "Tables").
//!
//! All metadata is fixed-length records in blocks. A table is an array of record slots spread
//! over record blocks; the table's *spine* is a chain of blocks listing the address and
//! checksum of every record block, and the root block lists each table's spine head. Every
//! reference carries the checksum of the block it points to, so a lost or misdirected write
//! anywhere below the superblock is detected, and the chain has no B-tree: no rebalancing,
//! no sorted migration, a deterministic write order.
//!
//! Commits are copy-on-write: a dirty record block is written to a new address, its spine is
//! rewritten behind it, and the old blocks are freed only after the commit is durable.

use std::collections::BTreeSet;

use crate::error::{Corruption, Error, Region, Result, Unsupported};
use crate::format::checksum;
use crate::format::codec::{Reader, Writer};
use crate::format::consts::Uuid;
use crate::superblock::BlockRef;

/// `VCHB`: the first 4 bytes of every metadata block.
pub const BLOCK_MAGIC: [u8; 4] = *b"VCHB";

// Metadata block header, each offset derived from the one before.
pub const KIND_AT: usize = BLOCK_MAGIC.len();
pub const TABLE_AT: usize = KIND_AT + 2;
pub const GENERATION_AT: usize = TABLE_AT + 2;
pub const COUNT_AT: usize = GENERATION_AT + 8;
pub const RECORD_LEN_AT: usize = COUNT_AT + 4;
pub const HEADER_RESERVED_AT: usize = RECORD_LEN_AT + 2;
pub const NEXT_AT: usize = HEADER_RESERVED_AT + 2;
pub const NEXT_CHECKSUM_AT: usize = NEXT_AT + 8;
pub const HEADER_RESERVED2_AT: usize = NEXT_CHECKSUM_AT + 4;
pub const PAYLOAD_AT: usize = HEADER_RESERVED2_AT + 4;
/// Bytes after the payload: the block checksum.
pub const TRAILER_LEN: usize = 4;
const _: () = assert!(PAYLOAD_AT == 40, "FORMAT.md: the payload starts at byte 40");

/// Spine entry: record block address, its checksum, its live record count.
pub const SPINE_ENTRY_LEN: usize = 16;

/// What a metadata block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    Root = 1,
    Spine = 2,
    Records = 3,
}

/// The four tables of format v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableId {
    Inodes = 1,
    Dirents = 2,
    Extents = 3,
    Attributes = 4,
}

impl TableId {
    pub const ALL: [TableId; 4] =
        [TableId::Inodes, TableId::Dirents, TableId::Extents, TableId::Attributes];

    /// Bytes of one record of this table.
    pub fn record_len(self) -> usize {
        match self {
            TableId::Inodes | TableId::Attributes => 128,
            TableId::Dirents => 288,
            TableId::Extents => 32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TableId::Inodes => "inode",
            TableId::Dirents => "dirent",
            TableId::Extents => "extent",
            TableId::Attributes => "attribute",
        }
    }

    fn from_u16(v: u16) -> Option<TableId> {
        TableId::ALL.into_iter().find(|t| *t as u16 == v)
    }
}

/// Payload bytes of a metadata block.
pub fn payload_len(block_size: usize) -> usize {
    block_size - PAYLOAD_AT - TRAILER_LEN
}

/// Record slots per record block of `table`.
pub fn slots_per_block(table: TableId, block_size: usize) -> usize {
    payload_len(block_size) / table.record_len()
}

/// Spine entries per spine block.
pub fn entries_per_spine(block_size: usize) -> usize {
    payload_len(block_size) / SPINE_ENTRY_LEN
}

/// The decoded header of a metadata block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub kind: BlockKind,
    pub table: u16,
    pub generation: u64,
    pub count: u32,
    pub record_len: u16,
    pub next: BlockRef,
}

/// Seals a metadata block in place: writes the header and the seeded checksum.
pub fn seal(block: &mut [u8], address: u64, uuid: &Uuid, header: &BlockHeader) -> BlockRef {
    let len = block.len();
    let mut w = Writer::new(&mut block[..PAYLOAD_AT]);
    w.put(&BLOCK_MAGIC);
    w.u16_le(header.kind as u16);
    w.u16_le(header.table);
    w.u64_le(header.generation);
    w.u32_le(header.count);
    w.u16_le(header.record_len);
    w.u16_le(0);
    w.assert_at(NEXT_AT);
    w.u64_le(header.next.block);
    w.u32_le(header.next.checksum);
    w.u32_le(0);
    w.assert_at(PAYLOAD_AT);
    let crc = checksum::block(address, uuid, &block[..len - TRAILER_LEN]);
    block[len - TRAILER_LEN..].copy_from_slice(&crc.to_le_bytes());
    BlockRef { block: address, checksum: crc }
}

/// Verifies a metadata block read from `expected.block` and decodes its header.
pub fn open_block(
    bytes: &[u8],
    expected: BlockRef,
    uuid: &Uuid,
    byte_offset: u64,
) -> Result<BlockHeader> {
    let corrupt =
        |at: usize, reason| Error::corrupt(Region::Image, byte_offset + at as u64, reason);
    let len = bytes.len();
    let mut stored = [0u8; 4];
    stored.copy_from_slice(&bytes[len - TRAILER_LEN..]);
    let stored = u32::from_le_bytes(stored);
    let computed = checksum::block(expected.block, uuid, &bytes[..len - TRAILER_LEN]);
    if stored != computed {
        return Err(corrupt(len - TRAILER_LEN, Corruption::Checksum { stored, computed }));
    }
    if stored != expected.checksum {
        // The block verifies by itself but is not the version its parent committed to:
        // a lost write or a stale copy.
        return Err(corrupt(
            len - TRAILER_LEN,
            Corruption::Checksum { stored: expected.checksum, computed },
        ));
    }
    let mut r = Reader::new(&bytes[..PAYLOAD_AT], Region::Image, byte_offset);
    if r.fixed::<4>()? != BLOCK_MAGIC {
        return Err(corrupt(0, Corruption::BadMagic));
    }
    let kind = match r.u16_le()? {
        1 => BlockKind::Root,
        2 => BlockKind::Spine,
        3 => BlockKind::Records,
        other => {
            return Err(Error::Unsupported(Unsupported::RecordKind {
                table: "block",
                tag: u64::from(other),
            }));
        }
    };
    let table = r.u16_le()?;
    let generation = r.u64_le()?;
    let count = r.u32_le()?;
    let record_len = r.u16_le()?;
    r.expect_zero(2, "block_header")?;
    let next = BlockRef { block: r.u64_le()?, checksum: r.u32_le()? };
    r.expect_zero(4, "block_header")?;
    Ok(BlockHeader { kind, table, generation, count, record_len, next })
}

/// Decodes a table id read from disk.
pub fn table_from_disk(v: u16, r: &Reader<'_>) -> Result<TableId> {
    TableId::from_u16(v).ok_or_else(|| r.bad_value("table", u64::from(v)))
}

/// Per-record-block bookkeeping of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableBlock {
    /// Where the committed copy lives (`None` for a block not yet committed).
    pub committed: Option<BlockRef>,
    pub live: u32,
    pub dirty: bool,
}

/// One table in memory: the record bytes of every slot, plus which slots are free and which
/// blocks changed since the last commit.
#[derive(Debug, Clone)]
pub struct Table {
    pub id: TableId,
    pub record_len: usize,
    pub per_block: usize,
    bytes: Vec<u8>,
    pub blocks: Vec<TableBlock>,
    free: BTreeSet<u64>,
    /// Spine blocks of the committed image (rewritten whenever a record block moves).
    pub spine: Vec<BlockRef>,
    pub spine_dirty: bool,
}

impl Table {
    pub fn new(id: TableId, block_size: usize) -> Table {
        Table {
            id,
            record_len: id.record_len(),
            per_block: slots_per_block(id, block_size),
            bytes: Vec::new(),
            blocks: Vec::new(),
            free: BTreeSet::new(),
            spine: Vec::new(),
            spine_dirty: false,
        }
    }

    pub fn slot_count(&self) -> u64 {
        (self.blocks.len() * self.per_block) as u64
    }

    pub fn live_records(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(b.live)).sum()
    }

    /// The bytes of `slot`.
    pub fn record(&self, slot: u64) -> &[u8] {
        let at = slot as usize * self.record_len;
        &self.bytes[at..at + self.record_len]
    }

    /// The record bytes of block `index` (all its slots).
    pub fn block_records(&self, index: usize) -> &[u8] {
        let per = self.per_block * self.record_len;
        &self.bytes[index * per..(index + 1) * per]
    }

    fn block_of(&self, slot: u64) -> usize {
        slot as usize / self.per_block
    }

    /// Appends a block decoded from the image.
    pub fn push_committed_block(&mut self, at: BlockRef, records: &[u8]) {
        assert_eq!(records.len(), self.per_block * self.record_len);
        let first = self.slot_count();
        let mut live = 0;
        for (i, rec) in records.chunks(self.record_len).enumerate() {
            if rec[..2] == [0, 0] {
                self.free.insert(first + i as u64);
            } else {
                live += 1;
            }
        }
        self.bytes.extend_from_slice(records);
        self.blocks.push(TableBlock { committed: Some(at), live, dirty: false });
    }

    /// A free slot, growing the table by one block when none is left ("table full" does not
    /// exist: a table is as large as the volume's free space lets it be).
    pub fn alloc_slot(&mut self) -> u64 {
        if let Some(slot) = self.free.pop_first() {
            return slot;
        }
        let first = self.slot_count();
        self.bytes.resize(self.bytes.len() + self.per_block * self.record_len, 0);
        self.blocks.push(TableBlock { committed: None, live: 0, dirty: true });
        self.spine_dirty = true;
        self.free.extend(first + 1..first + self.per_block as u64);
        first
    }

    /// Stores `record` (non-zero tag) into an allocated slot.
    pub fn put(&mut self, slot: u64, record: &[u8]) {
        assert_eq!(record.len(), self.record_len, "{} record of wrong length", self.id.name());
        assert!(record[..2] != [0, 0], "a stored record needs a non-zero tag");
        assert!(!self.free.contains(&slot), "slot {slot} of {} is free", self.id.name());
        let at = slot as usize * self.record_len;
        let was_free = self.bytes[at..at + 2] == [0, 0];
        self.bytes[at..at + self.record_len].copy_from_slice(record);
        let b = self.block_of(slot);
        if was_free {
            self.blocks[b].live += 1;
        }
        self.blocks[b].dirty = true;
    }

    /// Frees `slot`: its bytes become zero (a free slot is all zeros on disk).
    pub fn release(&mut self, slot: u64) {
        let at = slot as usize * self.record_len;
        assert!(
            self.bytes[at..at + 2] != [0, 0],
            "releasing free slot {slot} of {}",
            self.id.name()
        );
        self.bytes[at..at + self.record_len].fill(0);
        let b = self.block_of(slot);
        self.blocks[b].live -= 1;
        self.blocks[b].dirty = true;
        self.free.insert(slot);
    }

    /// Drops trailing blocks without live records; returns the committed addresses to free.
    pub fn trim(&mut self) -> Vec<BlockRef> {
        let mut freed = Vec::new();
        while self.blocks.last().is_some_and(|b| b.live == 0) {
            let Some(block) = self.blocks.pop() else { break };
            let first = self.slot_count();
            self.free.retain(|&s| s < first);
            self.bytes.truncate(first as usize * self.record_len);
            freed.extend(block.committed);
            self.spine_dirty = true;
        }
        freed
    }

    /// Occupied slots with their bytes.
    pub fn records(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.bytes
            .chunks(self.record_len)
            .enumerate()
            .filter(|(_, r)| r[..2] != [0, 0])
            .map(|(i, r)| (i as u64, r))
    }

    pub fn is_dirty(&self) -> bool {
        self.spine_dirty || self.blocks.iter().any(|b| b.dirty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_and_open_round_trip() {
        let uuid = Uuid([3; 16]);
        let mut block = vec![0u8; 4096];
        let header = BlockHeader {
            kind: BlockKind::Spine,
            table: 2,
            generation: 9,
            count: 5,
            record_len: 0,
            next: BlockRef { block: 77, checksum: 0xFEED },
        };
        let at = seal(&mut block, 100, &uuid, &header);
        assert_eq!(open_block(&block, at, &uuid, 0).unwrap(), header);
        // Read back from the wrong address, or as another volume's block: refused.
        assert!(open_block(&block, BlockRef { block: 101, ..at }, &uuid, 0).is_err());
        assert!(open_block(&block, at, &Uuid([4; 16]), 0).is_err());
        // A valid block that is not the version the parent points at: refused.
        assert!(
            open_block(&block, BlockRef { checksum: at.checksum ^ 1, ..at }, &uuid, 0).is_err()
        );
    }

    #[test]
    fn tables_grow_reuse_and_trim() {
        let mut t = Table::new(TableId::Extents, 4096);
        let per = t.per_block as u64;
        let slots: Vec<u64> = (0..=per).map(|_| t.alloc_slot()).collect();
        let mut rec = vec![0u8; 32];
        rec[0] = 1;
        for &s in &slots {
            t.put(s, &rec);
        }
        assert_eq!(t.blocks.len(), 2);
        assert_eq!(t.live_records(), per + 1);
        t.release(slots[3]);
        assert_eq!(t.alloc_slot(), slots[3], "the lowest free slot is reused first");
        t.put(slots[3], &rec);
        t.release(per);
        assert!(t.trim().is_empty(), "uncommitted blocks have nothing to free");
        assert_eq!(t.blocks.len(), 1);
        assert_eq!(t.records().count() as u64, per);
    }
}
