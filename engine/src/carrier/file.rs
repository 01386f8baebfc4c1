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

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::aligned::AlignedBuf;
use super::fd::FdCore;
use super::{Carrier, CarrierOptions, CarrierStats, Geometry, Medium, sys};
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
        let geometry = Geometry {
            len_bytes: meta.len(),
            logical_sector: 512,
            physical_sector: 4096,
            mem_align,
            offset_align,
        };
        Ok(FileCarrier {
            core: FdCore::new(file, options, geometry),
            path: path.to_owned(),
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
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
    fn medium(&self) -> Medium {
        Medium::File
    }
    fn stats(&self) -> &CarrierStats {
        self.core.stats()
    }
}
