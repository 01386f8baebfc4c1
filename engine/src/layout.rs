//! Geometry: where each region of a member lies, as pure functions of the superblock fields
//! (FORMAT.md, "Layout").
//!
//! `[superblock A | superblock B] [bitmap] [journal] [image] [data]`, contiguous and in this
//! order, all measured in blocks. The superblocks take the first 8192 bytes (one or two blocks);
//! the bitmap has one bit per block of the member; the journal is reserved at format time and
//! may be empty; the image region is where metadata blocks are preferably allocated and the
//! data region where file data is, but both are one block space: either spills into the other
//! before the volume reports itself full.

use crate::error::{Corruption, Error, Invalid, Region, Result, Unsupported};
use crate::format::consts::{MAX_BLOCK_SIZE, MEMBER_ALIGN_BLOCKS, MIN_BLOCK_SIZE, SUPERBLOCKS_LEN};

/// A run of blocks `[start, start + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockRange {
    /// First block.
    pub start: u64,
    /// Length in blocks.
    pub len: u64,
}

impl BlockRange {
    /// One past the last block.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    /// Whether `block` lies in the range.
    pub fn contains(&self, block: u64) -> bool {
        block >= self.start && block < self.end()
    }
}

/// The region geometry of one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks in the member: a multiple of 64, so a bitmap word never spans members.
    pub total_blocks: u64,
    /// The most blocks the member may grow to (auto-grow), a multiple of 64; equal to
    /// `total_blocks` for a volume that does not grow. The bitmap is sized for it, so growing
    /// moves nothing: one superblock flip extends `total_blocks` and the data region.
    pub max_blocks: u64,
    /// The allocation bitmap's blocks.
    pub bitmap: BlockRange,
    /// The journal ring's blocks (empty when the volume has none).
    pub journal: BlockRange,
    /// The blocks the checkpoint image may use.
    pub image: BlockRange,
    /// The data region: file extents.
    pub data: BlockRange,
}

/// Fewest data blocks a volume may have.
pub const MIN_DATA_BLOCKS: u64 = 64;

/// Checks that `block_size` is a power of two in `4096..=65536`.
pub fn check_block_size(block_size: u32) -> bool {
    block_size.is_power_of_two() && (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size)
}

/// Blocks taken by the two superblock slots.
pub fn superblock_blocks(block_size: u32) -> u64 {
    SUPERBLOCKS_LEN.div_ceil(u64::from(block_size))
}

/// Blocks of a bitmap with one bit per block of `total_blocks`.
pub fn bitmap_blocks(total_blocks: u64, block_size: u32) -> u64 {
    (total_blocks / 8).div_ceil(u64::from(block_size))
}

/// Default image region: 1/64 of the member, between 16 and 65,536 blocks.
pub fn default_image_blocks(total_blocks: u64) -> u64 {
    (total_blocks / 64).clamp(16, 65_536)
}

impl Layout {
    /// The layout `format` writes for a member of `capacity_bytes`.
    pub fn for_format(
        capacity_bytes: u64,
        block_size: u32,
        journal_bytes: u64,
        image_blocks: Option<u64>,
    ) -> Result<Layout> {
        Layout::for_growing_format(capacity_bytes, None, block_size, journal_bytes, image_blocks)
    }

    /// The layout of a member of `capacity_bytes` now that may grow to `max_bytes` (none:
    /// it does not grow).
    pub fn for_growing_format(
        capacity_bytes: u64,
        max_bytes: Option<u64>,
        block_size: u32,
        journal_bytes: u64,
        image_blocks: Option<u64>,
    ) -> Result<Layout> {
        if !check_block_size(block_size) {
            return Err(Error::Invalid(Invalid::BlockSize { bytes: block_size }));
        }
        let bs = u64::from(block_size);
        let total_blocks = capacity_bytes / bs / MEMBER_ALIGN_BLOCKS * MEMBER_ALIGN_BLOCKS;
        let too_small = || Error::Invalid(Invalid::Capacity { bytes: capacity_bytes });
        let max_blocks = match max_bytes {
            Some(m) => m / bs / MEMBER_ALIGN_BLOCKS * MEMBER_ALIGN_BLOCKS,
            None => total_blocks,
        };
        if max_blocks < total_blocks {
            return Err(Error::Invalid(Invalid::MaxSize {
                max_bytes: max_bytes.unwrap_or(0),
                capacity_bytes,
            }));
        }
        // Block addresses keep their top 16 bits for the member index.
        if max_blocks >= 1 << 48 {
            return Err(too_small());
        }
        let sb = superblock_blocks(block_size);
        let bitmap = BlockRange { start: sb, len: bitmap_blocks(max_blocks, block_size) };
        let journal = BlockRange { start: bitmap.end(), len: journal_bytes.div_ceil(bs) };
        let image_len = image_blocks.unwrap_or_else(|| default_image_blocks(total_blocks));
        let image = BlockRange { start: journal.end(), len: image_len };
        let fixed = image.end();
        if total_blocks < fixed + MIN_DATA_BLOCKS {
            return Err(too_small());
        }
        let data = BlockRange { start: fixed, len: total_blocks - fixed };
        let layout = Layout { block_size, total_blocks, max_blocks, bitmap, journal, image, data };
        layout.validate(0)?;
        Ok(layout)
    }

