//! The part of the file and device carriers that is the same: positional IO on one open
//! descriptor, direct-IO alignment absorbed through bounce buffers, write-through by
//! `pwritev2(RWF_DSYNC)` (or, on block devices, a write and one cache flush), barriers by
//! `fdatasync`.
//!
//! Vectored direct IO over scattered buffers (the page cache's frames) goes through one
//! contiguous bounce buffer: the kernel makes every 4 KiB buffer its own segment of the
//! request, and on this machine's disk a 2 MiB read scattered over 512 frames ran at 0.71x
//! the same read into contiguous memory (writes 0.59x, in a one-off A/B; the cache suite's
//! cold scan shows the effect). The bounce buffers are backed by huge pages, which such a
//! disk reads into faster still (`AlignedBuf::zeroed_huge`). The copy runs at memory speed,
//! several times the disk's (the cache suite's all-cached scan copies at 5x a raw read).
//! Buffers that already sit end to end in memory, and carriers without direct IO (the host
//! copies anyway), go to the kernel as is.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use super::{CarrierOptions, CarrierStats, Geometry, sys};
use crate::aligned::{AlignedBuf, covering, is_aligned};

/// Bytes zero-filled per write when a thin carrier grows.
const ZERO_CHUNK: usize = 1 << 20;
/// Bounce buffers kept for vectored direct IO: one per concurrent caller (the reader, two
/// readahead threads, the writeback thread); more callers allocate and drop their own.
const BOUNCES_KEPT: usize = 4;
/// Largest bounce buffer kept (a readahead window); larger requests allocate their own.
const BOUNCE_KEPT_BYTES: usize = 2 << 20;
/// Largest vectored request gathered into one bounce buffer (a writeback drain); a larger
/// one goes in pieces of at most this size.
const BOUNCE_MAX_BYTES: usize = 8 << 20;

#[derive(Debug)]
pub(crate) struct FdCore {
    file: File,
    options: CarrierOptions,
    geometry: Geometry,
    len_bytes: AtomicU64,
    /// Serializes read-modify-write of partial sectors, so two unaligned writes that share a
    /// sector cannot lose each other's bytes.
    rmw: Mutex<()>,
    /// Set when the kernel refused RWF_DSYNC; durable writes then fall back to write +
    /// `fdatasync`, and the fallback barrier is counted.
    no_rwf_dsync: AtomicBool,
    /// Durable writes are a plain write followed by one cache flush instead of RWF_DSYNC.
    /// On a block device the kernel implements an O_DSYNC direct write as a FUA write *and*
    /// a flush (`generic_write_sync` after the FUA bio), and emulates FUA with a second flush
    /// on devices without it: two flushes where one is enough (measured by the `devops`
    /// benchmark at the block layer's tracepoint).
    flush_writes: bool,
    /// Reusable bounce buffers for scattered vectored direct IO (see the module docs).
    bounces: Mutex<Vec<AlignedBuf>>,
    stats: CarrierStats,
}

fn read_only_error() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "carrier is open read-only")
}

impl FdCore {
    pub(crate) fn new(file: File, options: CarrierOptions, geometry: Geometry) -> FdCore {
        FdCore {
            file,
            options,
            len_bytes: AtomicU64::new(geometry.len_bytes),
            geometry,
            rmw: Mutex::new(()),
            no_rwf_dsync: AtomicBool::new(false),
            flush_writes: false,
            bounces: Mutex::new(Vec::new()),
            stats: CarrierStats::default(),
        }
    }

    /// A core over one host file opened (or not) with O_DIRECT according to `options`: the
    /// `local://` medium's files (issue 24). The geometry's length is irrelevant there (the
    /// medium keeps the logical length); the alignment is what `statx` reports, or 4096.
    pub(crate) fn for_host_file(file: File, options: CarrierOptions) -> FdCore {
        let (mem_align, offset_align) = if options.direct_io {
            sys::dio_alignment(file.as_fd()).unwrap_or((4096, 4096))
        } else {
            (1, 1)
        };
        let geometry = Geometry {
            len_bytes: 0,
            logical_sector: 512,
            physical_sector: 4096,
            mem_align,
            offset_align,
        };
        FdCore::new(file, options, geometry)
    }

    /// The open file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Makes durable writes a write plus one flush (block devices; see `flush_writes`).
    pub(crate) fn with_flush_writes(mut self) -> FdCore {
        self.flush_writes = true;
        self
    }

    pub(crate) fn options(&self) -> CarrierOptions {
        self.options
    }

