//! The two IO tiers of file data and their coherence (design: "Two IO tiers, one switch").
//!
//! The data path says which tier a request takes and where its bytes are on the carrier; this
//! module owns everything that keeps the tiers coherent with each other and with the page
//! cache, so the policy is written once:
//! - **Buffered reads** go through the cache, a miss reading ahead along the contiguous run of
//!   the file's extent within the file's readahead window ([`Readahead`]); a sequential
//!   reader also has the readahead threads load the windows after that (`writeback.rs`).
//! - **Direct reads** first write back the dirty pages they overlap (and wait for writebacks
//!   in flight there), then read the carrier straight into the caller's buffer; a writeback
//!   that failed meanwhile fails the read instead of returning older bytes.
//! - **Buffered writes** land in the cache as dirty pages, unless the volume is
//!   write-through (they go straight to the carrier, durable on return) or they are at least
//!   [`WRITE_AROUND_BYTES`] long (copying them through the cache only to write them back at
//!   once halved sequential throughput: docs/BENCHMARKS.md, "cache").
//! - **Direct writes** (and write-around) supersede the cached pages they cover: a dirty page
//!   they cover only in part is written back first (its other bytes must survive), every page
//!   of the range is dropped before the write (waiting for writebacks in flight, so no stale
//!   writeback lands after it) and again after it (a buffered read that missed meanwhile may
//!   have loaded the old bytes).

use super::cache::PageCache;
use super::{Area, Session, writeback};
use crate::error::{Error, Result};

/// Which path a file's reads or writes take (design: "Two IO tiers, one switch").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tier {
    /// Through the volume's page cache: a read hit is a copy, a miss reads the run of the
    /// file's extent around it; a write lands in the cache and the writeback thread or the
    /// next sync takes it to the carrier (straight through, updating nothing, under
    /// write-through). Without a cache it is the direct tier.
    #[default]
    Buffered,
    /// Bypasses the cache (the "unbuffered" hint): for scans, backups, log appends. A direct
    /// write drops the cached pages it covers; a direct read first writes back the dirty pages
    /// it overlaps. Unaligned requests still work (the carrier bounces them).
    Direct,
}

/// A buffered write of at least this many contiguous bytes goes around the cache, as a
/// direct write does (dropping the pages it covers, marking the volume unflushed so that the
/// next sync takes its barrier).
pub(crate) const WRITE_AROUND_BYTES: u64 = 256 << 10;

/// Windows queued for the readahead threads ahead of a sequential reader.
pub(crate) const ASYNC_WINDOWS: u64 = 4;

/// The smallest readahead window, in blocks.
const READAHEAD_MIN_BLOCKS: u64 = 4;

/// Readahead state of one file's buffered reads: a read that starts where the last one
/// ended doubles the window (up to the longest run a miss reads); any other read resets it.
#[derive(Debug, Default)]
pub(crate) struct Readahead {
    next: u64,
    window: u64,
    sequential: bool,
    /// Where the windows handed to the readahead threads end (a physical block).
    frontier: u64,
}

impl Readahead {
    /// The window, in pages of `page_size`, for a read of `len` bytes at file offset
    /// `offset`; remembers where it ends.
    pub(crate) fn next_window(&mut self, offset: u64, len: u64, page_size: usize) -> u64 {
        let max = (writeback::MAX_READ_RUN_BYTES / page_size) as u64;
        self.sequential = offset == self.next && self.window > 0;
        self.window = if self.sequential {
            (self.window * 2).min(max)
        } else {
            READAHEAD_MIN_BLOCKS.min(max)
        };
        self.next = offset + len;
        self.window
    }

    /// The windows the readahead threads should load for a sequential reader whose last
    /// read reads ahead (synchronously) up to physical block `ra_until` of an extent that
    /// ends at `extent_end`: whole windows, keeping about [`ASYNC_WINDOWS`] of them queued
    /// past `ra_until` (reads in flight on every thread, so the carrier does not wait for the
    /// reader), and none for a reader that is not sequential.
    pub(crate) fn next_async(&mut self, ra_until: u64, extent_end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if !self.sequential || self.window == 0 {
            return out;
        }
        let depth = ASYNC_WINDOWS * self.window;
        // Behind the reader, or far ahead of it (it moved to another place): start afresh.
        if self.frontier < ra_until || self.frontier > ra_until + depth {
            self.frontier = ra_until;
        }
        // Whole windows only (the last one of the extent may be shorter): a reader of small
        // requests moves `ra_until` a block at a time, and a window per block would be a
        // carrier read per page.
        while self.frontier < extent_end && self.frontier + self.window <= ra_until + depth {
            let end = extent_end.min(self.frontier + self.window);
            out.push((self.frontier, end));
            self.frontier = end;
        }
        out
    }
}