    /// The layout of a member after the first (`vellum carrier add`): `capacity_blocks`
    /// blocks (a multiple of 64), no journal, the default image region, no growth. A pure
    /// function of its two arguments, so member 0's member table alone gives the geometry
    /// of the whole volume.
    pub fn for_member(block_size: u32, capacity_blocks: u64) -> Result<Layout> {
        if !capacity_blocks.is_multiple_of(MEMBER_ALIGN_BLOCKS) {
            return Err(Error::Invalid(Invalid::Capacity {
                bytes: capacity_blocks.saturating_mul(u64::from(block_size)),
            }));
        }
        let bytes = capacity_blocks.saturating_mul(u64::from(block_size));
        Layout::for_growing_format(bytes, None, block_size, 0, None)
    }

    /// The fewest blocks a member after the first may have.
    pub fn min_member_blocks(block_size: u32) -> u64 {
        let bs = u64::from(block_size);
        let mut blocks = MEMBER_ALIGN_BLOCKS;
        while Layout::for_member(block_size, blocks).is_err() {
            blocks += MEMBER_ALIGN_BLOCKS;
            assert!(blocks * bs < 1 << 40, "no member size fits block size {block_size}");
        }
        blocks
    }

    /// True when the member may still grow.
    pub fn can_grow(&self) -> bool {
        self.total_blocks < self.max_blocks
    }

    /// This layout with `total_blocks` blocks (growth: only the data region's end moves).
    pub fn grown_to(&self, total_blocks: u64) -> Layout {
        assert!(
            total_blocks >= self.total_blocks
                && total_blocks <= self.max_blocks
                && total_blocks.is_multiple_of(MEMBER_ALIGN_BLOCKS),
            "growing {} blocks to {total_blocks} (max {})",
            self.total_blocks,
            self.max_blocks
        );
        Layout {
            total_blocks,
            data: BlockRange { start: self.data.start, len: total_blocks - self.data.start },
            ..*self
        }
    }

    /// Checks the rules FORMAT.md states for a decoded layout: block size, alignment to 64
    /// blocks, regions contiguous and in order, bitmap sized for the member.
    pub fn validate(&self, offset: u64) -> Result<()> {
        if !check_block_size(self.block_size) {
            return Err(Error::Unsupported(Unsupported::BlockSize(self.block_size)));
        }
        let bad = |field: &'static str, value: u64| {
            Err(Error::corrupt(
                Region::Superblock(0),
                offset,
                Corruption::BadValue { field, value },
            ))
        };
        if self.total_blocks == 0 || !self.total_blocks.is_multiple_of(MEMBER_ALIGN_BLOCKS) {
            return bad("total_blocks", self.total_blocks);
        }
        if self.max_blocks >= 1 << 48
            || self.max_blocks < self.total_blocks
            || !self.max_blocks.is_multiple_of(MEMBER_ALIGN_BLOCKS)
        {
            return bad("max_blocks", self.max_blocks);
        }
        if self.bitmap.start != superblock_blocks(self.block_size) {
            return bad("bitmap_start", self.bitmap.start);
        }
        if self.bitmap.len != bitmap_blocks(self.max_blocks, self.block_size) {
            return bad("bitmap_blocks", self.bitmap.len);
        }
        if self.journal.start != self.bitmap.end() {
            return bad("journal_start", self.journal.start);
        }
        if self.image.start != self.journal.end() {
            return bad("image_start", self.image.start);
        }
        if self.image.len == 0 {
            return bad("image_blocks", 0);
        }
        if self.data.start != self.image.end() {
            return bad("data_start", self.data.start);
        }
        match self.data.start.checked_add(self.data.len) {
            Some(end) if end == self.total_blocks && self.data.len >= MIN_DATA_BLOCKS => Ok(()),
            _ => bad("data_blocks", self.data.len),
        }
    }

    /// Byte offset of `block` on the carrier.
    pub fn offset_of(&self, block: u64) -> u64 {
        assert!(
            block < self.total_blocks,
            "block {block} past the member's {} blocks",
            self.total_blocks
        );
        block * u64::from(self.block_size)
    }

    /// Blocks the allocator may hand out (image and data regions).
    pub fn allocatable(&self) -> BlockRange {
        BlockRange { start: self.image.start, len: self.total_blocks - self.image.start }
    }

    /// Bytes of the member.
    pub fn capacity_bytes(&self) -> u64 {
        self.total_blocks * u64::from(self.block_size)
    }
}