    pub(crate) fn stats(&self) -> &CarrierStats {
        &self.stats
    }

    pub(crate) fn geometry(&self) -> Geometry {
        Geometry { len_bytes: self.len_bytes.load(Ordering::Acquire), ..self.geometry }
    }

    fn direct_aligned(&self, buf: &[u8], offset: u64) -> bool {
        !self.options.direct_io
            || is_aligned(buf, offset, self.geometry.mem_align, self.geometry.offset_align)
    }

    /// Positional read; bytes past the end of the file read as zeros (thin carriers).
    fn pread_full(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    buf[done..].fill(0);
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub(crate) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.direct_aligned(buf, offset) {
            self.pread_full(buf, offset)?;
        } else {
            let (start, end) = covering(offset, buf.len(), self.geometry.offset_align);
            let mut bounce =
                AlignedBuf::zeroed((end - start) as usize, self.geometry.mem_align as usize);
            self.pread_full(bounce.as_mut_slice(), start)?;
            let at = (offset - start) as usize;
            buf.copy_from_slice(&bounce.as_slice()[at..at + buf.len()]);
        }
        self.stats.record_read(buf.len());
        Ok(())
    }

    /// True when a vectored request can go to the kernel as is (buffers aligned, lengths
    /// and the offset whole units; always when buffered).
    fn vectored_aligned<B: std::ops::Deref<Target = [u8]>>(&self, bufs: &[B], offset: u64) -> bool {
        let (ma, oa) =
            (self.geometry.mem_align.max(1) as usize, u64::from(self.geometry.offset_align.max(1)));
        !self.options.direct_io
            || (offset.is_multiple_of(oa)
                && bufs.iter().all(|b| {
                    (b.as_ptr() as usize).is_multiple_of(ma) && (b.len() as u64).is_multiple_of(oa)
                }))
    }

