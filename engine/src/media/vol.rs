//! `virtual://`: a Vellum volume as a medium (issue 24): the main persistent form.
//!
//! A volume is opened once per process and shared: every `virtual://` URL naming the same
//! carrier (after `canonicalize`) reaches the same open [`Volume`] (a second open of the
//! carrier would find it locked). The volume is closed cleanly ([`Volume::close`]: a
//! checkpoint with the clean state) when the last media handle and the last file handle of
//! it are dropped.
//!
//! Knobs: none given means production (direct IO and write-through), with the fallback to
//! buffered IO where the host file system refuses `O_DIRECT` ([`open_volume`](super::open_volume),
//! the one place that logic lives); a knob given is used as given.
//!
//! Invariants:
//! - `sync`/`close` of a file is a volume sync (a commit when something changed);
//! - `mkdir`, `rename`, `remove` and `put` are durable when they return (each ends in a
//!   volume sync), and `rename` is the volume's atomic rename;
//! - [`Media::put`] writes a temporary file beside the target and renames it over: readers
//!   never see half a file, and every put makes a new inode;
//! - a version is the inode number (never reused: inode numbers only grow), the modification
//!   time and the size. A write through a handle that neither moves the size nor the
//!   modification time (an in-place overwrite) keeps the version: conditional writes are
//!   meant for files written whole by `put`;
//! - conditional puts are compared and replaced under one lock per open volume: safe against
//!   every writer of the process (the volume's own lock keeps other processes out).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use super::location::open_volume_with;
use super::{Entry, EntryKind, Media, MediaFile, MediaOptions, Medium, PutMode, Stat, Version};
use crate::error::{Error, Result};
use crate::{File, FileKind, Volume};

/// The volumes this process has open through the facade, by canonical carrier path.
static OPEN: LazyLock<Mutex<HashMap<PathBuf, Weak<Shared>>>> = LazyLock::new(Mutex::default);

/// Opens (or shares) the volume at `path` as a medium.
pub(crate) fn open(path: &Path, options: MediaOptions) -> Result<Arc<dyn Media>> {
    Medium::Virtual.check_knobs(&options)?;
    let key = path.canonicalize().map_err(|e| Error::Open { path: path.to_owned(), source: e })?;
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = open.get(&key).and_then(Weak::upgrade) {
        if shared.read_only && !options.read_only {
            return Err(Error::Locked { path: key });
        }
        return Ok(Arc::new(Vol { shared }));
    }
    let volume =
        open_volume_with(&key, options.direct_io, options.write_through, options.read_only)?;
    let shared = Arc::new(Shared {
        volume: Some(volume),
        path: key.clone(),
        read_only: options.read_only,
        put: Mutex::new(()),
    });
    open.retain(|_, w| w.strong_count() > 0);
    open.insert(key, Arc::downgrade(&shared));
    Ok(Arc::new(Vol { shared }))
}

/// One open volume, shared by every media and file handle of it.
#[derive(Debug)]
struct Shared {
    /// Taken by `Drop` to close it.
    volume: Option<Volume>,
    path: PathBuf,
    read_only: bool,
    /// Serializes conditional puts (compare, then replace).
    put: Mutex<()>,
}

impl Shared {
    fn volume(&self) -> &Volume {
        self.volume.as_ref().expect("the volume is taken only by Drop")
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(volume) = self.volume.take()
            && let Err(e) = volume.close()
        {
            tracing::warn!(path = %self.path.display(), "closing the volume failed: {e}");
        }
    }
}

/// The `virtual://` medium.
#[derive(Debug)]
struct Vol {
    shared: Arc<Shared>,
}

fn version_of(ino: u64, modified_ns: u64, size: u64) -> Version {
    Version(format!("{ino:x}-{modified_ns:x}-{size:x}"))
}

fn join(dir: &str, name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    if dir.ends_with('/') { format!("{dir}{name}") } else { format!("{dir}/{name}") }
}

/// A name for a temporary file beside `path`, unique in this process.
fn temp_beside(path: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    format!("{dir}/.{name}.vellum-put.{n}")
}

impl Vol {
    fn volume(&self) -> &Volume {
        self.shared.volume()
    }

    fn handle(&self, file: File) -> Box<dyn MediaFile> {
        Box::new(VolFile { file, shared: Arc::clone(&self.shared) })
    }

    /// Writes `bytes` to a temporary file beside `path` and renames it over `path`, durably.
    fn replace(&self, path: &str, bytes: &[u8]) -> Result<Version> {
        let v = self.volume();
        let temp = temp_beside(path);
        let result = (|| {
            let file = v.create_file(&temp)?;
            file.write_at(bytes, 0)?;
            v.rename(&temp, path)?;
            v.sync()?;
            let meta = file.metadata()?;
            Ok(version_of(meta.ino, meta.modified_unix_ns, meta.size))
        })();
        if result.is_err() {
            let _ = v.remove(&temp);
        }
        result
    }
}

