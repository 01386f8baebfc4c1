//! The two superblocks: encode, decode, and the order in which they are tried for adoption
//! (FORMAT.md, "Superblock").
//!
//! Slot A lives at byte 0 and slot B at byte 4096. A commit to generation G writes slot
//! `G mod 2` first and the other slot second, each behind its own barrier, so at every
//! instant at least one slot holds a complete, durable commit. Adoption takes the valid slot
//! with the highest generation whose image verifies; the checksum is seeded with the slot
//! number and the volume UUID, so a superblock written to the wrong slot or copied from
//! another volume does not verify.
//!
//! Decoding checks the checksum first (a torn slot must read as torn, not as "unsupported
//! version"), then the reject rules: version, incompat bits, state, reserved fields, journal
//! fields, member table and geometry. Unknown ro-compat bits are reported so the volume opens
//! read-only.

use crate::error::{Corruption, Error, Region, Result, Unsupported};
use crate::format::checksum;
use crate::format::codec::{Reader, Writer};
use crate::format::consts::{FORMAT_VERSION, MAX_MEMBERS, SUPERBLOCK_LEN, Uuid};
use crate::layout::{BlockRange, Layout, VolumeGeometry};

/// `VELLUMSB`: the first 8 bytes of both slots.
pub const MAGIC: [u8; 8] = *b"VELLUMSB";

// Field offsets, each derived from the one before (FORMAT.md's table repeats them).
pub const VERSION_AT: usize = MAGIC.len();
pub const STATE_AT: usize = VERSION_AT + 4;
pub const INCOMPAT_AT: usize = STATE_AT + 4;
pub const RO_COMPAT_AT: usize = INCOMPAT_AT + 8;
pub const COMPAT_AT: usize = RO_COMPAT_AT + 8;
pub const GENERATION_AT: usize = COMPAT_AT + 8;
pub const BLOCK_SIZE_AT: usize = GENERATION_AT + 8;
pub const LAYOUT_FLAGS_AT: usize = BLOCK_SIZE_AT + 4;
pub const UUID_AT: usize = LAYOUT_FLAGS_AT + 4;
pub const CARRIER_INDEX_AT: usize = UUID_AT + 16;
pub const CARRIER_COUNT_AT: usize = CARRIER_INDEX_AT + 4;
pub const TOTAL_BLOCKS_AT: usize = CARRIER_COUNT_AT + 4;
pub const BITMAP_AT: usize = TOTAL_BLOCKS_AT + 8;
pub const JOURNAL_AT: usize = BITMAP_AT + 16;
pub const IMAGE_AT: usize = JOURNAL_AT + 16;
pub const DATA_AT: usize = IMAGE_AT + 16;
pub const ROOT_BLOCK_AT: usize = DATA_AT + 16;
pub const ROOT_CHECKSUM_AT: usize = ROOT_BLOCK_AT + 8;
pub const BITMAP_CHECKSUM_AT: usize = ROOT_CHECKSUM_AT + 4;
pub const JOURNAL_FIELDS_AT: usize = BITMAP_CHECKSUM_AT + 4;
pub const JOURNAL_FIELDS_LEN: usize = 32;
pub const CREATED_AT: usize = JOURNAL_FIELDS_AT + JOURNAL_FIELDS_LEN;
pub const MEMBERS_AT: usize = CREATED_AT + 8;
pub const MEMBER_LEN: usize = 16 + 8;
pub const GROW_MAX_AT: usize = MEMBERS_AT + MAX_MEMBERS * MEMBER_LEN;
/// The member path table (volumes of several members; zero for one member).
pub const PATHS_AT: usize = GROW_MAX_AT + 8;
pub const RESERVED_AT: usize = PATHS_AT;
pub const CHECKSUM_AT: usize = SUPERBLOCK_LEN - 4;
pub const RESERVED_LEN: usize = CHECKSUM_AT - RESERVED_AT;

const _: () = assert!(
    UUID_AT.is_multiple_of(8) && TOTAL_BLOCKS_AT.is_multiple_of(8) && MEMBERS_AT.is_multiple_of(8)
);
const _: () = assert!(GROW_MAX_AT == 592, "FORMAT.md places grow_max_blocks at byte 592");
const _: () = assert!(RESERVED_AT < CHECKSUM_AT);

