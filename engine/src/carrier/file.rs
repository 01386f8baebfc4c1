//! `FileCarrier`: one file on the host file system.
//!
//! The lock is a BSD `flock` on the carrier file itself (on a descriptor held for the
//! carrier's lifetime), exclusive for writers and shared for read-only openers, so a second
//! opener in this or another process gets `Locked`, whatever path it came by: a symlink, a
//! hard link or a bind mount reaches the same inode and so the same lock. The data descriptor
//! is opened after the lock is held and must name the same inode (`st_dev`, `st_ino`), so a
//! file swapped in under the path between the two opens is refused. Classic POSIX locks are
//! never used: they vanish when any descriptor of the file closes.
//!
//! Creation decides the physical knobs. Preallocated non-sparse writes the zeros for real
//! (buffered, then one `fdatasync`, then the file is reopened for direct IO): `fallocate`
//! alone leaves unwritten extents, and every first O_DSYNC write into one is a host journal
//! commit. Preallocated sparse sets the length only. Thin starts empty and grows as the
//! volume allocates. A created file's directory entry is made durable too (`fsync` of the
//! parent directory): POSIX promises it with nothing less, and a volume whose carrier's name
//! vanished at a power cut is a lost volume.
//!
//! The physical sector it reports (the unit a torn write can damage) is probed, never below
//! 4096 bytes: the largest of 4096, the direct-IO offset alignment (`statx`), the fundamental
//! block size of the host file system (`fstatvfs`: it allocates, maps and zeroes around
//! partial writes in those units, and writeback rewrites whole blocks), and the physical block
//! size of the block device under it, read from sysfs through the file's `st_dev`
//! (`/sys/dev/block/MAJ:MIN/queue/physical_block_size`, the parent disk's for a partition;
//! device-mapper and md devices report the largest of their stack). The 4096 floor is the
//! value this carrier always assumed: a file system on a device with smaller sectors still
//! writes back page-sized (4 KiB) units, and where no block device can be found (tmpfs, NFS,
//! FUSE, btrfs' anonymous devices) nothing smaller can be shown. The probes only ever raise
//! it: reporting less than the truth would let a torn write damage bytes the caller believes
//! are outside it, while reporting more only costs alignment (and the raft log refuses a unit
//! larger than 4096 by name).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::fd::FdCore;
use super::{Carrier, CarrierKind, CarrierOptions, CarrierStats, Geometry, sys};
use crate::aligned::AlignedBuf;
use crate::error::{Error, Result};

/// Bytes inspected when deciding whether an existing file or device "looks empty".
pub(crate) const EMPTY_PROBE_LEN: usize = 1 << 20;

/// Zero-fill chunk at creation.
const FILL_CHUNK: usize = 4 << 20;

/// How to create a file carrier.
#[derive(Clone, Copy)]
pub struct CreateOptions<'a> {
    /// Capacity of the volume in bytes.
    pub capacity_bytes: u64,
    /// Reserve the whole capacity now (false: thin, grows as used).
    pub preallocate: bool,
    /// Leave unwritten ranges as holes (false: every byte is written, predictable latency).
    pub sparse: bool,
    /// Overwrite an existing file that does not look empty.
    pub force: bool,
    /// Called with `(bytes done, bytes total)` while zero-filling.
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
}

impl std::fmt::Debug for CreateOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateOptions")
            .field("capacity_bytes", &self.capacity_bytes)
            .field("preallocate", &self.preallocate)
            .field("sparse", &self.sparse)
            .field("force", &self.force)
            .finish_non_exhaustive()
    }
}

/// A volume carrier backed by one host file.
#[derive(Debug)]
pub struct FileCarrier {
    core: FdCore,
    path: PathBuf,
    /// A descriptor of the carrier file that holds its `flock` for the carrier's lifetime.
    _lock: File,
}

fn open_error(path: &Path, source: io::Error) -> Error {
    Error::Open { path: path.to_owned(), source }
}

