//! `local://`: the host file system, for interop (issue 24).
//!
//! Paths on this medium are host paths (absolute). Files are positional IO on one descriptor
//! through the carriers' [`FdCore`], so the knobs mean what they mean for a file carrier:
//! - write-through: every write is `pwritev2(RWF_DSYNC)` (write + `fdatasync` where the kernel
//!   refuses it), durable when it returns;
//! - direct IO: the file is opened `O_DIRECT`; requests that are not aligned go through the
//!   carriers' bounce buffers (read-modify-write of the partial sectors). The file can then be
//!   longer than what was written (a tail written as a whole sector): the handle keeps the
//!   logical length, reads stop there, and `sync`/`close`/drop truncate the file back to it.
//!   Until then another handle may see the zero padding. A host file system that refuses
//!   `O_DIRECT` gives a clear error at open.
//!
//! Invariants:
//! - `sync` is `fdatasync` (after the truncation above); `close` is `sync`;
//! - `rename` is `rename(2)`: atomic, replacing the target;
//! - [`Media::put`] writes a temporary file in the same directory and renames it over the
//!   target (readers never see half a file), except [`PutMode::Create`], which creates with
//!   `O_EXCL` and writes in place (no rename could keep the exclusivity);
//! - [`PutMode::Update`] compares the version under an exclusive `flock` of the current file:
//!   safe against Vellum writers (which all take that lock), not against other programs;
//! - a version is a stamp of the file's modification and change times (ns), length and inode:
//!   a replacement always gets another inode while the old one is alive, so two versions of
//!   one path differ unless the inode number is reused within one timestamp tick with the
//!   same length and times (documented in docs/MEDIA.md);
//! - attributes: extended attributes are not read (an empty list), see docs/MEDIA.md.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{Entry, EntryKind, Media, MediaFile, MediaOptions, Medium, PutMode, Stat, Version};
use crate::carrier::{CarrierOptions, FdCore, flock};
use crate::error::{Error, IoOp, Result};

/// Opens the host file system as a medium.
pub(crate) fn open(options: MediaOptions) -> Result<Arc<dyn Media>> {
    Medium::Local.check_knobs(&options)?;
    Ok(Arc::new(Local {
        options: CarrierOptions {
            direct_io: options.direct_io.unwrap_or(false),
            write_through: options.write_through.unwrap_or(false),
            read_only: options.read_only,
        },
    }))
}

/// The `local://` medium.
#[derive(Debug)]
struct Local {
    options: CarrierOptions,
}

/// Maps an OS error on `path` to the engine's error: the kinds a caller acts on become their
/// variants, the rest stays an `Open` error naming the path.
fn fs_error(path: &Path, e: io::Error) -> Error {
    let p = || path.as_os_str().as_encoded_bytes().to_vec();
    match e.kind() {
        io::ErrorKind::NotFound => Error::NotFound { path: p() },
        io::ErrorKind::AlreadyExists => Error::AlreadyExists { path: p() },
        io::ErrorKind::IsADirectory => Error::IsADirectory { path: p() },
        io::ErrorKind::NotADirectory => Error::NotADirectory { path: p() },
        io::ErrorKind::DirectoryNotEmpty => Error::DirectoryNotEmpty { path: p() },
        _ if e.raw_os_error() == Some(libc::EINVAL) => Error::Open {
            path: path.to_owned(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "the host file system refuses this (O_DIRECT on tmpfs?); open buffered instead",
            ),
        },
        _ => Error::Open { path: path.to_owned(), source: e },
    }
}

fn io_error(op: IoOp, offset: u64, len: usize, source: io::Error) -> Error {
    Error::Io { op, offset, len: len as u64, source }
}

fn host_path(path: &str) -> Result<PathBuf> {
    if !path.starts_with('/') {
        return Err(Error::BadUrl {
            url: format!("local://{path}"),
            reason: "local:// takes an absolute path: local:///abs/path".into(),
        });
    }
    Ok(PathBuf::from(path))
}

/// The version stamp of a file's metadata.
fn version_of(meta: &fs::Metadata) -> Version {
    Version(format!(
        "{:x}.{:x}-{:x}.{:x}-{:x}-{:x}",
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
        meta.len(),
        meta.ino()
    ))
}