    /// Reads into `bufs` in order from `offset` with `preadv` (bytes past the end of a thin
    /// carrier read as zeros), or one read per buffer when they are not aligned for it.
    pub(crate) fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if bufs.len() > 512 || !self.vectored_aligned(bufs, offset) {
            let mut at = offset;
            for b in bufs.iter_mut() {
                self.read_exact_at(b, at)?;
                at += b.len() as u64;
            }
            return Ok(());
        }
        if self.scattered(bufs) {
            let mut at = offset;
            for piece in pieces(bufs.iter().map(|b| b.len())) {
                let len: usize = piece.clone().map(|i| bufs[i].len()).sum();
                let mut bounce = self.take_bounce(len);
                self.pread_full(&mut bounce.as_mut_slice()[..len], at)?;
                let mut from = 0;
                for i in piece {
                    let n = bufs[i].len();
                    bufs[i].copy_from_slice(&bounce.as_slice()[from..from + n]);
                    from += n;
                }
                self.give_bounce(bounce);
                at += len as u64;
            }
            self.stats.record_read(total);
            return Ok(());
        }
        let mut slices: Vec<io::IoSliceMut<'_>> =
            bufs.iter_mut().map(|b| io::IoSliceMut::new(b)).collect();
        let mut rest = &mut slices[..];
        let mut at = offset;
        while !rest.is_empty() {
            let n = sys::preadv(self.file.as_fd(), rest, at)?;
            if n == 0 {
                for s in rest.iter_mut() {
                    s.fill(0);
                }
                break;
            }
            at += n as u64;
            io::IoSliceMut::advance_slices(&mut rest, n);
        }
        self.stats.record_read(total);
        Ok(())
    }

    /// Writes `bufs` in order from `offset` with `pwritev` (a plain write: durable after a
    /// barrier), or one write per buffer when they are not aligned for it.
    pub(crate) fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        if self.options.read_only {
            return Err(read_only_error());
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if bufs.len() > 512 || !self.vectored_aligned(bufs, offset) {
            let mut at = offset;
            for b in bufs {
                self.write_at(b, at, false)?;
                at += b.len() as u64;
            }
            return Ok(());
        }
        if self.scattered(bufs) {
            let mut at = offset;
            for piece in pieces(bufs.iter().map(|b| b.len())) {
                let mut bounce = self.take_bounce(piece.clone().map(|i| bufs[i].len()).sum());
                let mut len = 0;
                for i in piece {
                    let n = bufs[i].len();
                    bounce.as_mut_slice()[len..len + n].copy_from_slice(bufs[i]);
                    len += n;
                }
                let written = self.file.write_all_at(&bounce.as_slice()[..len], at);
                self.give_bounce(bounce);
                written?;
                at += len as u64;
            }
            self.note_len(offset + total as u64);
            self.stats.record_write(total, None);
            return Ok(());
        }
        let mut slices: Vec<io::IoSlice<'_>> = bufs.iter().map(|b| io::IoSlice::new(b)).collect();
        let mut rest = &mut slices[..];
        let mut at = offset;
        while !rest.is_empty() {
            let n = sys::pwritev(self.file.as_fd(), rest, at)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
            }
            at += n as u64;
            io::IoSlice::advance_slices(&mut rest, n);
        }
        self.note_len(offset + total as u64);
        self.stats.record_write(total, None);
        Ok(())
    }

    /// True when a vectored direct request should go through a bounce buffer: more than one
    /// buffer, and not all of them end to end in memory.
    fn scattered<B: std::ops::Deref<Target = [u8]>>(&self, bufs: &[B]) -> bool {
        self.options.direct_io
            && bufs.len() > 1
            && bufs.windows(2).any(|w| w[0].as_ptr().wrapping_add(w[0].len()) != w[1].as_ptr())
    }

    /// A bounce buffer of at least `len` bytes, aligned for direct IO (a kept one if any).
    fn take_bounce(&self, len: usize) -> AlignedBuf {
        let kept = {
            let mut bounces =
                self.bounces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let at = bounces.iter().position(|b| b.len() >= len);
            at.map(|i| bounces.swap_remove(i))
        };
        kept.unwrap_or_else(|| {
            let size = if len <= BOUNCE_KEPT_BYTES { BOUNCE_KEPT_BYTES } else { len };
            AlignedBuf::zeroed_huge(size, self.geometry.mem_align.max(1) as usize)
        })
    }

    /// Keeps `bounce` for reuse when it is small enough and the pool is not full.
    fn give_bounce(&self, bounce: AlignedBuf) {
        if bounce.len() <= BOUNCE_KEPT_BYTES {
            let mut bounces =
                self.bounces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if bounces.len() < BOUNCES_KEPT {
                bounces.push(bounce);
            }
        }
    }

    pub(crate) fn write_at(&self, buf: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        if self.options.read_only {
            return Err(read_only_error());
        }
        if self.direct_aligned(buf, offset) {
            return self.write_raw(buf, offset, durable);
        }
        let oa = u64::from(self.geometry.offset_align);
        if offset.is_multiple_of(oa) && (buf.len() as u64).is_multiple_of(oa) {
            // Only the buffer address is off: one copy, no read.
            let mut bounce = AlignedBuf::zeroed(buf.len(), self.geometry.mem_align as usize);
            bounce.as_mut_slice().copy_from_slice(buf);
            return self.write_raw(bounce.as_slice(), offset, durable);
        }
        // Partial sectors: read-modify-write the covering aligned range.
        let _guard = self.rmw.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (start, end) = covering(offset, buf.len(), self.geometry.offset_align);
        let mut bounce =
            AlignedBuf::zeroed((end - start) as usize, self.geometry.mem_align as usize);
        self.pread_full(bounce.as_mut_slice(), start)?;
        let at = (offset - start) as usize;
        bounce.as_mut_slice()[at..at + buf.len()].copy_from_slice(buf);
        self.write_raw(bounce.as_slice(), start, durable)
    }

    fn write_raw(&self, buf: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        let started = Instant::now();
        if durable && self.options.write_through && self.flush_writes {
            // The write and its flush are one durable write of this carrier, not a barrier.
            self.file.write_all_at(buf, offset)?;
            self.file.sync_data()?;
            self.note_len(offset + buf.len() as u64);
            self.stats.record_write(buf.len(), Some(started.elapsed()));
            return Ok(());
        }
        if durable && self.options.write_through && !self.no_rwf_dsync.load(Ordering::Relaxed) {
            match self.pwrite_dsync_all(buf, offset) {
                Ok(()) => {
                    self.note_len(offset + buf.len() as u64);
                    self.stats.record_write(buf.len(), Some(started.elapsed()));
                    return Ok(());
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)) => {
                    tracing::warn!(
                        "RWF_DSYNC unsupported here; durable writes fall back to fdatasync"
                    );
                    self.no_rwf_dsync.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        self.file.write_all_at(buf, offset)?;
        self.note_len(offset + buf.len() as u64);
        if durable {
            self.barrier()?;
            self.stats.record_write(buf.len(), Some(started.elapsed()));
        } else {
            self.stats.record_write(buf.len(), None);
        }
        Ok(())
    }

    fn pwrite_dsync_all(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            let n = sys::pwrite_dsync(self.file.as_fd(), buf, offset)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev2 wrote nothing"));
            }
            buf = &buf[n..];
            offset += n as u64;
        }
        Ok(())
    }

    fn note_len(&self, end: u64) {
        self.len_bytes.fetch_max(end, Ordering::AcqRel);
    }

    pub(crate) fn barrier(&self) -> io::Result<()> {
        if self.options.read_only {
            return Ok(());
        }
        let started = Instant::now();
        self.file.sync_data()?;
        self.stats.record_barrier(started.elapsed());
        Ok(())
    }

    /// Grows the file to `len_bytes`: for real with zeros, or as a hole when `sparse`.
    pub(crate) fn grow(&self, len_bytes: u64, sparse: bool) -> io::Result<()> {
        if self.options.read_only {
            return Err(read_only_error());
        }
        let current = self.len_bytes.load(Ordering::Acquire);
        if len_bytes <= current {
            return Ok(());
        }
        if sparse {
            self.file.set_len(len_bytes)?;
        } else {
            let align = u64::from(self.geometry.offset_align);
            assert!(current.is_multiple_of(align), "thin carrier length {current} is unaligned");
            let zeros = AlignedBuf::zeroed(ZERO_CHUNK, self.geometry.mem_align as usize);
            let mut at = current;
            while at < len_bytes {
                let n = (len_bytes - at).min(ZERO_CHUNK as u64);
                let n = n.div_ceil(align) * align;
                self.file.write_all_at(&zeros.as_slice()[..n as usize], at)?;
                self.stats.record_write(n as usize, None);
                at += n;
            }
            self.note_len(at);
        }
        self.note_len(len_bytes);
        Ok(())
    }
}