/// Attempts (10 ms apart) to take the lock before giving up with `Locked`.
const LOCK_RETRIES: u32 = 20;

/// Takes the carrier's `flock` on `file` (a descriptor of the carrier itself).
///
/// A lock just released may still be held for a moment by a copy of the descriptor: a
/// process forked by this one (any `Command::spawn`) holds every descriptor until its
/// `exec` closes them, and a `flock` lives as long as any copy. Such a holder is waited out
/// briefly before the carrier is called locked.
fn take_lock(file: File, path: &Path, exclusive: bool) -> Result<File> {
    let mut tries = 0;
    loop {
        match sys::flock(file.as_fd(), exclusive) {
            Ok(()) => return Ok(file),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && tries < LOCK_RETRIES => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(Error::Locked { path: path.to_owned() });
            }
            Err(e) => return Err(open_error(path, e)),
        }
    }
}

/// Makes the directory entry of `path` durable: `fsync` of its parent directory.
fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// True when `a` and `b` are descriptors of the same file (device and inode).
fn same_file(a: &File, b: &File) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (ma, mb) = (a.metadata()?, b.metadata()?);
    Ok(ma.dev() == mb.dev() && ma.ino() == mb.ino())
}

/// True when the first bytes of `file` are all zero (or the file is empty).
pub(crate) fn looks_empty(file: &File, len: u64) -> io::Result<bool> {
    let probe = (len.min(EMPTY_PROBE_LEN as u64)) as usize;
    let mut buf = AlignedBuf::zeroed(probe.next_multiple_of(4096), 4096);
    let mut done = 0;
    while done < probe {
        match file.read_at(&mut buf.as_mut_slice()[done..probe], done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(buf.as_slice()[..done].iter().all(|&b| b == 0))
}

impl FileCarrier {
    /// Creates (or, with `force`, overwrites) the carrier file and opens it with `options`.
    pub fn create(
        path: &Path,
        create: &CreateOptions<'_>,
        options: CarrierOptions,
    ) -> Result<FileCarrier> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(path)
            .map_err(|e| open_error(path, e))?;
        // Locked before anything is checked or written: a second creator, or an opener of the
        // file by another name, waits for nothing and gets `Locked`.
        let file = take_lock(file, path, true)?;
        let len = file.metadata().map_err(|e| open_error(path, e))?.len();
        if !create.force && len > 0 && !looks_empty(&file, len).map_err(|e| open_error(path, e))? {
            return Err(Error::NotEmpty { path: path.to_owned() });
        }
        let fill = |f: &File| -> io::Result<()> {
            f.set_len(0)?;
            if create.preallocate {
                f.set_len(create.capacity_bytes)?;
                if !create.sparse {
                    zero_fill(f, create.capacity_bytes, create.progress)?;
                }
            }
            f.sync_all()?;
            sync_parent_dir(path)
        };
        fill(&file).map_err(|e| open_error(path, e))?;
        let carrier = Self::open_locked(path, options, file)?;
        carrier.core.stats().record_dir_sync();
        Ok(carrier)
    }

    /// Opens an existing carrier file.
    pub fn open(path: &Path, options: CarrierOptions) -> Result<FileCarrier> {
        // Writable for a writer: where flock is emulated with byte-range locks (NFS), an
        // exclusive lock needs a descriptor open for writing.
        let file = OpenOptions::new()
            .read(true)
            .write(!options.read_only)
            .open(path)
            .map_err(|e| open_error(path, e))?;
        let lock = take_lock(file, path, !options.read_only)?;
        Self::open_locked(path, options, lock)
    }

    /// Opens the data descriptor of a carrier whose lock `lock` holds.
    fn open_locked(path: &Path, options: CarrierOptions, lock: File) -> Result<FileCarrier> {
        let mut open = OpenOptions::new();
        open.read(true).write(!options.read_only);
        let mut flags = libc::O_CLOEXEC;
        if options.direct_io {
            flags |= libc::O_DIRECT;
        }
        let file = open.custom_flags(flags).open(path).map_err(|e| {
            if options.direct_io && e.raw_os_error() == Some(libc::EINVAL) {
                let msg = "the host file system refuses O_DIRECT (tmpfs?); open buffered instead";
                open_error(path, io::Error::new(io::ErrorKind::InvalidInput, msg))
            } else {
                open_error(path, e)
            }
        })?;
        let meta = file.metadata().map_err(|e| open_error(path, e))?;
        if !meta.is_file() {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "not a regular file");
            return Err(open_error(path, e));
        }
        if !same_file(&lock, &file).map_err(|e| open_error(path, e))? {
            let e = io::Error::other("the file at this path changed while it was being opened");
            return Err(open_error(path, e));
        }
        let (mem_align, offset_align) = if options.direct_io {
            sys::dio_alignment(file.as_fd()).unwrap_or((4096, 4096))
        } else {
            (1, 1)
        };
        let physical_sector = atomic_unit(
            options.direct_io.then_some(offset_align),
            sys::fs_block_size(file.as_fd()).ok(),
            device_physical_sector(std::os::unix::fs::MetadataExt::dev(&meta)),
        );
        let geometry = Geometry {
            len_bytes: meta.len(),
            logical_sector: 512,
            physical_sector,
            mem_align,
            offset_align,
        };
        Ok(FileCarrier {
            core: FdCore::new(file, options, geometry),
            path: path.to_owned(),
            _lock: lock,
        })
    }

    /// The path of the carrier file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The unit this carrier reports as atomic (its physical sector): never below
/// [`ASSUMED_SECTOR`], raised by what the probes found (see the module docs). Units past
/// `u32` are clamped (no such device exists; the raft log refuses anything past 4096).
pub(crate) fn atomic_unit(
    dio_offset_align: Option<u32>,
    fs_block: Option<u64>,
    device_sector: Option<u32>,
) -> u32 {
    let largest = [dio_offset_align.map(u64::from), fs_block, device_sector.map(u64::from)]
        .into_iter()
        .flatten()
        .fold(u64::from(ASSUMED_SECTOR), u64::max);
    u32::try_from(largest).unwrap_or(u32::MAX)
}

/// What a file carrier reports at least: a page, the unit host writeback rewrites.
const ASSUMED_SECTOR: u32 = 4096;

/// `(major, minor)` of a Linux `dev_t` (glibc's encoding).
fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev & 0x0000_0000_000f_ff00) >> 8) | ((dev & 0xffff_f000_0000_0000) >> 32);
    let minor = (dev & 0x0000_0000_0000_00ff) | ((dev & 0x0000_0fff_fff0_0000) >> 12);
    (major, minor)
}