fn modified_ns(meta: &fs::Metadata) -> Option<u64> {
    let ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
    u64::try_from(ns).ok()
}

/// Attempts (10 ms apart) to take the `flock` of a conditional update before giving up.
const LOCK_RETRIES: u32 = 1000;

/// Takes an exclusive `flock` on `file`, waiting up to ~10 s for another Vellum writer.
fn lock_exclusive(file: &File, path: &Path) -> Result<()> {
    let mut tries = 0;
    loop {
        match flock(file.as_fd(), true) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && tries < LOCK_RETRIES => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(Error::Locked { path: path.to_owned() });
            }
            Err(e) => return Err(fs_error(path, e)),
        }
    }
}

/// A name for a temporary file next to `path`, unique in this process.
fn temp_beside(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.vellum-put.{}.{n}", std::process::id()))
}

impl Local {
    fn open_file(&self, path: &Path, create: bool) -> Result<LocalFile> {
        if create && self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let mut open = OpenOptions::new();
        open.read(true).write(!self.options.read_only);
        if create {
            open.create(true).truncate(true).mode(0o644);
        }
        let mut flags = libc::O_CLOEXEC;
        if self.options.direct_io {
            flags |= libc::O_DIRECT;
        }
        let file = open.custom_flags(flags).open(path).map_err(|e| fs_error(path, e))?;
        let meta = file.metadata().map_err(|e| fs_error(path, e))?;
        if meta.is_dir() {
            return Err(Error::IsADirectory { path: path.as_os_str().as_encoded_bytes().to_vec() });
        }
        Ok(LocalFile {
            core: FdCore::for_host_file(file, self.options),
            path: path.to_owned(),
            len: AtomicU64::new(meta.len()),
            append: Mutex::new(()),
        })
    }

    /// Writes `bytes` to a temporary file beside `path`, syncs it and renames it over `path`.
    fn replace(path: &Path, bytes: &[u8]) -> Result<Version> {
        let temp = temp_beside(path);
        let result = (|| {
            let mut open = OpenOptions::new();
            let file = open
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&temp)
                .map_err(|e| fs_error(path, e))?;
            std::os::unix::fs::FileExt::write_all_at(&file, bytes, 0)
                .map_err(|e| io_error(IoOp::Write, 0, bytes.len(), e))?;
            file.sync_data().map_err(|e| io_error(IoOp::Barrier, 0, 0, e))?;
            fs::rename(&temp, path).map_err(|e| fs_error(path, e))?;
            Ok(version_of(&file.metadata().map_err(|e| fs_error(path, e))?))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result
    }

    fn put_update(path: &Path, bytes: &[u8], expected: &Version) -> Result<Version> {
        let stale = |why: &str| Error::PreconditionFailed {
            path: path.display().to_string(),
            why: why.to_string(),
        };
        loop {
            let current = match File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(stale("the file is gone (it was removed since it was read)"));
                }
                Err(e) => return Err(fs_error(path, e)),
            };
            lock_exclusive(&current, path)?;
            // The lock is on an inode: if another writer replaced the file meanwhile, the
            // lock guards nothing; start over on the file that is there now.
            let locked = current.metadata().map_err(|e| fs_error(path, e))?;
            let now = match fs::metadata(path) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(fs_error(path, e)),
            };
            if now.ino() != locked.ino() || now.dev() != locked.dev() {
                continue;
            }
            if version_of(&locked) != *expected {
                return Err(stale("the file changed since its version was read (a stale writer)"));
            }
            // Renamed over while the lock on the old inode is held: a writer waiting for it
            // then finds another inode at the path and starts over.
            return Self::replace(path, bytes);
        }
    }
}

impl Media for Local {
    fn medium(&self) -> Medium {
        Medium::Local
    }

    fn open(&self, path: &str) -> Result<Box<dyn MediaFile>> {
        Ok(Box::new(self.open_file(&host_path(path)?, false)?))
    }

    fn create(&self, path: &str) -> Result<Box<dyn MediaFile>> {
        Ok(Box::new(self.open_file(&host_path(path)?, true)?))
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let path = host_path(path)?;
        fs::create_dir(&path).map_err(|e| fs_error(&path, e))
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let (from, to) = (host_path(from)?, host_path(to)?);
        fs::rename(&from, &to).map_err(|e| fs_error(&from, e))
    }