impl Media for Vol {
    fn medium(&self) -> Medium {
        Medium::Virtual
    }

    fn open(&self, path: &str) -> Result<Box<dyn MediaFile>> {
        Ok(self.handle(self.volume().open_file(path)?))
    }

    fn create(&self, path: &str) -> Result<Box<dyn MediaFile>> {
        let v = self.volume();
        match v.create_file(path) {
            Err(Error::AlreadyExists { .. }) => {
                let file = v.open_file(path)?;
                file.set_len(0)?;
                Ok(self.handle(file))
            }
            other => Ok(self.handle(other?)),
        }
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        self.volume().create_dir(path)?;
        self.volume().sync()
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.volume().rename(from, to)?;
        self.volume().sync()
    }

    fn remove(&self, path: &str) -> Result<()> {
        self.volume().remove(path)?;
        self.volume().sync()
    }

    fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        // The volume lists by name in byte order: full paths keep that order.
        Ok(self
            .volume()
            .list(dir)?
            .into_iter()
            .map(|e| Entry {
                path: join(dir, &e.name),
                kind: match e.kind {
                    FileKind::Directory => EntryKind::Directory,
                    FileKind::File => EntryKind::File,
                },
                len: e.size,
            })
            .collect())
    }

    fn stat(&self, path: &str) -> Result<Stat> {
        let m = self.volume().stat(path)?;
        let file = m.kind == FileKind::File;
        Ok(Stat {
            kind: if file { EntryKind::File } else { EntryKind::Directory },
            len: m.size,
            version: file.then(|| version_of(m.ino, m.modified_unix_ns, m.size)),
            modified_unix_ns: Some(m.modified_unix_ns),
        })
    }

    fn attributes(&self, path: &str) -> Result<Vec<(String, Vec<u8>)>> {
        match self.volume().open_file(path) {
            Ok(file) => Ok(file
                .attrs()?
                .into_iter()
                .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
                .collect()),
            // A directory has no attributes here.
            Err(Error::IsADirectory { .. }) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    fn put(&self, path: &str, bytes: &[u8], mode: PutMode) -> Result<Version> {
        let _guard = self.shared.put.lock().unwrap_or_else(PoisonError::into_inner);
        let failed = |why: &str| Error::PreconditionFailed { path: path.into(), why: why.into() };
        let current = match self.stat(path) {
            Ok(s) if s.kind == EntryKind::Directory => {
                return Err(Error::IsADirectory { path: path.as_bytes().to_vec() });
            }
            Ok(s) => s.version,
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        match (&mode, current) {
            (PutMode::Create, Some(_)) => {
                return Err(failed("the file exists (create-only write)"));
            }
            (PutMode::Update(_), None) => {
                return Err(failed("the file is gone (it was removed since it was read)"));
            }
            (PutMode::Update(expected), Some(now)) if *expected != now => {
                return Err(failed("the file changed since its version was read (a stale writer)"));
            }
            _ => {}
        }
        self.replace(path, bytes)
    }

    fn get(&self, path: &str) -> Result<(Vec<u8>, Version)> {
        let file = self.volume().open_file(path)?;
        let bytes = file.read_to_end()?;
        let meta = file.metadata()?;
        Ok((bytes, version_of(meta.ino, meta.modified_unix_ns, meta.size)))
    }
}

/// One open file of a volume; keeps the volume open.
#[derive(Debug)]
struct VolFile {
    // Dropped before `shared`: the file handle goes before the volume may close.
    file: File,
    shared: Arc<Shared>,
}

impl MediaFile for VolFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.file.write_at(buf, offset)
    }

    fn append(&self, buf: &[u8]) -> Result<u64> {
        self.file.append(buf)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file.set_len(len)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.file.metadata()?.size)
    }

    fn sync(&self) -> Result<()> {
        if self.shared.read_only {
            return Ok(());
        }
        self.file.sync()
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.sync()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::carrier::CarrierOptions;
    use crate::media::open_volume;
    use crate::{FormatOptions, VolumeOptions};

    #[test]
    fn shared_per_process_and_closed_with_the_last_handle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.vlm");
        let format = FormatOptions::journaled(16 << 20);
        let volume =
            Volume::create_path(&path, &format, CarrierOptions::BUFFERED, VolumeOptions::default())
                .unwrap();
        volume.close().unwrap();
        let a = open(&path, MediaOptions::default()).unwrap();
        let b = open(&path, MediaOptions::default()).unwrap();
        let f = a.create("/f").unwrap();
        drop(a);
        f.write_at(b"kept", 0).unwrap();
        drop(b);
        f.close().unwrap();
        // Every handle is gone: the volume is closed and opens again.
        let v = open_volume(&path, true).unwrap();
        assert_eq!(v.open_file("/f").unwrap().read_to_end().unwrap(), b"kept");
    }
}
