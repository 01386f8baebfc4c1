//! The data path: reads, writes, size changes and preallocation of one file.
//!
//! A write into blocks the file already maps goes in place, and with write-through it is
//! durable when it returns; that is how the raft log appends into its preallocated segments
//! with one carrier write and no commit. A write that needs new blocks fills them first
//! (whole blocks: zeros around the data, so holes and tails read as zeros) and attaches them
//! to the file only after the carrier write returned: data reaches the carrier before any
//! metadata references it, and a commit running in between never sees a half-filled block.
//!
//! Bytes past the end of a file are unspecified on the carrier; every extension zeroes the
//! gap between the old end and the new data, so they never become visible.
//!
//! Which tier a request takes is the file handle's policy; how the tiers stay coherent with
//! the page cache (write-around, flush before a direct read, discard around a direct write,
//! readahead) is the IO layer's (`io::tiers`): this module only plans extents and bytes.

use std::sync::MutexGuard;

use super::{Inner, InodeIo, IoPolicy, Meta, Tier, WriteConcurrency, grow, lock, now_ns};
use crate::carrier::AlignedBuf;
use crate::error::{Error, Invalid, Result};
use crate::format::consts::MAX_FILE_SIZE;
use crate::io::{IO_ALIGN, Io};
use crate::layout::BlockRange;

/// Zero-fill chunk for preallocation.
const ZERO_CHUNK: usize = 1 << 20;

/// Where a write starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum At {
    Offset(u64),
    /// At the end of the file, decided atomically with the write (append).
    End,
}

/// One piece of a carrier write: bytes of the caller's buffer, or zeros.
#[derive(Debug, Clone)]
enum Piece {
    Data(std::ops::Range<usize>),
    Zeros(usize),
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Piece::Data(r) => r.len(),
            Piece::Zeros(n) => *n,
        }
    }
}

/// A physically contiguous carrier write.
#[derive(Debug)]
struct Segment {
    offset: u64,
    /// Sum of the pieces' lengths.
    len: u64,
    pieces: Vec<Piece>,
}

#[derive(Debug, Default)]
struct Plan {
    segments: Vec<Segment>,
    /// Blocks allocated (held) for this write: logical start, physical run.
    new_runs: Vec<(u64, BlockRange)>,
}

impl Plan {
    fn push(&mut self, offset: u64, piece: Piece) {
        if piece.len() == 0 {
            return;
        }
        let n = piece.len() as u64;
        if let Some(last) = self.segments.last_mut()
            && last.offset + last.len == offset
        {
            last.len += n;
            // Adjacent pieces of the same kind merge, so a write over contiguous blocks stays
            // one slice of the caller's buffer (no assembly copy, and direct IO straight
            // from it when it is aligned).
            match (last.pieces.last_mut(), piece) {
                (Some(Piece::Data(r)), Piece::Data(next)) if r.end == next.start => {
                    r.end = next.end;
                }
                (Some(Piece::Zeros(z)), Piece::Zeros(more)) => *z += more,
                (_, piece) => last.pieces.push(piece),
            }
            return;
        }
        self.segments.push(Segment { offset, len: n, pieces: vec![piece] });
    }
}

enum Gate<'a> {
    Volume(#[allow(dead_code)] MutexGuard<'a, ()>),
    File(#[allow(dead_code)] MutexGuard<'a, ()>),
}

fn gate<'a>(inner: &'a Inner, io: &'a InodeIo) -> Gate<'a> {
    match inner.options.concurrency {
        WriteConcurrency::Serial => Gate::Volume(lock(&inner.gate)),
        WriteConcurrency::ParallelSegments => Gate::File(lock(&io.write)),
    }
}

fn read_lock(io: &InodeIo) -> std::sync::RwLockReadGuard<'_, ()> {
    io.rw.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn check_end(offset: u64, len: usize) -> Result<u64> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= MAX_FILE_SIZE => Ok(end),
        _ => {
            Err(Error::Invalid(Invalid::FileTooLarge { bytes: offset.saturating_add(len as u64) }))
        }
    }
}