/// Where one member lies in the volume's block space: member `k`'s block `i` is the volume's
/// block `base + i` (FORMAT.md, "Members").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberSpan {
    /// The member's block 0 in the volume's block space.
    pub base: u64,
    /// The member's own geometry (at its cap: the span never moves).
    pub layout: Layout,
}

impl MemberSpan {
    /// One past the member's last block in the volume's block space (its cap: a growing
    /// member keeps its whole span reserved).
    pub fn end(&self) -> u64 {
        self.base + self.layout.max_blocks
    }
}

/// The geometry of a volume of one or more members: the concatenation of their spans,
/// member 0 first. Member 0 holds the journal and the commit point; members 1.. have no
/// journal and a default image region, as [`Layout::for_member`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeGeometry {
    /// Every member's span, in member order.
    pub spans: Vec<MemberSpan>,
}

impl VolumeGeometry {
    /// A volume of one member.
    pub fn single(layout: Layout) -> VolumeGeometry {
        VolumeGeometry { spans: vec![MemberSpan { base: 0, layout }] }
    }

    /// Member 0's geometry `first` followed by members of `capacities` blocks each.
    pub fn new(first: Layout, capacities: &[u64]) -> Result<VolumeGeometry> {
        // Several members: member 0 is at its cap (a member is added only once it grew
        // there), so the block space has no hole.
        if !capacities.is_empty() && first.can_grow() {
            return Err(Error::Invalid(Invalid::MaxSize {
                max_bytes: first.max_blocks * u64::from(first.block_size),
                capacity_bytes: first.capacity_bytes(),
            }));
        }
        let mut spans = vec![MemberSpan { base: 0, layout: first }];
        for &cap in capacities {
            let base = spans.last().map_or(0, MemberSpan::end);
            let layout = Layout::for_member(first.block_size, cap)?;
            if base.checked_add(layout.max_blocks).is_none_or(|end| end >= 1 << 48) {
                return Err(Error::Invalid(Invalid::Capacity {
                    bytes: cap.saturating_mul(u64::from(first.block_size)),
                }));
            }
            spans.push(MemberSpan { base, layout });
        }
        Ok(VolumeGeometry { spans })
    }

    /// Members in the volume.
    pub fn count(&self) -> usize {
        self.spans.len()
    }

    /// The volume's block space as one layout: member 0's superblocks, bitmap, journal and
    /// image region; a data region from member 0's to the last member's end (holding the
    /// other members' fixed regions, which are always in use). Equal to member 0's layout
    /// for a volume of one member.
    pub fn layout(&self) -> Layout {
        let first = self.spans[0].layout;
        let last = self.spans[self.spans.len() - 1];
        let total_blocks = last.base + last.layout.total_blocks;
        let max_blocks = last.end();
        Layout {
            total_blocks,
            max_blocks,
            data: BlockRange { start: first.data.start, len: total_blocks - first.data.start },
            ..first
        }
    }

    /// This geometry with every member at its cap (the IO layer's area checks).
    pub fn at_cap(&self) -> VolumeGeometry {
        let spans = self
            .spans
            .iter()
            .map(|s| MemberSpan { base: s.base, layout: s.layout.grown_to(s.layout.max_blocks) })
            .collect();
        VolumeGeometry { spans }
    }

    /// The member holding volume block `block`.
    pub fn member_of(&self, block: u64) -> Option<usize> {
        self.spans.iter().position(|s| block >= s.base && block < s.end())
    }

    /// The runs no allocation may take: every member's superblocks, bitmap and journal.
    pub fn fixed_runs(&self) -> Vec<BlockRange> {
        self.spans.iter().map(|s| BlockRange { start: s.base, len: s.layout.image.start }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_contiguous_and_aligned() {
        let l = Layout::for_format(64 << 20, 4096, 1 << 20, None).unwrap();
        assert_eq!(l.total_blocks, 16384);
        assert_eq!(l.bitmap.start, 2);
        assert_eq!(l.bitmap.len, 1);
        assert_eq!(l.journal, BlockRange { start: 3, len: 256 });
        assert_eq!(l.image.start, 259);
        assert_eq!(l.data.end(), l.total_blocks);
        let big = Layout::for_format(64 << 20, 65536, 0, None).unwrap();
        assert_eq!(big.bitmap.start, 1, "both superblocks share block 0 at 64 KiB blocks");
    }

    #[test]
    fn tiny_or_odd_geometries_are_refused() {
        assert!(Layout::for_format(64 * 4096, 4096, 0, None).is_err());
        assert!(Layout::for_format(64 << 20, 3000, 0, None).is_err());
        assert!(Layout::for_format(64 << 20, 2048, 0, None).is_err());
        let mut l = Layout::for_format(64 << 20, 4096, 0, None).unwrap();
        l.data.len -= 1;
        assert!(l.validate(0).is_err());
    }
}