    fn remove(&self, path: &str) -> Result<()> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let path = host_path(path)?;
        let meta = fs::symlink_metadata(&path).map_err(|e| fs_error(&path, e))?;
        if meta.is_dir() { fs::remove_dir(&path) } else { fs::remove_file(&path) }
            .map_err(|e| fs_error(&path, e))
    }

    fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        let path = host_path(dir)?;
        let mut entries = Vec::new();
        for item in fs::read_dir(&path).map_err(|e| fs_error(&path, e))? {
            let item = item.map_err(|e| fs_error(&path, e))?;
            let child = item.path();
            // Follows symbolic links; a dangling one, a socket or a FIFO is not listed.
            let Ok(meta) = fs::metadata(&child) else { continue };
            let kind = if meta.is_dir() {
                EntryKind::Directory
            } else if meta.is_file() {
                EntryKind::File
            } else {
                continue;
            };
            entries.push(Entry {
                path: child.to_string_lossy().into_owned(),
                kind,
                len: if kind == EntryKind::File { meta.len() } else { 0 },
            });
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }

    fn stat(&self, path: &str) -> Result<Stat> {
        let path = host_path(path)?;
        let meta = fs::metadata(&path).map_err(|e| fs_error(&path, e))?;
        let file = meta.is_file();
        Ok(Stat {
            kind: if file { EntryKind::File } else { EntryKind::Directory },
            len: if file { meta.len() } else { 0 },
            version: file.then(|| version_of(&meta)),
            modified_unix_ns: modified_ns(&meta),
        })
    }

    fn attributes(&self, path: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let path = host_path(path)?;
        fs::metadata(&path).map_err(|e| fs_error(&path, e))?;
        Ok(Vec::new())
    }

    fn put(&self, path: &str, bytes: &[u8], mode: PutMode) -> Result<Version> {
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        let path = host_path(path)?;
        match mode {
            PutMode::Overwrite => Self::replace(&path, bytes),
            PutMode::Create => {
                let file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(&path)
                    .map_err(|e| match e.kind() {
                        io::ErrorKind::AlreadyExists => Error::PreconditionFailed {
                            path: path.display().to_string(),
                            why: "the file exists (create-only write)".into(),
                        },
                        _ => fs_error(&path, e),
                    })?;
                std::os::unix::fs::FileExt::write_all_at(&file, bytes, 0)
                    .map_err(|e| io_error(IoOp::Write, 0, bytes.len(), e))?;
                file.sync_data().map_err(|e| io_error(IoOp::Barrier, 0, 0, e))?;
                Ok(version_of(&file.metadata().map_err(|e| fs_error(&path, e))?))
            }
            PutMode::Update(expected) => Self::put_update(&path, bytes, &expected),
        }
    }

    fn get(&self, path: &str) -> Result<(Vec<u8>, Version)> {
        let path = host_path(path)?;
        let file = File::open(&path).map_err(|e| fs_error(&path, e))?;
        let meta = file.metadata().map_err(|e| fs_error(&path, e))?;
        if meta.is_dir() {
            return Err(Error::IsADirectory { path: path.as_os_str().as_encoded_bytes().to_vec() });
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        io::Read::read_to_end(&mut &file, &mut bytes)
            .map_err(|e| io_error(IoOp::Read, 0, meta.len() as usize, e))?;
        // The version of what was read: the metadata again, after the read (a file replaced
        // meanwhile is another inode, and this descriptor still reads the old one).
        let meta = file.metadata().map_err(|e| fs_error(&path, e))?;
        Ok((bytes, version_of(&meta)))
    }
}

/// One open host file.
#[derive(Debug)]
struct LocalFile {
    core: FdCore,
    path: PathBuf,
    /// The logical length (direct IO can leave the file longer until `sync`).
    len: AtomicU64,
    /// Serializes appends (the offset is the length at the time of the write).
    append: Mutex<()>,
}

impl LocalFile {
    fn direct(&self) -> bool {
        self.core.options().direct_io
    }

    fn read_only(&self) -> Result<()> {
        if self.core.options().read_only { Err(Error::ReadOnly) } else { Ok(()) }
    }