/// Reads up to `buf.len()` bytes at `offset`; returns how many (short at end of file).
///
/// Buffered (with a cache): each mapped run goes through the cache, a miss reading ahead
/// along the contiguous run of the file's extent (within the file's readahead window).
/// Direct: dirty cached pages of the range are written back first, then the carrier is read
/// straight into `buf`.
pub(crate) fn read_at(
    inner: &Inner,
    ino: u64,
    io: &InodeIo,
    policy: IoPolicy,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize> {
    inner.usable()?;
    let _rw = read_lock(io);
    let bs = u64::from(inner.layout.block_size);
    // Per run: logical block, physical block, blocks, physical end of its extent.
    let (n, runs) = {
        let meta = inner.meta();
        let inode = meta.ns.get(ino).ok_or(Error::Closed)?;
        if offset >= inode.size || buf.is_empty() {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(inode.size - offset) as usize;
        let end = offset + n as u64;
        let runs: Vec<(u64, u64, u64, u64)> = inode
            .mapped_runs(offset / bs, end.div_ceil(bs))
            .into_iter()
            .map(|(lb, pb, len)| {
                let extent_end = inode
                    .extents
                    .range(..lb + len)
                    .next_back()
                    .map_or(pb + len, |(_, e)| e.physical + e.len);
                (lb, pb, len, extent_end)
            })
            .collect();
        (n, runs)
    };
    let window = match inner.io.cache() {
        Some(c) if policy.read == Tier::Buffered => {
            lock(&io.readahead).next_window(offset, n as u64, c.page_size())
        }
        _ => 0,
    };
    // The window after the last run's readahead, within its extent: loaded by the readahead
    // thread while this reader consumes what this read brought in.
    let mut ahead = None;
    let end = offset + n as u64;
    let session = inner.io.session()?;
    let mut filled = offset;
    for (lb, pb, len, extent_end) in runs {
        let lo = (lb * bs).max(offset);
        let hi = ((lb + len) * bs).min(end);
        buf[(filled - offset) as usize..(lo - offset) as usize].fill(0);
        let at = pb * bs + (lo - lb * bs);
        let dst = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
        let ra_until = extent_end.min((at + dst.len() as u64).div_ceil(bs) + window);
        session.read_data(policy.read, at, dst, ra_until)?;
        ahead = Some((ra_until, extent_end));
        filled = hi;
    }
    drop(session);
    if let Some((ra_until, extent_end)) = ahead.filter(|_| window > 0) {
        let windows = lock(&io.readahead).next_async(ra_until, extent_end);
        for (first, until) in windows {
            inner.io.prefetch(first, until);
        }
    }
    buf[(filled - offset) as usize..n].fill(0);
    Ok(n)
}

/// A read of several files spans at most this many bytes of the carrier.
const MANY_SPAN_BYTES: u64 = 4 << 20;

/// Runs of different files at most this far apart on the carrier are read as one span
/// (the bytes between them are read and dropped): on this machine's disk a separate request
/// costs about as much as reading 256 KiB more.
const MANY_GAP_BYTES: u64 = 64 << 10;

/// Reads each of `files` (inode and IO state) whole, as [`read_at`] from offset 0 up to its
/// size would through the direct tier, but fetches the runs that lie near each other on
/// the carrier with one read: a log of a thousand groups opens its thousand small meta
/// files with a few requests instead of a thousand.
///
/// Coherent as a direct read is: the dirty cached pages of each span are written back
/// first, and a writeback that fails meanwhile fails the read.
pub(crate) fn read_many(inner: &Inner, files: &[(u64, &InodeIo)]) -> Result<Vec<Vec<u8>>> {
    inner.usable()?;
    // Each inode's lock once (a file named twice is read twice, locked once: a second read
    // lock of one thread may deadlock behind a waiting writer).
    let mut inodes: Vec<(u64, &InodeIo)> = files.to_vec();
    inodes.sort_unstable_by_key(|&(ino, _)| ino);
    inodes.dedup_by_key(|&mut (ino, _)| ino);
    let _rw: Vec<_> = inodes.iter().map(|(_, io)| read_lock(io)).collect();
    let bs = u64::from(inner.layout.block_size);
    let mut out = Vec::with_capacity(files.len());
    // Per mapped run: physical block, blocks, file, byte offset in the file.
    let mut runs: Vec<(u64, u64, usize, u64)> = Vec::new();
    {
        let meta = inner.meta();
        for (i, &(ino, _)) in files.iter().enumerate() {
            let inode = meta.ns.get(ino).ok_or(Error::Closed)?;
            out.push(vec![0u8; inode.size as usize]);
            for (lb, pb, len) in inode.mapped_runs(0, inode.size.div_ceil(bs)) {
                runs.push((pb, len, i, lb * bs));
            }
        }
    }
    runs.sort_unstable();
    let session = inner.io.session()?;
    let mut k = 0;
    while k < runs.len() {
        let start = runs[k].0;
        let mut end = start + runs[k].1;
        let mut next = k + 1;
        while let Some(&(pb, len, ..)) = runs.get(next)
            && pb >= end
            && (pb - end) * bs <= MANY_GAP_BYTES
            && (pb + len - start) * bs <= MANY_SPAN_BYTES
        {
            end = pb + len;
            next += 1;
        }
        // Backed by huge pages: on this machine's disk a direct read into 4 KiB pages is a
        // request of one segment per page, and the meta files of a thousand groups (8 MiB)
        // took 7 ms to read into them against 3.5 ms.
        let mut span = AlignedBuf::zeroed_huge(((end - start) * bs) as usize, IO_ALIGN);
        session.read_data(Tier::Direct, start * bs, span.as_mut_slice(), 0)?;
        for &(pb, len, i, at) in &runs[k..next] {
            let file = &mut out[i];
            let at = (at as usize).min(file.len());
            let n = ((len * bs) as usize).min(file.len() - at);
            let from = ((pb - start) * bs) as usize;
            file[at..at + n].copy_from_slice(&span.as_slice()[from..from + n]);
        }
        k = next;
    }
    Ok(out)
}

/// Carrier alignment of a large new run: a write of at least [`ALIGN_BYTES`] that cannot
/// continue the file's last extent starts at a multiple of it on the carrier.
const ALIGN_BYTES: u64 = 1 << 20;

/// The alignment, in blocks, `alloc_data_aligned` is asked for when allocating `want` blocks.
fn alignment(inner: &Inner, want: u64) -> u64 {
    let bs = u64::from(inner.layout.block_size);
    if want.saturating_mul(bs) >= ALIGN_BYTES { (ALIGN_BYTES / bs).max(1) } else { 1 }
}

/// Allocates the unmapped blocks of logical `[first, last]`, held until attached.
fn allocate_gaps(
    inner: &Inner,
    meta: &mut Meta,
    ino: u64,
    first: u64,
    last: u64,
) -> Result<Vec<(u64, BlockRange)>> {
    // The gaps, planned from one look at the inode (nothing attaches while the write holds
    // its gate): start, length and the physical block that would continue the mapping.
    let gaps: Vec<(u64, u64, Option<u64>)> = {
        let inode = meta.ns.get(ino).ok_or(Error::Closed)?;
        let mut gaps = Vec::new();
        let mut lb = first;
        for (l, _, n) in inode.mapped_runs(first, last + 1) {
            if l > lb {
                gaps.push((lb, l - lb));
            }
            lb = l + n;
        }
        if lb <= last {
            gaps.push((lb, last + 1 - lb));
        }
        gaps.into_iter()
            .map(|(s, n)| {
                (s, n, s.checked_sub(1).and_then(|p| inode.physical_of(p)).map(|p| p + 1))
            })
            .collect()
    };
    let mut out = Vec::new();
    for (gap_start, want, after) in gaps {
        let mut logical = gap_start;
        let align = alignment(inner, want);
        let runs = match meta.alloc.alloc_data_aligned(want, after, align) {
            Err(Error::NoSpace) if grow::grow(inner, meta, want)? => {
                meta.alloc.alloc_data_aligned(want, after, align)?
            }
            other => other?,
        };
        if let Some(end) = runs.iter().map(BlockRange::end).max() {
            grow::ensure_carrier_len(inner, meta, end)?;
        }
        for run in runs {
            out.push((logical, run));
            logical += run.len;
        }
    }
    Ok(out)
}

/// The zeroing an extension from `size` to beyond needs in the file's last partial block.
fn tail_zeroing(meta: &Meta, ino: u64, size: u64, new_end: u64, bs: u64) -> Option<(u64, usize)> {
    if size.is_multiple_of(bs) || new_end <= size {
        return None;
    }
    let lb = size / bs;
    let pb = meta.ns.get(ino)?.physical_of(lb)?;
    let len = new_end.min((lb + 1) * bs) - size;
    Some((pb * bs + (size - lb * bs), len as usize))
}

fn plan_write(inner: &Inner, meta: &mut Meta, ino: u64, offset: u64, len: usize) -> Result<Plan> {
    let bs = u64::from(inner.layout.block_size);
    let end = offset + len as u64;
    let size = meta.ns.get(ino).ok_or(Error::Closed)?.size;
    let (first, last) = (offset / bs, (end - 1) / bs);
    let mut plan = Plan::default();
    // The gap between the old end and the write, inside the old last block.
    if let Some((at, n)) = tail_zeroing(meta, ino, size, offset, bs) {
        plan.push(at, Piece::Zeros(n));
    }
    plan.new_runs = allocate_gaps(inner, meta, ino, first, last)?;
    // Run by run, not block by block: the blocks already mapped and the ones just allocated
    // (fresh: zeros around the data where the write covers them only in part).
    let inode = meta.ns.get(ino).ok_or(Error::Closed)?;
    let mut runs: Vec<(u64, u64, u64, bool)> =
        inode.mapped_runs(first, last + 1).into_iter().map(|(l, p, n)| (l, p, n, false)).collect();
    runs.extend(plan.new_runs.iter().map(|&(l, r)| (l, r.start, r.len, true)));
    runs.sort_unstable_by_key(|r| r.0);
    let mut next = first;
    for (lb, pb, n, fresh) in runs {
        assert_eq!(lb, next, "the write's blocks are mapped without gaps or overlaps");
        next = lb + n;
        let (block_lo, block_hi) = (lb * bs, (lb + n) * bs);
        let (lo, hi) = (offset.max(block_lo), end.min(block_hi));
        let data = Piece::Data((lo - offset) as usize..(hi - offset) as usize);
        if fresh {
            plan.push(pb * bs, Piece::Zeros((lo - block_lo) as usize));
            plan.push(pb * bs + (lo - block_lo), data);
            plan.push(pb * bs + (hi - block_lo), Piece::Zeros((block_hi - hi) as usize));
        } else {
            plan.push(pb * bs + (lo - block_lo), data);
        }
    }
    assert_eq!(next, last + 1, "every block of the write is mapped");
    Ok(plan)
}

fn execute(inner: &Inner, plan: &Plan, data: &[u8], policy: IoPolicy) -> Result<()> {
    let session = inner.io.session()?;
    let durable = inner.io.options.write_through;
    let mut cached = false;
    for seg in &plan.segments {
        let total = seg.len as usize;
        debug_assert_eq!(total, seg.pieces.iter().map(Piece::len).sum::<usize>());
        let assembled;
        let bytes: &[u8] = match seg.pieces.as_slice() {
            [Piece::Data(r)] => &data[r.clone()],
            pieces => {
                let mut buf = Io::buffer(total);
                let mut at = 0;
                for p in pieces {
                    if let Piece::Data(r) = p {
                        buf.as_mut_slice()[at..at + r.len()].copy_from_slice(&data[r.clone()]);
                    }
                    at += p.len();
                }
                assembled = buf;
                assembled.as_slice()
            }
        };
        cached |= session.write_data(policy.write, seg.offset, bytes, durable)?;
    }
    if cached {
        session.after_buffered_writes()?;
    }
    Ok(())
}

/// Asserts that every block `plan` writes belongs to the file or was allocated for this
/// write: a data write that reached a superblock, the bitmap, an image block or another
/// file's block would corrupt the volume.
fn assert_owned(inner: &Inner, meta: &Meta, plan: &Plan) {
    let bs = u64::from(inner.layout.block_size);
    for seg in &plan.segments {
        for b in seg.offset / bs..(seg.offset + seg.len).div_ceil(bs) {
            assert!(
                meta.alloc.layout().allocatable().contains(b) && meta.alloc.is_owned(b),
                "data write to block {b}, which no file owns"
            );
        }
    }
}

/// Writes `data` at `at`; returns the offset written at.
pub(crate) fn write_at(
    inner: &Inner,
    ino: u64,
    io: &InodeIo,
    policy: IoPolicy,
    at: At,
    data: &[u8],
) -> Result<u64> {
    inner.writable()?;
    let _rw = read_lock(io);
    let _gate = gate(inner, io);
    let (offset, plan) = {
        let mut meta = inner.meta();
        let size = meta.ns.get(ino).ok_or(Error::Closed)?.size;
        let offset = match at {
            At::Offset(o) => o,
            At::End => size,
        };
        check_end(offset, data.len())?;
        if data.is_empty() {
            return Ok(offset);
        }
        let plan = plan_write(inner, &mut meta, ino, offset, data.len())?;
        assert_owned(inner, &meta, &plan);
        (offset, plan)
    };
    execute(inner, &plan, data, policy)?;
    let mut meta = inner.meta();
    let m = &mut *meta;
    for &(logical, run) in &plan.new_runs {
        m.ns.attach_extent(ino, logical, run, &mut m.alloc);
    }
    // An in-place overwrite changes no metadata: the modification time moves only with the
    // size or the mapping, so a write-through overwrite leaves nothing for a commit to do.
    let end = offset + data.len() as u64;
    let size = m.ns.get(ino).map_or(0, |i| i.size);
    if end > size || !plan.new_runs.is_empty() {
        m.ns.set_size(ino, size.max(end), now_ns());
    }
    Ok(offset)
}

/// Truncates or extends the file to `len` bytes (an extension is a hole).
pub(crate) fn set_len(
    inner: &Inner,
    ino: u64,
    io: &InodeIo,
    policy: IoPolicy,
    len: u64,
) -> Result<()> {
    inner.writable()?;
    check_end(len, 0)?;
    let _rw = io.rw.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let bs = u64::from(inner.layout.block_size);
    let mut meta = inner.meta();
    let size = meta.ns.get(ino).ok_or(Error::Closed)?.size;
    if len < size {
        let m = &mut *meta;
        m.ns.truncate_blocks(ino, len.div_ceil(bs), &mut m.alloc);
    } else if let Some((at, n)) = tail_zeroing(&meta, ino, size, len, bs) {
        let mut plan = Plan::default();
        plan.push(at, Piece::Zeros(n));
        assert_owned(inner, &meta, &plan);
        execute(inner, &plan, &[], policy)?;
    }
    meta.ns.set_size(ino, len, now_ns());
    Ok(())
}

/// Allocates and zero-fills every unmapped block of `[offset, offset + len)`, and extends the
/// file to cover it: the blocks are written and non-sparse, so later writes into them are
/// pure overwrites (no allocation, no commit).
pub(crate) fn preallocate(
    inner: &Inner,
    ino: u64,
    io: &InodeIo,
    offset: u64,
    len: u64,
) -> Result<()> {
    inner.writable()?;
    let end = check_end(offset, len as usize)?;
    if len == 0 {
        return Ok(());
    }
    let _rw = read_lock(io);
    let _gate = gate(inner, io);
    let bs = u64::from(inner.layout.block_size);
    let (mut plan, size) = {
        let mut meta = inner.meta();
        let size = meta.ns.get(ino).ok_or(Error::Closed)?.size;
        let mut plan = Plan::default();
        if let Some((at, n)) = tail_zeroing(&meta, ino, size, end, bs) {
            plan.push(at, Piece::Zeros(n));
        }
        plan.new_runs = allocate_gaps(inner, &mut meta, ino, offset / bs, (end - 1) / bs)?;
        assert_owned(inner, &meta, &plan);
        (plan, size)
    };
    for &(_, run) in &plan.new_runs.clone() {
        plan.push(run.start * bs, Piece::Zeros((run.len * bs) as usize));
    }
    // The zeros are written with plain writes and made durable with one barrier, before the
    // extents become visible: a later write-through overwrite then lands on written blocks,
    // and no commit can publish an extent whose zeros are still in a cache.
    let zero = Io::buffer(ZERO_CHUNK);
    let session = inner.io.session()?;
    for seg in &plan.segments {
        // Only zeros here; adjacent pieces have merged, so a piece may exceed one chunk.
        session.write_zeros(seg.offset, seg.len, zero.as_slice())?;
    }
    if !plan.segments.is_empty() {
        session.barrier()?;
    }
    drop(session);
    let mut meta = inner.meta();
    let m = &mut *meta;
    for &(logical, run) in &plan.new_runs {
        m.ns.attach_extent(ino, logical, run, &mut m.alloc);
    }
    m.ns.set_size(ino, size.max(end), now_ns());
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::carrier::CarrierOptions;
    use crate::{FormatOptions, Volume, VolumeOptions};

    const MIB: usize = 1 << 20;

    /// A large write that starts a file lands 1 MiB-aligned on the carrier (whole large pages
    /// in the host's cache), and an overwrite of it is exactly one carrier write of its bytes:
    /// no zeros, no metadata, no barrier.
    #[test]
    fn a_large_first_run_is_aligned_and_an_overwrite_is_one_carrier_write() {
        let dir = tempfile::tempdir().unwrap();
        let format = FormatOptions::journaled(32 << 20);
        let v = Volume::create_path(
            &dir.path().join("v.vlm"),
            &format,
            CarrierOptions::BUFFERED,
            VolumeOptions::default(),
        )
        .unwrap();
        // A small file first, so the data cursor sits off any alignment.
        v.create_file("/small").unwrap().write_at(b"x", 0).unwrap();
        let f = v.create_file("/big").unwrap();
        let data = vec![7u8; MIB];
        f.write_at(&data, 0).unwrap();
        f.write_at(&data, MIB as u64).unwrap();
        let bs = u64::from(v.inner.layout.block_size);
        let extents = f.extents().unwrap();
        assert_eq!(extents.len(), 1, "the second MiB continues the first: {extents:?}");
        assert_eq!(extents[0].physical_block * bs % MIB as u64, 0, "{extents:?}");
        let before = v.io_counts();
        f.write_at(&data, 0).unwrap();
        let after = v.io_counts();
        let data_area = 3; // IoCounts: superblocks, bitmap, image, data, journal
        assert_eq!(after.writes[data_area] - before.writes[data_area], 1);
        assert_eq!(after.write_bytes[data_area] - before.write_bytes[data_area], MIB as u64);
        assert_eq!(
            after.write_bytes.iter().sum::<u64>() - before.write_bytes.iter().sum::<u64>(),
            MIB as u64
        );
        assert_eq!(after.barriers, before.barriers);
        assert_eq!(f.read_to_end().unwrap().len(), 2 * MIB);
    }
}
