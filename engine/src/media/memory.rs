//! `memory:`: one in-memory namespace per process (issue 24).
//!
//! Every `memory:` URL opened in a process reaches the same tree: a map from normalised
//! absolute path to a directory or a file, behind one lock; a file's bytes sit behind their
//! own `RwLock`, so reads of one file run in parallel and IO never holds the tree's lock.
//! Nothing is shared between processes and nothing survives the process.
//!
//! Invariants:
//! - `/` always exists; every entry's parent exists and is a directory;
//! - a write is visible to every handle when it returns (`sync` has nothing to do);
//! - a version is a number drawn from one process-wide counter at every change of a file, so
//!   no two states of any file ever share a version (a removed and recreated file included);
//! - an open handle keeps its file's bytes after a `remove` or a rename over it (like an
//!   unlinked inode); `create` over an existing file empties that same file;
//! - write-through and direct IO are physically meaningless here: asking for either is
//!   [`Error::KnobMeaningless`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, RwLock};

use super::{Entry, EntryKind, Media, MediaFile, MediaOptions, Medium, PutMode, Stat, Version};
use crate::error::{Error, Invalid, Result};

/// Opens the process's memory namespace.
pub(crate) fn open(options: MediaOptions) -> Result<Arc<dyn Media>> {
    Medium::Memory.check_knobs(&options)?;
    Ok(Arc::new(Memory { read_only: options.read_only }))
}

/// The process-wide tree.
static TREE: LazyLock<Mutex<BTreeMap<String, Node>>> = LazyLock::new(|| {
    let mut tree = BTreeMap::new();
    tree.insert("/".to_string(), Node::Dir);
    Mutex::new(tree)
});

/// The process-wide version counter.
static VERSIONS: AtomicU64 = AtomicU64::new(1);

fn tree() -> MutexGuard<'static, BTreeMap<String, Node>> {
    TREE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[derive(Debug, Clone)]
enum Node {
    Dir,
    File(Arc<Data>),
}

/// One file's bytes and its version.
#[derive(Debug)]
struct Data {
    bytes: RwLock<Vec<u8>>,
    version: AtomicU64,
    modified_ns: AtomicU64,
}

impl Data {
    fn new(bytes: Vec<u8>) -> Arc<Data> {
        Arc::new(Data {
            bytes: RwLock::new(bytes),
            version: AtomicU64::new(VERSIONS.fetch_add(1, Ordering::Relaxed)),
            modified_ns: AtomicU64::new(now_ns()),
        })
    }

    /// Records a change: a new version, the time.
    fn touch(&self) {
        self.version.store(VERSIONS.fetch_add(1, Ordering::Relaxed), Ordering::Release);
        self.modified_ns.store(now_ns(), Ordering::Release);
    }

    fn version(&self) -> Version {
        Version(self.version.load(Ordering::Acquire).to_string())
    }
}

fn bytes_of(path: &str) -> Vec<u8> {
    path.as_bytes().to_vec()
}

