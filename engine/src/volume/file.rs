//! `File`: an open handle on a file of a volume.
//!
//! A handle names an inode, not a path: renaming or removing the file leaves the handle
//! working, and a removed file's blocks return to free space only after its last handle is
//! dropped (internal bookkeeping, so no handle can block a delete).
//!
//! A handle carries its own [`IoPolicy`]: two handles of one file may use different tiers
//! (a follower catching up reads buffered while the log appends direct); the tiers are
//! coherent with each other (see `data`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::data::{self as io, At};
use super::{ExtentInfo, InodeIo, IoPolicy, Metadata, OpenInode, Volume, stat_of};
use crate::error::Result;

/// An open file. Dropping it closes it.
#[derive(Debug)]
pub struct File {
    volume: Volume,
    ino: u64,
    io: Arc<InodeIo>,
    policy: IoPolicy,
    /// The IO layer's error sequence when this handle was opened: its syncs fail if any
    /// write failed since, also one it never heard of (errseq, as the kernel keeps it per
    /// open file).
    errors_seen: AtomicU64,
}

impl File {
    pub(crate) fn new(volume: Volume, ino: u64, policy: IoPolicy) -> File {
        let io = {
            let mut meta = volume.inner.meta();
            let entry = meta
                .open
                .entry(ino)
                .or_insert_with(|| OpenInode { handles: 0, io: Arc::default() });
            entry.handles += 1;
            Arc::clone(&entry.io)
        };
        let errors_seen = AtomicU64::new(volume.inner.io.errors());
        File { volume, ino, io, policy, errors_seen }
    }

    /// The tiers this handle's reads and writes take.
    pub fn policy(&self) -> IoPolicy {
        self.policy
    }

    /// Switches this handle's tiers (the file's cached pages stay coherent either way).
    pub fn set_policy(&mut self, policy: IoPolicy) {
        self.policy = policy;
    }

    /// The inode number (stable for the file's lifetime).
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The volume this file belongs to.
    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns the count (0 at or past the end).
    /// Holes read as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        io::read_at(&self.volume.inner, self.ino, &self.io, self.policy, offset, buf)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with `UnexpectedEof` as an IO error.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let n = self.read_at(buf, offset)?;
        if n == buf.len() {
            Ok(())
        } else {
            Err(crate::error::Error::Io {
                op: crate::error::IoOp::Read,
                offset: offset + n as u64,
                len: (buf.len() - n) as u64,
                source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            })
        }
    }

    /// The whole content.
    pub fn read_to_end(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; self.metadata()?.size as usize];
        let n = self.read_at(&mut buf, 0)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// The whole content of each of `files` (handles of one volume), as
    /// [`File::read_to_end`] on each would give, read with few carrier requests: runs of
    /// the files that lie next to each other on the carrier (or nearly) are fetched with
    /// one direct read. For many small files, such as the thousand meta files of a log of
    /// a thousand groups, which one by one cost a request each.
    ///
    /// Refuses handles of more than one volume (`Invalid::ForeignFile`).
    pub fn read_many(files: &[&File]) -> Result<Vec<Vec<u8>>> {
        let Some(first) = files.first() else { return Ok(Vec::new()) };
        let inner = &first.volume.inner;
        if files.iter().any(|f| !Arc::ptr_eq(&f.volume.inner, inner)) {
            return Err(crate::error::Error::Invalid(crate::error::Invalid::ForeignFile));
        }
        let files: Vec<(u64, &InodeIo)> = files.iter().map(|f| (f.ino, &*f.io)).collect();
        io::read_many(inner, &files)
    }

    /// Writes all of `data` at `offset`, extending the file if needed. Into mapped blocks it
    /// is an in-place overwrite, durable on return under write-through; new blocks and a new
    /// size are durable with the next commit.
    pub fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        io::write_at(&self.volume.inner, self.ino, &self.io, self.policy, At::Offset(offset), data)
            .map(|_| ())
    }

    /// Appends `data` atomically at the current end; returns the offset it landed at.
    pub fn append(&self, data: &[u8]) -> Result<u64> {
        io::write_at(&self.volume.inner, self.ino, &self.io, self.policy, At::End, data)
    }

    /// Truncates or extends (with a hole) to `len` bytes.
    pub fn set_len(&self, len: u64) -> Result<()> {
        io::set_len(&self.volume.inner, self.ino, &self.io, self.policy, len)
    }

    /// Allocates written, zero-filled blocks for `[offset, offset + len)` and extends the file
    /// over them: later writes there are pure overwrites, with no allocation and no commit.
    pub fn preallocate(&self, offset: u64, len: u64) -> Result<()> {
        io::preallocate(&self.volume.inner, self.ino, &self.io, offset, len)
    }

    /// The file's size, extents, attributes and times.
    pub fn metadata(&self) -> Result<Metadata> {
        self.volume.inner.usable()?;
        Ok(stat_of(&self.volume.inner.meta().ns, self.ino))
    }

    /// The file's extents in logical order.
    pub fn extents(&self) -> Result<Vec<ExtentInfo>> {
        self.volume.inner.usable()?;
        let meta = self.volume.inner.meta();
        let inode = meta.ns.get(self.ino).ok_or(crate::error::Error::Closed)?;
        Ok(inode
            .extents
            .iter()
            .map(|(&l, e)| ExtentInfo {
                logical_block: l,
                physical_block: e.physical,
                blocks: e.len,
            })
            .collect())
    }

    /// Sets an attribute; committed atomically with the rest of the metadata.
    pub fn set_attr(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.volume.inner.writable()?;
        self.volume.inner.meta().ns.set_attr(self.ino, key, value)
    }

    /// The value of the attribute `key`, if the file has one.
    pub fn attr(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.volume.inner.usable()?;
        let meta = self.volume.inner.meta();
        Ok(meta.ns.get(self.ino).and_then(|i| i.attrs.get(key)).map(|a| a.value.clone()))
    }

    /// Removes an attribute; true when it existed.
    pub fn remove_attr(&self, key: &[u8]) -> Result<bool> {
        self.volume.inner.writable()?;
        Ok(self.volume.inner.meta().ns.remove_attr(self.ino, key))
    }

    /// All attributes, by key.
    pub fn attrs(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.volume.inner.usable()?;
        let meta = self.volume.inner.meta();
        let inode = meta.ns.get(self.ino).ok_or(crate::error::Error::Closed)?;
        Ok(inode.attrs.iter().map(|(k, a)| (k.clone(), a.value.clone())).collect())
    }

    /// Makes this file's data and the volume's metadata durable (`Volume::sync`). Fails
    /// (`Poisoned`) if any write of the volume failed since this handle last synced.
    pub fn sync(&self) -> Result<()> {
        // A sync that returns Ok saw no failure since `since`: the sample stays valid.
        self.volume.sync_since(self.errors_seen.load(Ordering::Acquire))
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let mut meta = self.volume.inner.meta();
        let m = &mut *meta;
        let Some(entry) = m.open.get_mut(&self.ino) else { return };
        entry.handles -= 1;
        if entry.handles == 0 {
            m.open.remove(&self.ino);
            m.ns.release_orphan(self.ino, &mut m.alloc);
        }
    }
}