    /// Truncates a file that direct IO left longer than its logical length.
    fn trim(&self) -> Result<()> {
        if !self.direct() || self.core.options().read_only {
            return Ok(());
        }
        let len = self.len.load(Ordering::Acquire);
        let file = self.core.file();
        let on_disk = file.metadata().map_err(|e| fs_error(&self.path, e))?.len();
        if on_disk != len {
            file.set_len(len).map_err(|e| io_error(IoOp::Grow, len, 0, e))?;
        }
        Ok(())
    }

    fn write(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.read_only()?;
        let durable = self.core.options().write_through;
        let op = if durable { IoOp::DurableWrite } else { IoOp::Write };
        self.core.write_at(buf, offset, durable).map_err(|e| io_error(op, offset, buf.len(), e))?;
        self.len.fetch_max(offset + buf.len() as u64, Ordering::AcqRel);
        Ok(())
    }
}

impl MediaFile for LocalFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if !self.direct() {
            return loop {
                match std::os::unix::fs::FileExt::read_at(self.core.file(), buf, offset) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other.map_err(|e| io_error(IoOp::Read, offset, buf.len(), e)),
                }
            };
        }
        let len = self.len.load(Ordering::Acquire);
        let n = len.saturating_sub(offset).min(buf.len() as u64) as usize;
        if n > 0 {
            self.core
                .read_exact_at(&mut buf[..n], offset)
                .map_err(|e| io_error(IoOp::Read, offset, n, e))?;
        }
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.write(buf, offset)
    }

    fn append(&self, buf: &[u8]) -> Result<u64> {
        let _guard = self.append.lock().unwrap_or_else(PoisonError::into_inner);
        let offset = self.len()?;
        self.write(buf, offset)?;
        Ok(offset)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.read_only()?;
        self.core.file().set_len(len).map_err(|e| io_error(IoOp::Grow, len, 0, e))?;
        self.len.store(len, Ordering::Release);
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        if self.direct() {
            return Ok(self.len.load(Ordering::Acquire));
        }
        // Buffered: the file as it is now (another handle may have written to it).
        Ok(self.core.file().metadata().map_err(|e| fs_error(&self.path, e))?.len())
    }

    fn sync(&self) -> Result<()> {
        self.trim()?;
        self.core.barrier().map_err(|e| io_error(IoOp::Barrier, 0, 0, e))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.sync()
    }
}

impl Drop for LocalFile {
    fn drop(&mut self) {
        // Best effort: a handle dropped without `close` still leaves the exact length.
        let _ = self.trim();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn medium(direct: bool, write_through: bool) -> Arc<dyn Media> {
        open(MediaOptions {
            direct_io: Some(direct),
            write_through: Some(write_through),
            ..MediaOptions::default()
        })
        .unwrap()
    }

    #[test]
    fn unaligned_direct_writes_keep_the_exact_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("{}/f", dir.path().display());
        for (direct, wt) in [(false, false), (true, false), (false, true), (true, true)] {
            let m = medium(direct, wt);
            let f = m.create(&path).unwrap();
            f.write_at(b"hello", 3).unwrap();
            assert_eq!(f.append(b"!").unwrap(), 8);
            let mut buf = [0u8; 64];
            assert_eq!(f.read_at(&mut buf, 0).unwrap(), 9);
            assert_eq!(&buf[..9], b"\0\0\0hello!");
            f.close().unwrap();
            assert_eq!(fs::metadata(&path).unwrap().len(), 9, "direct {direct} wt {wt}");
            let f = m.open(&path).unwrap();
            assert_eq!(f.read_at(&mut buf, 4).unwrap(), 5);
            assert_eq!(&buf[..5], b"ello!");
        }
    }

    #[test]
    fn conditional_puts() {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("{}/m", dir.path().display());
        let m = medium(false, false);
        let v1 = m.put(&path, b"one", PutMode::Create).unwrap();
        assert!(matches!(
            m.put(&path, b"x", PutMode::Create),
            Err(Error::PreconditionFailed { .. })
        ));
        let v2 = m.put(&path, b"two", PutMode::Update(v1.clone())).unwrap();
        assert_ne!(v1, v2);
        assert!(matches!(
            m.put(&path, b"stale", PutMode::Update(v1)),
            Err(Error::PreconditionFailed { .. })
        ));
        assert_eq!(m.get(&path).unwrap(), (b"two".to_vec(), v2.clone()));
        assert_eq!(m.stat(&path).unwrap().version, Some(v2));
    }
}