impl Session<'_> {
    /// Reads file data at carrier byte `at` into `dst` through `tier`. `ra_until` (a block
    /// number) bounds a buffered read's readahead: the end of the extent's contiguous run,
    /// or less.
    pub(crate) fn read_data(
        &self,
        tier: Tier,
        at: u64,
        dst: &mut [u8],
        ra_until: u64,
    ) -> Result<()> {
        match self.io.cache() {
            Some(cache) if tier == Tier::Buffered => cache.read(self, at, dst, ra_until),
            Some(cache) => {
                let bs = cache.page_size() as u64;
                let errors = self.io.errors();
                cache.flush_blocks(self, at / bs, (at + dst.len() as u64).div_ceil(bs))?;
                if self.io.errors() != errors {
                    // A writeback of these pages failed: the carrier holds older bytes.
                    return Err(Error::Poisoned);
                }
                self.read(Area::Data, at, dst)
            }
            None => self.read(Area::Data, at, dst),
        }
    }

    /// Writes file data `bytes` at carrier byte `at` through `tier`; `durable` (the carrier
    /// is write-through) makes the write durable on return. Returns whether it went to the
    /// cache (then [`Session::after_buffered_writes`] follows the request).
    pub(crate) fn write_data(
        &self,
        tier: Tier,
        at: u64,
        bytes: &[u8],
        durable: bool,
    ) -> Result<bool> {
        let cache = self.io.cache();
        // Write-back only where a write may sit in a cache: under write-through a write is
        // durable when it returns, so it goes straight to the carrier (the raft log's
        // appends).
        if let Some(c) = cache.filter(|_| tier == Tier::Buffered && !durable)
            && (bytes.len() as u64) < WRITE_AROUND_BYTES
        {
            c.write(self, at, bytes)?;
            return Ok(true);
        }
        self.superseding(at, bytes.len() as u64, |s| {
            if durable {
                s.write_durable(Area::Data, at, bytes)
            } else {
                s.write(Area::Data, at, bytes)
            }
        })?;
        Ok(false)
    }

    /// Writes `len` bytes of zeros from `zeros` (a buffer of at least one chunk) at carrier
    /// byte `at`, as plain writes the caller makes durable with its own barrier before
    /// anything references them (preallocation).
    pub(crate) fn write_zeros(&self, at: u64, len: u64, zeros: &[u8]) -> Result<()> {
        assert!(!zeros.is_empty(), "a zero buffer");
        self.superseding(at, len, |s| {
            let (mut pos, mut left) = (at, len);
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                s.write_fill(pos, &zeros[..n])?;
                pos += n as u64;
                left -= n as u64;
            }
            Ok(())
        })
    }

    /// After buffered writes: wakes the writeback thread, or drains in this thread above the
    /// hard line.
    pub(crate) fn after_buffered_writes(&self) -> Result<()> {
        writeback::after_write(self.io, self)
    }

    /// Runs `write` of carrier bytes `[at, at + len)` around the cached pages it supersedes
    /// (see the module docs).
    fn superseding(
        &self,
        at: u64,
        len: u64,
        write: impl FnOnce(&Self) -> Result<()>,
    ) -> Result<()> {
        let Some(cache) = self.io.cache() else { return write(self) };
        before_direct_write(cache, self, at, len)?;
        write(self)?;
        let ps = cache.page_size() as u64;
        cache.discard(at / ps, (at + len).div_ceil(ps));
        Ok(())
    }
}

/// The cached pages a direct write of `[offset, offset + len)` supersedes: a dirty page it
/// covers only in part is written back first (its other bytes must survive), then every
/// page of the range is dropped (waiting for writebacks in flight, so none lands after).
fn before_direct_write(cache: &PageCache, s: &Session<'_>, offset: u64, len: u64) -> Result<()> {
    let ps = cache.page_size() as u64;
    let (first, end) = (offset / ps, (offset + len).div_ceil(ps));
    if !offset.is_multiple_of(ps) {
        cache.flush_blocks(s, first, first + 1)?;
    }
    if !(offset + len).is_multiple_of(ps) {
        cache.flush_blocks(s, end - 1, end)?;
    }
    cache.discard(first, end);
    Ok(())
}
