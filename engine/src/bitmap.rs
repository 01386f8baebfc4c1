//! The block bitmap of a member and the allocator built on it (FORMAT.md, "Bitmap").
//!
//! On the carrier, bit `i` (byte `i / 8`, bit `i % 8`) is set when block `i` is in use by the
//! committed image: the fixed regions (superblocks, bitmap, journal), every metadata block and
//! every extent. It is authoritative only in a clean volume whose `bitmap_checksum` matches;
//! otherwise open rebuilds it as the reachable set of the image.
//!
//! In memory the allocator keeps two sets. `live` is what the next commit's bitmap will say:
//! the blocks the in-memory namespace reaches. `held` is what may not be handed out although
//! no live structure uses it: blocks freed since the last completed commit (the previous
//! image still references them and recovery may fall back to it), blocks of removed files that
//! still have open handles, and blocks a write is filling before it attaches them. A block is
//! allocatable only when it is in neither set.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::layout::{BlockRange, Layout, VolumeGeometry};

/// A fixed-size set of block indexes.
#[derive(Clone, PartialEq, Eq)]
pub struct Bitmap {
    words: Vec<u64>,
    len: u64,
}

impl std::fmt::Debug for Bitmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bitmap({} of {} set)", self.count_ones(), self.len)
    }
}