/// Checks and normalises an absolute path: no empty, `.` or `..` component; a trailing `/`
/// is dropped.
fn normal(path: &str) -> Result<String> {
    if !path.starts_with('/') {
        return Err(Error::Invalid(Invalid::Path));
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok("/".into());
    }
    if trimmed[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(Error::Invalid(Invalid::Path));
    }
    Ok(trimmed.to_string())
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The prefix every descendant of `dir` starts with.
fn child_prefix(dir: &str) -> String {
    if dir == "/" { "/".into() } else { format!("{dir}/") }
}

/// Checks that `path`'s parent exists and is a directory.
fn check_parent(tree: &BTreeMap<String, Node>, path: &str) -> Result<()> {
    let p = parent(path);
    match tree.get(p) {
        Some(Node::Dir) => Ok(()),
        Some(Node::File(_)) => Err(Error::NotADirectory { path: bytes_of(p) }),
        None => Err(Error::NotFound { path: bytes_of(p) }),
    }
}

fn has_children(tree: &BTreeMap<String, Node>, dir: &str) -> bool {
    let prefix = child_prefix(dir);
    tree.range(prefix.clone()..).next().is_some_and(|(k, _)| k.starts_with(&prefix) && k != dir)
}

/// The `memory:` medium (a handle on the process-wide tree).
#[derive(Debug)]
struct Memory {
    read_only: bool,
}

impl Memory {
    fn writable(&self) -> Result<()> {
        if self.read_only { Err(Error::ReadOnly) } else { Ok(()) }
    }

    fn file(path: &str) -> Result<Arc<Data>> {
        let path = normal(path)?;
        match tree().get(&path) {
            Some(Node::File(d)) => Ok(Arc::clone(d)),
            Some(Node::Dir) => Err(Error::IsADirectory { path: bytes_of(&path) }),
            None => Err(Error::NotFound { path: bytes_of(&path) }),
        }
    }

    fn handle(&self, data: Arc<Data>) -> Box<dyn MediaFile> {
        Box::new(MemFile { data, read_only: self.read_only })
    }
}

impl Media for Memory {
    fn medium(&self) -> Medium {
        Medium::Memory
    }

    fn open(&self, path: &str) -> Result<Box<dyn MediaFile>> {
        Ok(self.handle(Self::file(path)?))
    }

    fn create(&self, path: &str) -> Result<Box<dyn MediaFile>> {
        self.writable()?;
        let path = normal(path)?;
        let mut tree = tree();
        let data = match tree.get(&path) {
            Some(Node::File(d)) => {
                d.bytes.write().unwrap_or_else(PoisonError::into_inner).clear();
                d.touch();
                Arc::clone(d)
            }
            Some(Node::Dir) => return Err(Error::IsADirectory { path: bytes_of(&path) }),
            None => {
                check_parent(&tree, &path)?;
                let d = Data::new(Vec::new());
                tree.insert(path, Node::File(Arc::clone(&d)));
                d
            }
        };
        drop(tree);
        Ok(self.handle(data))
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        self.writable()?;
        let path = normal(path)?;
        let mut tree = tree();
        if tree.contains_key(&path) {
            return Err(Error::AlreadyExists { path: bytes_of(&path) });
        }
        check_parent(&tree, &path)?;
        tree.insert(path, Node::Dir);
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.writable()?;
        let (from, to) = (normal(from)?, normal(to)?);
        let mut tree = tree();
        let Some(node) = tree.get(&from).cloned() else {
            return Err(Error::NotFound { path: bytes_of(&from) });
        };
        if from == to {
            return Ok(());
        }
        check_parent(&tree, &to)?;
        let is_dir = matches!(node, Node::Dir);
        if is_dir && (to.starts_with(&child_prefix(&from)) || from == "/") {
            return Err(Error::Invalid(Invalid::Path));
        }
        match (tree.get(&to), is_dir) {
            (None, _) => {}
            (Some(Node::File(_)), false) => {}
            (Some(Node::Dir), true) if !has_children(&tree, &to) => {}
            (Some(Node::Dir), true) => {
                return Err(Error::DirectoryNotEmpty { path: bytes_of(&to) });
            }
            (Some(Node::Dir), false) => return Err(Error::IsADirectory { path: bytes_of(&to) }),
            (Some(Node::File(_)), true) => {
                return Err(Error::NotADirectory { path: bytes_of(&to) });
            }
        }
        // One step under the tree's lock: no reader sees a half-moved subtree.
        if is_dir {
            let prefix = child_prefix(&from);
            let moved: Vec<String> = tree
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, _)| k.clone())
                .collect();
            for old in moved {
                if let Some(n) = tree.remove(&old) {
                    tree.insert(format!("{to}/{}", &old[prefix.len()..]), n);
                }
            }
        }
        tree.remove(&from);
        tree.insert(to, node);
        Ok(())
    }

    fn remove(&self, path: &str) -> Result<()> {
        self.writable()?;
        let path = normal(path)?;
        let mut tree = tree();
        match tree.get(&path) {
            None => Err(Error::NotFound { path: bytes_of(&path) }),
            Some(Node::Dir) if path == "/" || has_children(&tree, &path) => {
                Err(Error::DirectoryNotEmpty { path: bytes_of(&path) })
            }
            Some(_) => {
                tree.remove(&path);
                Ok(())
            }
        }
    }

    fn list(&self, dir: &str) -> Result<Vec<Entry>> {
        let dir = normal(dir)?;
        let tree = tree();
        match tree.get(&dir) {
            Some(Node::Dir) => {}
            Some(Node::File(_)) => return Err(Error::NotADirectory { path: bytes_of(&dir) }),
            None => return Err(Error::NotFound { path: bytes_of(&dir) }),
        }
        let prefix = child_prefix(&dir);
        let mut entries: Vec<Entry> = tree
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| k.len() > prefix.len() && !k[prefix.len()..].contains('/'))
            .map(|(k, n)| match n {
                Node::Dir => Entry { path: k.clone(), kind: EntryKind::Directory, len: 0 },
                Node::File(d) => Entry {
                    path: k.clone(),
                    kind: EntryKind::File,
                    len: d.bytes.read().unwrap_or_else(PoisonError::into_inner).len() as u64,
                },
            })
            .collect();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }

    fn stat(&self, path: &str) -> Result<Stat> {
        let path = normal(path)?;
        match tree().get(&path) {
            None => Err(Error::NotFound { path: bytes_of(&path) }),
            Some(Node::Dir) => Ok(Stat {
                kind: EntryKind::Directory,
                len: 0,
                version: None,
                modified_unix_ns: None,
            }),
            Some(Node::File(d)) => {
                let bytes = d.bytes.read().unwrap_or_else(PoisonError::into_inner);
                Ok(Stat {
                    kind: EntryKind::File,
                    len: bytes.len() as u64,
                    version: Some(d.version()),
                    modified_unix_ns: Some(d.modified_ns.load(Ordering::Acquire)),
                })
            }
        }
    }

    fn attributes(&self, path: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.stat(path)?;
        Ok(Vec::new())
    }

    fn put(&self, path: &str, bytes: &[u8], mode: PutMode) -> Result<Version> {
        self.writable()?;
        let path = normal(path)?;
        let failed = |why: &str| Error::PreconditionFailed { path: path.clone(), why: why.into() };
        let mut tree = tree();
        // The comparison and the replacement happen under the tree's lock: one step.
        match (tree.get(&path), &mode) {
            (Some(Node::Dir), _) => return Err(Error::IsADirectory { path: bytes_of(&path) }),
            (Some(Node::File(_)), PutMode::Create) => {
                return Err(failed("the file exists (create-only write)"));
            }
            (None, PutMode::Update(_)) => {
                return Err(failed("the file is gone (it was removed since it was read)"));
            }
            (Some(Node::File(d)), PutMode::Update(expected)) if d.version() != *expected => {
                return Err(failed("the file changed since its version was read (a stale writer)"));
            }
            _ => {}
        }
        check_parent(&tree, &path)?;
        // A new file, as a rename of a finished one over the path would make: open handles
        // keep reading the old bytes.
        let data = Data::new(bytes.to_vec());
        let version = data.version();
        tree.insert(path, Node::File(data));
        Ok(version)
    }

    fn get(&self, path: &str) -> Result<(Vec<u8>, Version)> {
        let data = Self::file(path)?;
        let bytes = data.bytes.read().unwrap_or_else(PoisonError::into_inner);
        Ok((bytes.clone(), data.version()))
    }
}