/// `incompat_features` bit 0: the journal is in use (FORMAT.md, "Journal"). A build that does
/// not know it refuses the volume: it would open at the checkpoint and ignore the records
/// committed after it.
pub const INCOMPAT_JOURNAL: u64 = 1 << 0;
/// `incompat_features` bit 1: the volume grows (auto-grow): `grow_max_blocks` is its cap and
/// the bitmap is sized for it. A build that does not know it would refuse the bitmap's size
/// as damage; this way it refuses the feature by name.
pub const INCOMPAT_GROW: u64 = 1 << 1;
/// Incompatible features this build understands.
pub const KNOWN_INCOMPAT: u64 = INCOMPAT_JOURNAL | INCOMPAT_GROW;

/// `journal_flags` bit 0: open found the journal region destroyed and the volume went on
/// from its checkpoint; set until acknowledged (`vellum journal ack`).
pub const JOURNAL_LOSS: u32 = 1 << 0;
const KNOWN_JOURNAL_FLAGS: u32 = JOURNAL_LOSS;

/// Fewest blocks a journal region in use may have.
pub const MIN_JOURNAL_BLOCKS: u64 = 2;

// Offsets inside the journal fields.
pub const JOURNAL_TAIL_AT: usize = JOURNAL_FIELDS_AT;
pub const JOURNAL_SEQUENCE_AT: usize = JOURNAL_TAIL_AT + 8;
pub const JOURNAL_LOST_FROM_AT: usize = JOURNAL_SEQUENCE_AT + 8;
pub const JOURNAL_FLAGS_AT: usize = JOURNAL_LOST_FROM_AT + 8;
const _: () = assert!(JOURNAL_FLAGS_AT + 8 == JOURNAL_FIELDS_AT + JOURNAL_FIELDS_LEN);

/// Where the journal stands at a checkpoint (all zero without `INCOMPAT_JOURNAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalFields {
    /// Ring block (`0..journal_blocks`) where the first batch after this checkpoint begins.
    pub tail: u64,
    /// The sequence number that batch carries (at least 1): every batch below it is in the
    /// checkpoint's image.
    pub sequence: u64,
    /// With `JOURNAL_LOSS`: the sequence from which records may have been lost; else 0.
    pub lost_from: u64,
    pub flags: u32,
}
/// Read-only-compatible features this build understands (none in v1: any set bit opens
/// read-only).
pub const KNOWN_RO_COMPAT: u64 = 0;

/// `layout_flags` bit 0: the carrier was created thin (grows as blocks are allocated).
pub const LAYOUT_THIN: u32 = 1 << 0;
/// `layout_flags` bit 1: the carrier was created sparse (unwritten ranges are holes).
pub const LAYOUT_SPARSE: u32 = 1 << 1;
const KNOWN_LAYOUT_FLAGS: u32 = LAYOUT_THIN | LAYOUT_SPARSE;

/// Whether the volume was closed cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeState {
    /// Closed cleanly: the bitmap matches `bitmap_checksum` and the image.
    Clean = 1,
    /// Open for writing, or crashed while open: the bitmap is rebuilt from the image.
    Dirty = 2,
}

/// A member of the volume: an entry of the member table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub uuid: Uuid,
    pub capacity_blocks: u64,
}

/// Where a metadata block is and what its checksum must be (the Merkle link).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockRef {
    pub block: u64,
    pub checksum: u32,
}

/// One decoded superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub state: VolumeState,
    pub incompat: u64,
    pub ro_compat: u64,
    pub compat: u64,
    pub generation: u64,
    pub layout: Layout,
    pub layout_flags: u32,
    pub uuid: Uuid,
    pub carrier_index: u32,
    pub carrier_count: u32,
    pub members: Vec<Member>,
    pub root: BlockRef,
    /// crc32c of the bitmap region when clean; 0 when dirty.
    pub bitmap_checksum: u32,
    /// Format time, nanoseconds since the Unix epoch (informational).
    pub created_unix_ns: u64,
    /// The journal's checkpoint position (zero unless `incompat` has `INCOMPAT_JOURNAL`).
    pub journal: JournalFields,
    /// The member path table: where each member's carrier was when this superblock was
    /// written, as bytes of a host path (empty: not recorded). At most `carrier_count`
    /// entries; missing entries are empty. All empty on a volume of one member.
    pub member_paths: Vec<Vec<u8>>,
}