/// Splits buffers of lengths `lens` into consecutive pieces of at most [`BOUNCE_MAX_BYTES`]
/// (a single buffer larger than that is a piece of its own).
fn pieces(lens: impl Iterator<Item = usize>) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut end, mut bytes) = (0, 0, 0);
    for len in lens {
        if bytes > 0 && bytes + len > BOUNCE_MAX_BYTES {
            out.push(start..end);
            (start, bytes) = (end, 0);
        }
        bytes += len;
        end += 1;
    }
    if end > start {
        out.push(start..end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn pieces_cover_every_buffer_once_within_the_bound() {
        let m = BOUNCE_MAX_BYTES;
        assert_eq!(pieces([4096; 3].into_iter()), vec![0..3]);
        assert_eq!(pieces([m / 2, m / 2, 1].into_iter()), vec![0..2, 2..3]);
        assert_eq!(pieces([m + 1, 1, m].into_iter()), vec![0..1, 1..2, 2..3]);
        assert!(pieces(std::iter::empty()).is_empty());
    }

    /// Scattered vectored direct IO (pages of one buffer in reverse order, so no two sit end
    /// to end) lands every byte where a plain write would, in one piece and in several.
    #[test]
    fn scattered_vectored_direct_io_goes_through_the_bounce_buffer_intact() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(dir.path().join("c"))
            .unwrap();
        let options = CarrierOptions { write_through: false, ..CarrierOptions::PRODUCTION };
        let core = FdCore::for_host_file(file, options);
        for pages in [3usize, 2 * BOUNCE_MAX_BYTES / 4096 + 5] {
            let mut src = AlignedBuf::zeroed(pages * 4096, 4096);
            for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
                *b = (i % 251) as u8 ^ (i / 4096) as u8;
            }
            let mut bufs: Vec<&[u8]> = src.as_slice().chunks(4096).collect();
            bufs.reverse();
            assert!(core.scattered(&bufs));
            core.write_vectored_at(&bufs, 8192).unwrap();
            let mut back = AlignedBuf::zeroed(pages * 4096, 4096);
            let mut outs: Vec<&mut [u8]> = back.as_mut_slice().chunks_mut(4096).collect();
            outs.reverse();
            core.read_vectored_at(&mut outs, 8192).unwrap();
            assert!(back.as_slice() == src.as_slice(), "{pages} pages came back changed");
            // On the carrier the pages lie in the order of the buffers: reversed.
            let mut plain = AlignedBuf::zeroed(4096, 4096);
            core.read_exact_at(plain.as_mut_slice(), 8192).unwrap();
            assert!(plain.as_slice() == &src.as_slice()[(pages - 1) * 4096..]);
        }
        assert!(core.bounces.lock().unwrap().len() <= BOUNCES_KEPT);
    }
}