impl Bitmap {
    pub fn new(len: u64) -> Bitmap {
        Bitmap { words: vec![0; len.div_ceil(64) as usize], len }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: u64) -> bool {
        assert!(i < self.len, "bit {i} past {}", self.len);
        self.words[(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    pub fn set(&mut self, i: u64) {
        assert!(i < self.len, "bit {i} past {}", self.len);
        self.words[(i / 64) as usize] |= 1 << (i % 64);
    }

    pub fn clear(&mut self, i: u64) {
        assert!(i < self.len, "bit {i} past {}", self.len);
        self.words[(i / 64) as usize] &= !(1 << (i % 64));
    }

    /// Extends the set to `len` bits; the new ones are clear.
    pub fn grow(&mut self, len: u64) {
        assert!(len >= self.len, "a bitmap only grows");
        self.words.resize(len.div_ceil(64) as usize, 0);
        self.len = len;
    }

    pub fn set_range(&mut self, r: BlockRange) {
        (r.start..r.end()).for_each(|i| self.set(i));
    }

    pub fn count_ones(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    pub fn word(&self, index: usize) -> u64 {
        self.words[index]
    }

    /// Set bits of `self` that are clear in `other`.
    pub fn difference(&self, other: &Bitmap) -> Vec<u64> {
        assert_eq!(self.len, other.len);
        let mut out = Vec::new();
        for (w, (a, b)) in self.words.iter().zip(&other.words).enumerate() {
            let mut diff = a & !b;
            while diff != 0 {
                let bit = u64::from(diff.trailing_zeros());
                out.push(w as u64 * 64 + bit);
                diff &= diff - 1;
            }
        }
        out
    }

    /// The on-disk bytes: `bytes_len` bytes, little-endian words, zero padded.
    pub fn encode(&self, bytes_len: usize) -> Vec<u8> {
        let mut out = vec![0u8; bytes_len];
        for (i, w) in self.words.iter().enumerate() {
            let at = i * 8;
            if at + 8 <= out.len() {
                out[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
        }
        out
    }

    /// The on-disk bytes of words `[first_word, first_word + words)`, zero past the end.
    pub fn encode_words(&self, first_word: usize, words: usize) -> Vec<u8> {
        let mut out = vec![0u8; words * 8];
        for i in 0..words {
            if let Some(w) = self.words.get(first_word + i) {
                out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
        }
        out
    }

    /// The on-disk bytes of the `bits` bits from `first` (a multiple of 64: one member's
    /// share of the volume's bitmap), padded with zeros to `bytes_len`.
    pub fn encode_span(&self, first: u64, bits: u64, bytes_len: usize) -> Vec<u8> {
        assert!(first.is_multiple_of(64) && bits.is_multiple_of(64), "span {first}+{bits}");
        let words = ((bits / 64) as usize).min(bytes_len / 8);
        let mut out = self.encode_words((first / 64) as usize, words);
        out.resize(bytes_len, 0);
        out
    }

    /// Sets the bits of `bytes` (one member's on-disk bitmap of `bits` bits) at bit `first`
    /// of this bitmap (a multiple of 64).
    pub fn or_span(&mut self, first: u64, bits: u64, bytes: &[u8]) {
        assert!(first.is_multiple_of(64), "span at {first}");
        let part = Bitmap::decode(bytes, bits);
        for (i, w) in part.words.iter().enumerate() {
            if let Some(dst) = self.words.get_mut((first / 64) as usize + i) {
                *dst |= w;
            }
        }
    }

    /// Decodes the on-disk bytes of a bitmap of `len` bits.
    pub fn decode(bytes: &[u8], len: u64) -> Bitmap {
        let mut b = Bitmap::new(len);
        for (i, w) in b.words.iter_mut().enumerate() {
            let at = i * 8;
            if at + 8 <= bytes.len() {
                let mut word = [0u8; 8];
                word.copy_from_slice(&bytes[at..at + 8]);
                *w = u64::from_le_bytes(word);
            }
        }
        b
    }
}

/// Blocks data allocations leave free, so that a full volume can still commit the metadata
/// that frees space (removing files is itself a commit).
pub const META_RESERVE_BLOCKS: u64 = 32;

/// Why a set of blocks is held back from allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Freed since the last completed commit; released when the next commit completes.
    UntilCommit,
    /// Owned by a removed file that is still open, or by a write in flight.
    Pinned,
}

/// Block allocation over one member.
#[derive(Debug, Clone)]
pub struct Allocator {
    layout: Layout,
    live: Bitmap,
    held: Bitmap,
    /// Blocks to release from `held` once the next commit completes.
    release_after_commit: Vec<BlockRange>,
    /// Bitmap-region blocks whose `live` bits changed since the last commit wrote them.
    dirty_bitmap_blocks: BTreeSet<u64>,
    busy: u64,
    meta_cursor: u64,
    data_cursor: u64,
}

impl Allocator {
    /// An allocator whose live set is `live` (the reachable set of an image, or a fresh
    /// volume's fixed regions).
    pub fn new(layout: Layout, live: Bitmap) -> Allocator {
        assert_eq!(live.len(), layout.total_blocks);
        let busy = live.count_ones();
        Allocator {
            layout,
            held: Bitmap::new(layout.total_blocks),
            live,
            release_after_commit: Vec::new(),
            dirty_bitmap_blocks: BTreeSet::new(),
            busy,
            meta_cursor: layout.image.start,
            data_cursor: layout.data.start,
        }
    }

    /// The set a fresh volume starts with: the fixed regions of every member.
    pub fn fixed_regions(geometry: &VolumeGeometry) -> Bitmap {
        let mut b = Bitmap::new(geometry.layout().total_blocks);
        for run in geometry.fixed_runs() {
            b.set_range(run);
        }
        b
    }

    /// A member of `layout` (the volume's layout with it) joined: its blocks are the new end
    /// of the block space, its fixed `runs` in use, the rest free (`Volume::add_member`).
    pub fn add_member(&mut self, layout: Layout, fixed: BlockRange) {
        let old = self.layout.total_blocks;
        assert!(layout.total_blocks > old && fixed.start == old, "member at {}", fixed.start);
        self.grow(layout);
        self.take(fixed, false);
    }

    pub fn live(&self) -> &Bitmap {
        &self.live
    }

    pub fn free_blocks(&self) -> u64 {
        self.layout.total_blocks - self.busy
    }

    fn is_free(&self, b: u64) -> bool {
        !self.live.get(b) && !self.held.get(b)
    }

    fn mark_dirty(&mut self, block: u64) {
        let bits_per_block = u64::from(self.layout.block_size) * 8;
        self.dirty_bitmap_blocks.insert(block / bits_per_block);
    }

    /// The first free run at or after `from` inside `region`, at most `want` long.
    fn run_from(&self, region: BlockRange, from: u64, want: u64) -> Option<BlockRange> {
        let mut b = from.max(region.start);
        while b < region.end() {
            let w = (b / 64) as usize;
            let used = self.live.word(w) | self.held.word(w);
            if used == u64::MAX {
                b = (b / 64 + 1) * 64;
                continue;
            }
            if !self.is_free(b) {
                b += 1;
                continue;
            }
            let mut end = b + 1;
            while end < region.end() && end - b < want && self.is_free(end) {
                end += 1;
            }
            return Some(BlockRange { start: b, len: end - b });
        }
        None
    }

    /// First fit of a run of `want` blocks, starting at `cursor` and wrapping once.
    fn first_fit(
        &self,
        region: BlockRange,
        cursor: u64,
        want: u64,
        whole: bool,
    ) -> Option<BlockRange> {
        for (from, until) in [(cursor, region.end()), (region.start, cursor)] {
            let mut at = from;
            while let Some(run) = self.run_from(region, at, want) {
                if run.start >= until {
                    break;
                }
                if !whole || run.len == want {
                    return Some(run);
                }
                at = run.end();
            }
        }
        None
    }

    /// First free run of exactly `want` blocks starting at a multiple of `align`, starting at
    /// `cursor` and wrapping once.
    fn aligned_fit(
        &self,
        region: BlockRange,
        cursor: u64,
        want: u64,
        align: u64,
    ) -> Option<BlockRange> {
        let span = want.checked_add(align - 1)?;
        for (from, until) in [(cursor, region.end()), (region.start, cursor)] {
            let mut at = from;
            while let Some(run) = self.run_from(region, at, span) {
                if run.start >= until {
                    break;
                }
                let start = run.start.next_multiple_of(align);
                if start + want <= run.end() {
                    return Some(BlockRange { start, len: want });
                }
                at = run.end();
            }
        }
        None
    }

    fn take(&mut self, run: BlockRange, hold: bool) {
        for b in run.start..run.end() {
            assert!(self.is_free(b), "allocating busy block {b}");
            if hold {
                self.held.set(b);
            } else {
                self.live.set(b);
                self.mark_dirty(b);
            }
        }
        self.busy += run.len;
    }

    /// One metadata block (image region first), live at once.
    pub fn alloc_meta(&mut self) -> Result<u64> {
        for region in [self.layout.image, self.layout.data] {
            let cursor = if region == self.layout.image { self.meta_cursor } else { region.start };
            if let Some(run) = self.first_fit(region, cursor, 1, true) {
                self.take(run, false);
                if region == self.layout.image {
                    self.meta_cursor = run.end();
                }
                return Ok(run.start);
            }
        }
        Err(Error::NoSpace)
    }

    /// `want` data blocks, as few runs as the free space allows, held (not live) until
    /// [`Allocator::attach`]. `after` asks for a run that continues the file's last extent.
    pub fn alloc_data(&mut self, want: u64, after: Option<u64>) -> Result<Vec<BlockRange>> {
        self.alloc_data_aligned(want, after, 1)
    }

    /// [`Allocator::alloc_data`], and when the run cannot continue the file's last extent,
    /// one whole free run starting at a multiple of `align` blocks is preferred (before any
    /// other fit): a large write then sits on the carrier where the host's page cache holds
    /// it in whole large pages (an unaligned 1 MiB write on a buffered carrier file costs
    /// about a tenth more kernel time). The blocks skipped to reach the alignment stay free.
    pub fn alloc_data_aligned(
        &mut self,
        want: u64,
        after: Option<u64>,
        align: u64,
    ) -> Result<Vec<BlockRange>> {
        if want.saturating_add(META_RESERVE_BLOCKS) > self.free_blocks() {
            return Err(Error::NoSpace);
        }
        let mut runs = Vec::new();
        let mut left = want;
        if let Some(next) =
            after.filter(|&n| n < self.layout.total_blocks && n >= self.layout.image.start)
            && let Some(run) =
                self.run_from(self.layout.allocatable(), next, left).filter(|r| r.start == next)
        {
            self.take(run, true);
            left -= run.len;
            runs.push(run);
        }
        if runs.is_empty()
            && align > 1
            && let Some(run) = self.aligned_fit(self.layout.data, self.data_cursor, left, align)
        {
            self.take(run, true);
            self.data_cursor = run.end();
            left = 0;
            runs.push(run);
        }
        for region in [self.layout.data, self.layout.image] {
            for whole in [true, false] {
                while left > 0 {
                    let cursor =
                        if region == self.layout.data { self.data_cursor } else { region.start };
                    let Some(run) = self.first_fit(region, cursor, left, whole) else { break };
                    self.take(run, true);
                    if region == self.layout.data {
                        self.data_cursor = run.end();
                    }
                    left -= run.len;
                    runs.push(run);
                }
            }
        }
        assert_eq!(left, 0, "free count said {} blocks were free", self.free_blocks());
        Ok(runs)
    }

    /// The member grew to `layout` (auto-grow): the new blocks are free.
    pub fn grow(&mut self, layout: Layout) {
        assert!(layout.total_blocks >= self.layout.total_blocks);
        self.live.grow(layout.total_blocks);
        self.held.grow(layout.total_blocks);
        self.layout = layout;
    }

    /// The geometry the allocator hands blocks out of.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Holds exactly `run` for a replayed attach (the live path allocated it before the
    /// crash). False, and nothing held, when the run leaves the allocatable regions or any
    /// block of it is already owned: a journal record that claims it is inconsistent.
    pub fn claim(&mut self, run: BlockRange) -> bool {
        let area = self.layout.allocatable();
        let inside = run.len > 0
            && run.start >= area.start
            && run.start.checked_add(run.len).is_some_and(|end| end <= area.end());
        if !inside || (run.start..run.end()).any(|b| !self.is_free(b)) {
            return false;
        }
        self.take(run, true);
        true
    }

    /// Makes held blocks live: the write that filled them attached them to a file.
    pub fn attach(&mut self, run: BlockRange) {
        for b in run.start..run.end() {
            assert!(self.held.get(b) && !self.live.get(b), "attaching block {b} that was not held");
            self.held.clear(b);
            self.live.set(b);
            self.mark_dirty(b);
        }
    }

    /// A live run leaves the image. It stays held, as `hold` says, until reusing it is safe.
    pub fn free(&mut self, run: BlockRange, hold: Hold) {
        for b in run.start..run.end() {
            assert!(self.live.get(b) && !self.held.get(b), "freeing block {b} that is not live");
            self.live.clear(b);
            self.held.set(b);
            self.mark_dirty(b);
        }
        if hold == Hold::UntilCommit {
            self.release_after_commit.push(run);
        }
    }

    /// A pinned run (its last handle closed) becomes releasable after the next commit.
    pub fn unpin(&mut self, run: BlockRange) {
        for b in run.start..run.end() {
            assert!(self.held.get(b), "unpinning block {b} that is not held");
        }
        self.release_after_commit.push(run);
    }

    /// True when `block` belongs to the image or a file, or is held for a write in flight.
    pub fn is_owned(&self, block: u64) -> bool {
        self.live.get(block) || self.held.get(block)
    }

    /// Runs that become reusable when the next commit completes.
    pub fn pending_release(&self) -> &[BlockRange] {
        &self.release_after_commit
    }

    /// Called once a commit is durable: everything freed before it may be reused.
    pub fn commit_completed(&mut self) {
        for run in std::mem::take(&mut self.release_after_commit) {
            for b in run.start..run.end() {
                assert!(self.held.get(b), "releasing block {b} that is not held");
                self.held.clear(b);
            }
            self.busy -= run.len;
        }
    }

    /// Bitmap-region blocks to write in the next commit, and clears the set.
    pub fn take_dirty_bitmap_blocks(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.dirty_bitmap_blocks).into_iter().collect()
    }

    pub fn has_dirty_bitmap(&self) -> bool {
        !self.dirty_bitmap_blocks.is_empty()
    }

    /// Marks every bitmap-region block dirty (a rebuilt bitmap is written whole).
    pub fn mark_all_bitmap_dirty(&mut self) {
        let bits_per_block = u64::from(self.layout.block_size) * 8;
        self.dirty_bitmap_blocks.extend(0..self.layout.max_blocks.div_ceil(bits_per_block));
    }

    /// Checks that the counters agree with the sets (tests and fuzzers call this).
    pub fn check_invariants(&self) {
        let mut union = self.live.clone();
        for (i, w) in union.words.iter_mut().enumerate() {
            assert_eq!(*w & self.held.words[i], 0, "a block is both live and held in word {i}");
            *w |= self.held.words[i];
        }
        assert_eq!(union.count_ones(), self.busy, "busy count disagrees with the sets");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc() -> Allocator {
        let layout = Layout::for_format(16 << 20, 4096, 0, Some(64)).unwrap();
        Allocator::new(layout, Allocator::fixed_regions(&VolumeGeometry::single(layout)))
    }

    #[test]
    fn encode_decode_round_trip() {
        let mut b = Bitmap::new(200);
        for i in [0, 1, 63, 64, 65, 199] {
            b.set(i);
        }
        let bytes = b.encode(4096);
        assert_eq!(bytes[0], 0b11);
        assert_eq!(Bitmap::decode(&bytes, 200), b);
    }

    #[test]
    fn freed_blocks_wait_for_the_commit() {
        let mut a = alloc();
        let runs = a.alloc_data(10, None).unwrap();
        for r in &runs {
            a.attach(*r);
        }
        let before = a.free_blocks();
        for r in &runs {
            a.free(*r, Hold::UntilCommit);
        }
        assert_eq!(a.free_blocks(), before, "freed blocks are not reusable before the commit");
        let again = a.alloc_data(10, None).unwrap();
        assert!(
            again.iter().all(|r| runs.iter().all(|o| r.end() <= o.start || r.start >= o.end()))
        );
        a.commit_completed();
        assert_eq!(a.free_blocks(), before);
        a.check_invariants();
    }

    #[test]
    fn large_runs_start_aligned_and_the_skipped_blocks_stay_free() {
        let mut a = alloc();
        let small = a.alloc_data(3, None).unwrap();
        let big = a.alloc_data_aligned(64, None, 32).unwrap();
        assert_eq!(big.len(), 1);
        assert_eq!(big[0].start % 32, 0);
        assert_eq!(big[0].len, 64);
        // Continuing the extent wins over the alignment.
        let next = a.alloc_data_aligned(64, Some(big[0].end()), 32).unwrap();
        assert_eq!(next[0].start, big[0].end());
        // The blocks skipped to reach the alignment stay free, and are handed out later.
        let gap = small[0].end()..big[0].start;
        assert!(gap.clone().all(|b| !a.is_owned(b)));
        let rest = a.alloc_data(a.free_blocks() - META_RESERVE_BLOCKS, None).unwrap();
        assert!(gap.clone().all(|b| rest.iter().any(|r| r.start <= b && b < r.end())));
        a.check_invariants();
    }

    #[test]
    fn extends_contiguously_and_spills_into_the_image_region() {
        let mut a = alloc();
        let first = a.alloc_data(4, None).unwrap();
        assert_eq!(first.len(), 1);
        let next = a.alloc_data(4, Some(first[0].end())).unwrap();
        assert_eq!(next[0].start, first[0].end());
        let free = a.free_blocks() - META_RESERVE_BLOCKS;
        let all = a.alloc_data(free, None).unwrap();
        assert_eq!(all.iter().map(|r| r.len).sum::<u64>(), free);
        assert!(matches!(a.alloc_data(1, None), Err(Error::NoSpace)));
        for _ in 0..META_RESERVE_BLOCKS {
            a.alloc_meta().unwrap();
        }
        assert!(matches!(a.alloc_meta(), Err(Error::NoSpace)));
        a.check_invariants();
    }
}