/// Byte offset of `slot` on the carrier.
pub fn slot_offset(slot: u8) -> u64 {
    u64::from(slot) * SUPERBLOCK_LEN as u64
}

/// The slot that commit `generation` writes first.
pub fn first_slot(generation: u64) -> u8 {
    (generation % 2) as u8
}

impl Superblock {
    /// True when the journal is in use.
    pub fn journaled(&self) -> bool {
        self.incompat & INCOMPAT_JOURNAL != 0
    }

    /// The geometry of the whole volume this superblock of member 0 describes (decode
    /// checked that its member table places every member).
    pub fn geometry(&self) -> VolumeGeometry {
        assert_eq!(self.carrier_index, 0, "only member 0's superblock describes the volume");
        let caps: Vec<u64> = self.members[1..].iter().map(|m| m.capacity_blocks).collect();
        VolumeGeometry::new(self.layout, &caps).expect("a member table that places every member")
    }

    /// [`Superblock::geometry`] of a superblock being built (an add or a format): an error
    /// instead of a panic when the table places no member.
    pub fn geometry_checked(&self) -> Result<VolumeGeometry> {
        let caps: Vec<u64> = self.members[1..].iter().map(|m| m.capacity_blocks).collect();
        VolumeGeometry::new(self.layout, &caps)
    }

    /// True when unknown ro-compat bits require a read-only open.
    pub fn requires_read_only(&self) -> bool {
        self.ro_compat & !KNOWN_RO_COMPAT != 0
    }

