//! The OS boundary: the only `unsafe` in the engine. Each call wraps one syscall, checks its
//! return value and converts it into `io::Result`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// BLKGETSIZE64 = _IOR(0x12, 114, u64); the libc crate does not export it on every target.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// Takes (or fails to take) a BSD `flock` on the open file description: it is not dropped when
/// another descriptor of the same file closes, unlike classic POSIX locks.
pub fn flock(fd: BorrowedFd<'_>, exclusive: bool) -> io::Result<()> {
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB;
    loop {
        // SAFETY: `fd` is a valid open descriptor for the duration of the call; flock takes
        // no pointers.
        match check(unsafe { libc::flock(fd.as_raw_fd(), op) }) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other.map(|_| ()),
        }
    }
}

/// One `pwritev2(RWF_DSYNC)`: returns the bytes written, which are on stable storage.
pub fn pwrite_dsync(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
    let iov = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    loop {
        // SAFETY: `iov` points at `buf`, which stays borrowed (and unmodified) until the call
        // returns; the kernel only reads through it and keeps no pointer.
        let ret =
            unsafe { libc::pwritev2(fd.as_raw_fd(), &raw const iov, 1, offset, libc::RWF_DSYNC) };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn offset_t(offset: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))
}

/// One `preadv`: reads into `bufs` in order from `offset`; returns the bytes read.
pub fn preadv(
    fd: BorrowedFd<'_>,
    bufs: &mut [io::IoSliceMut<'_>],
    offset: u64,
) -> io::Result<usize> {
    let offset = offset_t(offset)?;
    let count = libc::c_int::try_from(bufs.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many buffers"))?;
    loop {
        // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` on Unix (std's guarantee); each
        // points at a live, writable buffer borrowed for the duration of the call, and the
        // kernel keeps no pointer after it returns.
        let ret = unsafe {
            libc::preadv(fd.as_raw_fd(), bufs.as_mut_ptr().cast::<libc::iovec>(), count, offset)
        };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// One `pwritev`: writes `bufs` in order from `offset`; returns the bytes written.
pub fn pwritev(fd: BorrowedFd<'_>, bufs: &[io::IoSlice<'_>], offset: u64) -> io::Result<usize> {
    let offset = offset_t(offset)?;
    let count = libc::c_int::try_from(bufs.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many buffers"))?;
    loop {
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std's guarantee); each
        // points at a live buffer borrowed (and unmodified) for the duration of the call; the
        // kernel only reads through them and keeps no pointer.
        let ret = unsafe {
            libc::pwritev(fd.as_raw_fd(), bufs.as_ptr().cast::<libc::iovec>(), count, offset)
        };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Direct-IO alignment from `statx(STATX_DIOALIGN)`: `(memory, offset)`, or `None` where the
/// kernel or file system does not report it.
pub fn dio_alignment(fd: BorrowedFd<'_>) -> Option<(u32, u32)> {
    // SAFETY: an all-zero `statx` is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the empty path with AT_EMPTY_PATH makes statx describe `fd`; `stx` is a live,
    // writable struct of the right type for the duration of the call.
    let ret = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &raw mut stx,
        )
    };
    if ret != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// The fundamental block size of the file system holding `fd` (`fstatvfs`: `f_frsize`, or
/// `f_bsize` where a file system leaves that 0): the unit it allocates and maps in.
pub fn fs_block_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: an all-zero `statvfs` is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a valid open descriptor for the duration of the call, and `st` is a
    // live, writable struct of the right type; fstatvfs keeps no pointer.
    check(unsafe { libc::fstatvfs(fd.as_raw_fd(), &raw mut st) })?;
    let unit = if st.f_frsize > 0 { st.f_frsize } else { st.f_bsize };
    #[allow(clippy::useless_conversion, reason = "the field is a u32 on 32-bit targets")]
    Ok(u64::from(unit))
}

/// Size of a block device in bytes (BLKGETSIZE64; `fstat` reports 0 for devices).
pub fn block_device_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at `size`.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), BLKGETSIZE64 as _, &raw mut size) })?;
    Ok(size)
}

/// Logical sector size of a block device (BLKSSZGET).
pub fn logical_sector_size(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points at `size`.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::BLKSSZGET as _, &raw mut size) })?;
    u32::try_from(size).map_err(|_| io::Error::other("negative sector size"))
}

/// Physical sector size of a block device (BLKPBSZGET).
pub fn physical_sector_size(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut size: libc::c_uint = 0;
    // SAFETY: BLKPBSZGET writes one unsigned int through the pointer, which points at `size`.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::BLKPBSZGET as _, &raw mut size) })?;
    Ok(size)
}

/// Asks the kernel to back the whole pages of `buf` with transparent huge pages, where the
/// system allows it (`madvise(MADV_HUGEPAGE)`): a large buffer touched for the first time
/// then faults in 2 MiB at a time instead of 4 KiB. Advice only: the bytes do not change.
pub fn advise_huge_pages(buf: &mut [u8]) -> io::Result<()> {
    const PAGE: usize = 4096;
    let start = buf.as_mut_ptr() as usize;
    let first = start.next_multiple_of(PAGE);
    let end = (start + buf.len()) / PAGE * PAGE;
    if end <= first {
        return Ok(());
    }
    // SAFETY: `[first, end)` lies within `buf`, which is borrowed mutably for the call;
    // MADV_HUGEPAGE changes how the kernel backs these pages, never what they hold.
    check(unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) })?;
    Ok(())
}