/// One open memory file.
#[derive(Debug)]
struct MemFile {
    data: Arc<Data>,
    read_only: bool,
}

impl MemFile {
    fn write_locked(&self, bytes: &mut Vec<u8>, buf: &[u8], offset: u64) -> Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .and_then(|e| usize::try_from(e).ok())
            .ok_or(Error::NoSpace)?;
        let have = bytes.len();
        if have < end {
            bytes.try_reserve(end - have).map_err(|_| Error::NoSpace)?;
            bytes.resize(end, 0);
        }
        bytes[offset as usize..end].copy_from_slice(buf);
        self.data.touch();
        Ok(())
    }

    fn writable(&self) -> Result<()> {
        if self.read_only { Err(Error::ReadOnly) } else { Ok(()) }
    }
}

impl MediaFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let bytes = self.data.bytes.read().unwrap_or_else(PoisonError::into_inner);
        let Ok(start) = usize::try_from(offset) else { return Ok(0) };
        if start >= bytes.len() {
            return Ok(0);
        }
        let n = buf.len().min(bytes.len() - start);
        buf[..n].copy_from_slice(&bytes[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.writable()?;
        let mut bytes = self.data.bytes.write().unwrap_or_else(PoisonError::into_inner);
        self.write_locked(&mut bytes, buf, offset)
    }

    fn append(&self, buf: &[u8]) -> Result<u64> {
        self.writable()?;
        let mut bytes = self.data.bytes.write().unwrap_or_else(PoisonError::into_inner);
        let offset = bytes.len() as u64;
        self.write_locked(&mut bytes, buf, offset)?;
        Ok(offset)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.writable()?;
        let len = usize::try_from(len).map_err(|_| Error::NoSpace)?;
        let mut bytes = self.data.bytes.write().unwrap_or_else(PoisonError::into_inner);
        let have = bytes.len();
        if len > have {
            bytes.try_reserve(len - have).map_err(|_| Error::NoSpace)?;
        }
        bytes.resize(len, 0);
        self.data.touch();
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.data.bytes.read().unwrap_or_else(PoisonError::into_inner).len() as u64)
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::error::Knob;

    #[test]
    fn meaningless_knobs_are_errors() {
        for (direct_io, write_through, knob) in
            [(Some(true), None, Knob::DirectIo), (None, Some(true), Knob::WriteThrough)]
        {
            let e = open(MediaOptions { direct_io, write_through, ..MediaOptions::default() })
                .unwrap_err();
            assert!(matches!(e, Error::KnobMeaningless { knob: k, .. } if k == knob), "{e}");
        }
        open(MediaOptions { direct_io: Some(false), ..MediaOptions::default() }).unwrap();
    }

    #[test]
    fn tree_operations() {
        let m = open(MediaOptions::default()).unwrap();
        m.mkdir("/mt").unwrap();
        m.mkdir("/mt/d").unwrap();
        let f = m.create("/mt/d/f").unwrap();
        f.write_at(b"abc", 2).unwrap();
        assert_eq!(f.append(b"!").unwrap(), 5);
        m.rename("/mt/d", "/mt/e").unwrap();
        let (bytes, _) = m.get("/mt/e/f").unwrap();
        assert_eq!(bytes, b"\0\0abc!");
        assert!(matches!(m.remove("/mt/e"), Err(Error::DirectoryNotEmpty { .. })));
        let names: Vec<_> = m.list("/mt").unwrap().into_iter().map(|e| e.path).collect();
        assert_eq!(names, ["/mt/e"]);
        m.remove("/mt/e/f").unwrap();
        m.remove("/mt/e").unwrap();
        assert!(matches!(m.stat("/mt/e"), Err(Error::NotFound { .. })));
    }
}