    /// Encodes this superblock for `slot`.
    pub fn encode(&self, slot: u8) -> [u8; SUPERBLOCK_LEN] {
        assert!(slot < 2, "slot {slot}");
        assert_eq!(self.version, FORMAT_VERSION, "this build writes only v{FORMAT_VERSION}");
        assert_eq!(self.members.len(), self.carrier_count as usize);
        assert_eq!(self.layout_flags & !KNOWN_LAYOUT_FLAGS, 0);
        assert_eq!(self.incompat & !KNOWN_INCOMPAT, 0);
        if self.journaled() {
            let j = &self.journal;
            assert!(j.sequence >= 1 && j.tail < self.layout.journal.len, "journal fields {j:?}");
            assert_eq!(j.flags & !KNOWN_JOURNAL_FLAGS, 0);
        } else {
            assert_eq!(self.journal, JournalFields::default(), "journal fields without a journal");
        }
        let mut out = [0u8; SUPERBLOCK_LEN];
        let mut w = Writer::new(&mut out);
        w.put(&MAGIC);
        w.assert_at(VERSION_AT);
        w.u32_le(self.version);
        w.u32_le(self.state as u32);
        w.u64_le(self.incompat);
        w.u64_le(self.ro_compat);
        w.u64_le(self.compat);
        w.assert_at(GENERATION_AT);
        w.u64_le(self.generation);
        w.u32_le(self.layout.block_size);
        w.u32_le(self.layout_flags);
        w.assert_at(UUID_AT);
        w.put(&self.uuid.0);
        w.u32_le(self.carrier_index);
        w.u32_le(self.carrier_count);
        w.assert_at(TOTAL_BLOCKS_AT);
        w.u64_le(self.layout.total_blocks);
        for r in [self.layout.bitmap, self.layout.journal, self.layout.image, self.layout.data] {
            w.u64_le(r.start);
            w.u64_le(r.len);
        }
        w.assert_at(ROOT_BLOCK_AT);
        w.u64_le(self.root.block);
        w.u32_le(self.root.checksum);
        w.u32_le(self.bitmap_checksum);
        w.assert_at(JOURNAL_FIELDS_AT);
        w.u64_le(self.journal.tail);
        w.u64_le(self.journal.sequence);
        w.u64_le(self.journal.lost_from);
        w.u32_le(self.journal.flags);
        w.zeros(4);
        w.u64_le(self.created_unix_ns);
        w.assert_at(MEMBERS_AT);
        for i in 0..MAX_MEMBERS {
            match self.members.get(i) {
                Some(m) => {
                    w.put(&m.uuid.0);
                    w.u64_le(m.capacity_blocks);
                }
                None => w.zeros(MEMBER_LEN),
            }
        }
        w.assert_at(GROW_MAX_AT);
        let grows = self.incompat & INCOMPAT_GROW != 0;
        assert!(grows || self.layout.max_blocks == self.layout.total_blocks, "a cap without the bit");
        w.u64_le(if grows { self.layout.max_blocks } else { 0 });
        w.assert_at(PATHS_AT);
        let table = encode_paths(&self.member_paths, self.carrier_count);
        assert!(table.len() <= RESERVED_LEN, "member paths of {} bytes", table.len());
        assert!(self.carrier_count > 1 || table.iter().all(|&b| b == 0), "paths of one member");
        w.put(&table);
        w.zeros(RESERVED_LEN - table.len());
        w.assert_at(CHECKSUM_AT);
        let crc = checksum::superblock(slot, &self.uuid, &out[..CHECKSUM_AT]);
        out[CHECKSUM_AT..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes the bytes of `slot`, applying every reject rule.
    pub fn decode(bytes: &[u8], slot: u8) -> Result<Superblock> {
        let region = Region::Superblock(slot);
        let base = slot_offset(slot);
        if bytes.len() != SUPERBLOCK_LEN {
            let reason = Corruption::Truncated {
                needed: SUPERBLOCK_LEN as u64,
                available: bytes.len() as u64,
            };
            return Err(Error::corrupt(region, base, reason));
        }
        if bytes[..MAGIC.len()] != MAGIC {
            return Err(Error::corrupt(region, base, Corruption::BadMagic));
        }
        let mut uuid = Uuid::default();
        uuid.0.copy_from_slice(&bytes[UUID_AT..UUID_AT + 16]);
        let stored = u32::from_le_bytes([
            bytes[CHECKSUM_AT],
            bytes[CHECKSUM_AT + 1],
            bytes[CHECKSUM_AT + 2],
            bytes[CHECKSUM_AT + 3],
        ]);
        let computed = checksum::superblock(slot, &uuid, &bytes[..CHECKSUM_AT]);
        if stored != computed {
            return Err(Error::corrupt(
                region,
                base + CHECKSUM_AT as u64,
                Corruption::Checksum { stored, computed },
            ));
        }
        let mut r = Reader::new(bytes, region, base);
        r.bytes(MAGIC.len())?;
        let version = r.u32_le()?;
        if version > FORMAT_VERSION {
            return Err(Error::Unsupported(Unsupported::Version {
                found: version,
                supported: FORMAT_VERSION,
            }));
        }
        if version == 0 {
            return Err(r.bad_value("format_version", 0));
        }
        let state = match r.u32_le()? {
            1 => VolumeState::Clean,
            2 => VolumeState::Dirty,
            other => return Err(Error::Unsupported(Unsupported::UndefinedState(other))),
        };
        let incompat = r.u64_le()?;
        if incompat & !KNOWN_INCOMPAT != 0 {
            return Err(Error::Unsupported(Unsupported::IncompatFeatures(
                incompat & !KNOWN_INCOMPAT,
            )));
        }
        let ro_compat = r.u64_le()?;
        let compat = r.u64_le()?;
        let generation = r.u64_le()?;
        let block_size = r.u32_le()?;
        let layout_flags = r.u32_le()?;
        if layout_flags & !KNOWN_LAYOUT_FLAGS != 0 {
            return Err(Error::Unsupported(Unsupported::ReservedNonZero { field: "layout_flags" }));
        }
        r.fixed::<16>()?; // uuid, read above for the checksum seed
        if uuid.is_nil() {
            return Err(r.bad_value("volume_uuid", 0));
        }
        let carrier_index = r.u32_le()?;
        let carrier_count = r.u32_le()?;
        if carrier_count == 0
            || carrier_count as usize > MAX_MEMBERS
            || carrier_index >= carrier_count
        {
            return Err(r.bad_value("carrier_count", u64::from(carrier_count)));
        }
        let total_blocks = r.u64_le()?;
        let mut ranges = [BlockRange::default(); 4];
        for range in &mut ranges {
            *range = BlockRange { start: r.u64_le()?, len: r.u64_le()? };
        }
        let [bitmap, journal, image, data] = ranges;
        let mut layout =
            Layout { block_size, total_blocks, max_blocks: total_blocks, bitmap, journal, image, data };
        let root = BlockRef { block: r.u64_le()?, checksum: r.u32_le()? };
        let bitmap_checksum = r.u32_le()?;
        let journal = if incompat & INCOMPAT_JOURNAL == 0 {
            if r.bytes(JOURNAL_FIELDS_LEN)?.iter().any(|&b| b != 0) {
                return Err(Error::Unsupported(Unsupported::JournalInUse));
            }
            JournalFields::default()
        } else {
            let tail = r.u64_le()?;
            let sequence = r.u64_le()?;
            let lost_from = r.u64_le()?;
            let flags = r.u32_le()?;
            if flags & !KNOWN_JOURNAL_FLAGS != 0 {
                return Err(Error::Unsupported(Unsupported::ReservedNonZero {
                    field: "journal_flags",
                }));
            }
            if flags & JOURNAL_LOSS == 0 && lost_from != 0 {
                return Err(Error::Unsupported(Unsupported::ReservedNonZero {
                    field: "journal_lost_from",
                }));
            }
            r.expect_zero(4, "journal reserved")?;
            if journal.len < MIN_JOURNAL_BLOCKS {
                return Err(r.bad_value("journal_blocks", journal.len));
            }
            if tail >= journal.len {
                return Err(r.bad_value("journal_tail", tail));
            }
            if sequence == 0 {
                return Err(r.bad_value("journal_sequence", 0));
            }
            JournalFields { tail, sequence, lost_from, flags }
        };
        let created_unix_ns = r.u64_le()?;
        let mut members = Vec::new();
        for i in 0..MAX_MEMBERS {
            if i < carrier_count as usize {
                let uuid = Uuid(r.fixed::<16>()?);
                members.push(Member { uuid, capacity_blocks: r.u64_le()? });
            } else {
                r.expect_zero(MEMBER_LEN, "member_table")?;
            }
        }
        let grow_max = r.u64_le()?;
        if incompat & INCOMPAT_GROW == 0 {
            if grow_max != 0 {
                return Err(Error::Unsupported(Unsupported::ReservedNonZero {
                    field: "grow_max_blocks",
                }));
            }
        } else {
            layout.max_blocks = grow_max;
        }
        let member_paths = if carrier_count == 1 {
            r.expect_zero(RESERVED_LEN, "reserved")?;
            Vec::new()
        } else {
            let table = r.bytes(RESERVED_LEN)?;
            decode_paths(table, carrier_count).ok_or_else(|| {
                Error::corrupt(
                    region,
                    base + PATHS_AT as u64,
                    Corruption::BadValue { field: "member_paths", value: 0 },
                )
            })?
        };
        layout.validate(base + TOTAL_BLOCKS_AT as u64)?;
        let bad_member = |value: u64| {
            Error::corrupt(
                region,
                base + MEMBERS_AT as u64,
                Corruption::BadValue { field: "member_capacity_blocks", value },
            )
        };
        for m in &members {
            if m.uuid.is_nil() || m.capacity_blocks == 0 || !m.capacity_blocks.is_multiple_of(64) {
                return Err(bad_member(m.capacity_blocks));
            }
        }
        let own = members[carrier_index as usize];
        if own.capacity_blocks != total_blocks {
            return Err(bad_member(own.capacity_blocks));
        }
        if carrier_count > 1 && layout_flags != 0 {
            return Err(Error::Unsupported(Unsupported::ReservedNonZero { field: "layout_flags" }));
        }
        // The block space the image root may lie in: member 0's, or the whole volume's
        // (the image allocates across members).
        let mut space = layout;
        if carrier_index == 0 && carrier_count > 1 {
            // The rest of the table must describe members the geometry can place.
            let caps: Vec<u64> = members[1..].iter().map(|m| m.capacity_blocks).collect();
            match VolumeGeometry::new(layout, &caps) {
                Ok(geometry) => space = geometry.layout(),
                Err(_) => return Err(bad_member(caps.iter().sum())),
            }
        }
        if carrier_index > 0 {
            // A later member: identity and geometry only (FORMAT.md, "Members").
            let secondary = |field: &'static str, value: u64| {
                Err(Error::corrupt(region, base, Corruption::BadValue { field, value }))
            };
            if state != VolumeState::Clean {
                return secondary("state", state as u64);
            }
            if incompat & (INCOMPAT_JOURNAL | INCOMPAT_GROW) != 0 {
                return secondary("incompat_features", incompat);
            }
            if root != BlockRef::default() || bitmap_checksum != 0 {
                return secondary("root_block", root.block);
            }
            if Layout::for_member(block_size, total_blocks).ok() != Some(layout) {
                return secondary("member_layout", total_blocks);
            }
        }
        if state == VolumeState::Dirty && bitmap_checksum != 0 {
            return Err(Error::Unsupported(Unsupported::ReservedNonZero {
                field: "bitmap_checksum",
            }));
        }
        if carrier_index == 0 && !space.allocatable().contains(root.block) {
            return Err(Error::corrupt(
                region,
                base + ROOT_BLOCK_AT as u64,
                Corruption::OutOfRange { block: root.block },
            ));
        }
        Ok(Superblock {
            version,
            state,
            incompat,
            ro_compat,
            compat,
            generation,
            layout,
            layout_flags,
            uuid,
            carrier_index,
            carrier_count,
            members,
            root,
            bitmap_checksum,
            created_unix_ns,
            journal,
            member_paths,
        })
    }
}

/// The member path table's bytes: for each member `0..count`, its path's length
/// (u16, little-endian) and the path's bytes. Longer than the reserved area when the paths do
/// not fit (the caller refuses it).
pub fn encode_paths(paths: &[Vec<u8>], count: u32) -> Vec<u8> {
    if count <= 1 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for k in 0..count as usize {
        let path = paths.get(k).map_or(&[][..], Vec::as_slice);
        let len = u16::try_from(path.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&path[..usize::from(len)]);
    }
    out
}

/// Bytes the member path table may take.
pub const PATHS_MAX: usize = RESERVED_LEN;

/// Decodes the path table of `count` members; `None` when an entry runs past the area or a
/// byte after the last entry is not zero.
fn decode_paths(table: &[u8], count: u32) -> Option<Vec<Vec<u8>>> {
    let mut at = 0;
    let mut paths = Vec::new();
    for _ in 0..count {
        let len = usize::from(u16::from_le_bytes([*table.get(at)?, *table.get(at + 1)?]));
        let path = table.get(at + 2..at + 2 + len)?;
        if path.contains(&0) {
            return None;
        }
        paths.push(path.to_vec());
        at += 2 + len;
    }
    table[at..].iter().all(|&b| b == 0).then_some(paths)
}

/// The result of reading one slot.
#[derive(Debug)]
pub struct SlotRead {
    pub slot: u8,
    pub result: Result<Superblock>,
}

/// Decodes both slots from the first `2 * SUPERBLOCK_LEN` bytes of a carrier (the volume
/// reads them: `volume::read_slots`).
pub fn decode_slots(b: &[u8]) -> [SlotRead; 2] {
    assert!(b.len() >= 2 * SUPERBLOCK_LEN, "both slots' bytes");
    [
        SlotRead { slot: 0, result: Superblock::decode(&b[..SUPERBLOCK_LEN], 0) },
        SlotRead { slot: 1, result: Superblock::decode(&b[SUPERBLOCK_LEN..2 * SUPERBLOCK_LEN], 1) },
    ]
}

/// Orders the slots for adoption, newest generation first, applying the slot-level rules:
/// a slot that checksums but is unsupported refuses the volume (a newer build wrote it, and
/// rolling back to the other slot would lose its commits); two bad slots refuse.
pub fn adoption_order(slots: [SlotRead; 2]) -> Result<Vec<(u8, Superblock)>> {
    let mut valid = Vec::new();
    let mut errors = Vec::new();
    for s in slots {
        match s.result {
            Ok(sb) => valid.push((s.slot, sb)),
            Err(e @ Error::Unsupported(_)) => return Err(e),
            Err(e) => errors.push(e),
        }
    }
    if valid.is_empty() {
        let bad_magic =
            |e: &Error| matches!(e, Error::Corrupt { reason: Corruption::BadMagic, .. });
        if errors.iter().all(bad_magic) {
            return Err(Error::NotAVolume);
        }
        // Report a damaged slot rather than a missing magic: it says more.
        let pick = errors.iter().position(|e| !bad_magic(e)).unwrap_or(0);
        return Err(errors.swap_remove(pick));
    }
    valid.sort_by_key(|(_, sb)| std::cmp::Reverse(sb.generation));
    Ok(valid)
}

#[cfg(test)]
mod tests;