/// The physical block size of the block device with number `dev` (a file's `st_dev`), from
/// sysfs: the device's own queue, or its parent disk's for a partition. `None` where there is
/// no such device (an anonymous device: tmpfs, NFS, FUSE, btrfs, overlayfs) or sysfs is not
/// mounted.
pub(crate) fn device_physical_sector(dev: u64) -> Option<u32> {
    let (major, minor) = major_minor(dev);
    if major == 0 {
        return None;
    }
    let base = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    ["queue/physical_block_size", "../queue/physical_block_size"].iter().find_map(|rel| {
        let text = std::fs::read_to_string(base.join(rel)).ok()?;
        text.trim().parse::<u32>().ok().filter(|&n| n > 0)
    })
}

/// Writes zeros over `[0, len)` with buffered IO, then one `fdatasync`.
fn zero_fill(
    file: &File,
    len: u64,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> io::Result<()> {
    let zeros = vec![0u8; FILL_CHUNK];
    let mut at = 0;
    let mut last_report = Instant::now();
    while at < len {
        let n = (len - at).min(FILL_CHUNK as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
        if let Some(report) = progress
            && (last_report.elapsed().as_millis() >= 100 || at == len)
        {
            report(at, len);
            last_report = Instant::now();
        }
    }
    file.sync_data()
}

impl Carrier for FileCarrier {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.core.read_exact_at(buf, offset)
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.core.read_vectored_at(bufs, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.core.write_vectored_at(bufs, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.core.write_at(buf, offset, false)
    }
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.core.write_at(buf, offset, true)
    }
    fn barrier(&self) -> io::Result<()> {
        self.core.barrier()
    }
    fn grow(&self, len_bytes: u64, sparse: bool) -> io::Result<()> {
        self.core.grow(len_bytes, sparse)
    }
    fn geometry(&self) -> Geometry {
        self.core.geometry()
    }
    fn options(&self) -> CarrierOptions {
        self.core.options()
    }
    fn medium(&self) -> CarrierKind {
        CarrierKind::File
    }
    fn stats(&self) -> &CarrierStats {
        self.core.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_atomic_unit_is_the_largest_probe_and_never_below_a_page() {
        assert_eq!(atomic_unit(None, None, None), 4096, "nothing known: the page");
        assert_eq!(atomic_unit(Some(512), Some(1024), Some(512)), 4096, "probes only raise it");
        assert_eq!(atomic_unit(Some(512), Some(4096), Some(16_384)), 16_384, "a 16 KiB device");
        assert_eq!(atomic_unit(None, Some(65_536), Some(4096)), 65_536, "64 KiB fs blocks");
        assert_eq!(atomic_unit(Some(8192), None, None), 8192, "the direct-IO alignment");
        assert_eq!(atomic_unit(None, Some(1 << 40), None), u32::MAX, "clamped, not wrapped");
    }

    #[test]
    fn device_numbers_decode_as_glibc_encodes_them() {
        // glibc's `makedev`.
        let makedev = |major: u64, minor: u64| {
            ((major & 0xfff) << 8)
                | ((major & 0xffff_f000) << 32)
                | (minor & 0xff)
                | ((minor & 0xffff_ff00) << 12)
        };
        for (major, minor) in
            [(254, 0), (8, 1), (259, 3), (4095, 255), (4096, 256), (70_000, 1 << 19)]
        {
            assert_eq!(major_minor(makedev(major, minor)), (major, minor));
        }
        assert_eq!(major_minor(0xfe00), (254, 0), "/dev/vda as `stat` shows it");
        assert_eq!(device_physical_sector(makedev(0, 42)), None, "an anonymous st_dev");
    }

    /// On this machine: a file carrier reports at least what the device under its file and
    /// the file system say, read here independently (sysfs through `stat`, `stat -f`).
    #[test]
    fn a_file_carrier_reports_at_least_its_device_and_file_system_units() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.vlm");
        let create = CreateOptions {
            capacity_bytes: 1 << 20,
            preallocate: true,
            sparse: false,
            force: false,
            progress: None,
        };
        let carrier = FileCarrier::create(&path, &create, CarrierOptions::PRODUCTION).unwrap();
        let reported = carrier.geometry().physical_sector;
        assert!(reported >= 4096 && reported.is_power_of_two(), "{reported}");
        let file = File::open(&path).unwrap();
        let fs = sys::fs_block_size(file.as_fd()).unwrap();
        assert!(u64::from(reported) >= fs, "file system blocks of {fs}, reported {reported}");
        let dev = file.metadata().unwrap().dev();
        let (major, minor) = major_minor(dev);
        let sysfs = [
            format!("/sys/dev/block/{major}:{minor}/queue/physical_block_size"),
            format!("/sys/dev/block/{major}:{minor}/../queue/physical_block_size"),
        ];
        if let Some(text) = sysfs.iter().find_map(|p| std::fs::read_to_string(p).ok()) {
            let device: u32 = text.trim().parse().unwrap();
            assert_eq!(device_physical_sector(dev), Some(device));
            assert!(reported >= device, "a device of {device}-byte sectors, reported {reported}");
        }
    }
}
