//! The namespace in memory: inodes, directory entries, extents and attributes, each object
//! remembering the table slot that holds its record (FORMAT.md, "Namespace").
//!
//! Every change re-encodes the affected records into their tables at once, so the tables are
//! always the exact image of this state and a commit only has to write the dirty blocks.
//! Names are byte strings compared byte for byte: no case folding, no normalization, no host
//! platform rules; only `/` and NUL are excluded, and `.` and `..` are not names.
//!
//! On a journaled volume every mutating method also records what it did as a journal record
//! (`crate::journal::Op`) when the inode it changes is in the image (orphans are not, and die
//! with a crash anyway). Replay decodes those records and calls the same methods through
//! [`Namespace::apply`]: one implementation of each operation, used live and at recovery.
//!
//! Invariants (checked by `check_invariants`): every inode but the root has exactly one entry
//! in a directory; the graph is a tree; extents of a file do not overlap and end within the
//! file's last block; a block belongs to at most one extent.

use std::collections::{BTreeMap, HashMap};

use crate::bitmap::{Allocator, Hold};
use crate::chain::{Table, TableId};
use crate::error::{Error, Invalid, Result};
use crate::error::{Corruption, Region};
use crate::format::consts::{MAX_ATTR_KEY_LEN, MAX_FILE_SIZE, MAX_NAME_LEN, ROOT_INO};
use crate::journal::Op;
use crate::layout::BlockRange;
use crate::records::{AttrPart, DirentRecord, ExtentRecord, InodeKind, InodeRecord};

/// One run of a file's blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub physical: u64,
    pub len: u64,
    pub slot: u64,
}

/// An attribute and the slots of its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub value: Vec<u8>,
    pub id: u64,
    pub slots: Vec<u64>,
}

/// A directory entry as seen from its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Child {
    pub ino: u64,
    pub slot: u64,
}

/// A file or directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    pub ino: u64,
    pub kind: InodeKind,
    pub size: u64,
    pub created_ns: u64,
    pub modified_ns: u64,
    pub slot: u64,
    /// Logical start block -> extent.
    pub extents: BTreeMap<u64, Extent>,
    pub attrs: BTreeMap<Vec<u8>, Attr>,
    /// Directories only: name -> child.
    pub children: BTreeMap<Vec<u8>, Child>,
    /// The directory holding this inode's entry (0 for the root and for removed inodes).
    pub parent: u64,
    pub name: Vec<u8>,
}

impl Inode {
    fn record(&self) -> InodeRecord {
        InodeRecord {
            kind: self.kind,
            ino: self.ino,
            size: self.size,
            created_ns: self.created_ns,
            modified_ns: self.modified_ns,
        }
    }

    /// Blocks mapped by extents.
    pub fn allocated_blocks(&self) -> u64 {
        self.extents.values().map(|e| e.len).sum()
    }

    /// The physical block holding logical block `lb`, if mapped.
    pub fn physical_of(&self, lb: u64) -> Option<u64> {
        let (&start, e) = self.extents.range(..=lb).next_back()?;
        (lb < start + e.len).then(|| e.physical + (lb - start))
    }

    /// Mapped runs overlapping logical blocks `[from, to)`: `(logical, physical, len)`.
    pub fn mapped_runs(&self, from: u64, to: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        let first = self.extents.range(..=from).next_back().map_or(from, |(&s, _)| s);
        for (&start, e) in self.extents.range(first..to) {
            let lo = start.max(from);
            let hi = (start + e.len).min(to);
            if lo < hi {
                out.push((lo, e.physical + (lo - start), hi - lo));
            }
        }
        out
    }
}

/// Splits an absolute path into its names. `/` is the root; one trailing `/` is allowed.
pub fn split_path(path: &[u8]) -> Result<Vec<&[u8]>> {
    if path.first() != Some(&b'/') {
        return Err(Error::Invalid(Invalid::Path));
    }
    let trimmed =
        if path.len() > 1 && path.ends_with(b"/") { &path[1..path.len() - 1] } else { &path[1..] };
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&[u8]> = trimmed.split(|&b| b == b'/').collect();
    for name in &names {
        check_name(name).map_err(|_| Error::Invalid(Invalid::Path))?;
    }
    Ok(names)
}

/// Checks one name.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0)
    {
        return Err(Error::Invalid(Invalid::Name));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::Invalid(Invalid::NameTooLong { len: name.len(), max: MAX_NAME_LEN }));
    }
    Ok(())
}

fn table_index(id: TableId) -> usize {
    id as usize - 1
}

/// The whole namespace and the tables that encode it.
#[derive(Debug, Clone)]
pub struct Namespace {
    pub inodes: HashMap<u64, Inode>,
    /// Removed inodes that still have open handles (not in the image).
    pub orphans: HashMap<u64, Inode>,
    pub next_ino: u64,
    pub next_attr_id: u64,
    pub tables: [Table; 4],
    pub block_size: u64,
    /// Journaled volumes: the records of the operations since the last commit (`None`
    /// without a journal, and while replaying).
    pub journal: Option<Vec<Op>>,
}

impl Namespace {
    /// A namespace with only the root directory.
    pub fn new(block_size: u32, now_ns: u64) -> Namespace {
        let bs = block_size as usize;
        let mut ns = Namespace {
            inodes: HashMap::new(),
            orphans: HashMap::new(),
            next_ino: ROOT_INO + 1,
            next_attr_id: 1,
            tables: TableId::ALL.map(|t| Table::new(t, bs)),
            block_size: u64::from(block_size),
            journal: None,
        };
        let slot = ns.table(TableId::Inodes).alloc_slot();
        let root = Inode {
            ino: ROOT_INO,
            kind: InodeKind::Directory,
            size: 0,
            created_ns: now_ns,
            modified_ns: now_ns,
            slot,
            extents: BTreeMap::new(),
            attrs: BTreeMap::new(),
            children: BTreeMap::new(),
            parent: 0,
            name: Vec::new(),
        };
        ns.inodes.insert(ROOT_INO, root);
        ns.store_inode(ROOT_INO);
        ns
    }

    pub fn table(&mut self, id: TableId) -> &mut Table {
        &mut self.tables[table_index(id)]
    }

    fn put_record(&mut self, id: TableId, slot: u64, encode: impl FnOnce(&mut [u8])) {
        let mut rec = vec![0u8; id.record_len()];
        encode(&mut rec);
        self.table(id).put(slot, &rec);
    }

    /// Re-encodes the inode record of `ino`.
    pub fn store_inode(&mut self, ino: u64) {
        let inode = &self.inodes[&ino];
        let (slot, rec) = (inode.slot, inode.record());
        self.put_record(TableId::Inodes, slot, |b| rec.encode_into(b));
    }

    fn store_extent(&mut self, ino: u64, logical: u64, e: Extent) {
        let rec = ExtentRecord { ino, logical, physical: e.physical, len: e.len as u32 };
        self.put_record(TableId::Extents, e.slot, |b| rec.encode_into(b));
    }

    pub fn get(&self, ino: u64) -> Option<&Inode> {
        self.inodes.get(&ino).or_else(|| self.orphans.get(&ino))
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Inode> {
        match self.inodes.get_mut(&ino) {
            Some(i) => Some(i),
            None => self.orphans.get_mut(&ino),
        }
    }

    /// Resolves a path to an inode number.
    pub fn resolve(&self, path: &[u8]) -> Result<u64> {
        let mut ino = ROOT_INO;
        for name in split_path(path)? {
            let dir = &self.inodes[&ino];
            if dir.kind != InodeKind::Directory {
                return Err(Error::NotADirectory { path: path.to_vec() });
            }
            ino =
                dir.children.get(name).ok_or_else(|| Error::NotFound { path: path.to_vec() })?.ino;
        }
        Ok(ino)
    }

    /// Resolves the parent directory of `path` and returns it with the last name.
    pub fn resolve_parent<'p>(&self, path: &'p [u8]) -> Result<(u64, &'p [u8])> {
        let names = split_path(path)?;
        let Some((&last, dirs)) = names.split_last() else {
            return Err(Error::Invalid(Invalid::Path));
        };
        let mut ino = ROOT_INO;
        for name in dirs {
            let dir = &self.inodes[&ino];
            ino = match dir.children.get(*name) {
                Some(c) => c.ino,
                None => return Err(Error::NotFound { path: path.to_vec() }),
            };
            if self.inodes[&ino].kind != InodeKind::Directory {
                return Err(Error::NotADirectory { path: path.to_vec() });
            }
        }
        Ok((ino, last))
    }

    /// Creates a file or directory named `name` in directory `parent`.
    pub fn create(
        &mut self,
        parent: u64,
        name: &[u8],
        kind: InodeKind,
        now_ns: u64,
        path: &[u8],
    ) -> Result<u64> {
        let ino = self.next_ino;
        self.create_as(ino, parent, name, kind, now_ns, path)
    }

    /// `create` with the inode number given (the live path takes `next_ino`; replay the
    /// number the record carries).
    fn create_as(
        &mut self,
        ino: u64,
        parent: u64,
        name: &[u8],
        kind: InodeKind,
        now_ns: u64,
        path: &[u8],
    ) -> Result<u64> {
        check_name(name)?;
        if self.inodes[&parent].children.contains_key(name) {
            return Err(Error::AlreadyExists { path: path.to_vec() });
        }
        assert!(ino > ROOT_INO && !self.inodes.contains_key(&ino), "inode {ino} reused");
        self.next_ino = self.next_ino.max(ino + 1);
        let slot = self.table(TableId::Inodes).alloc_slot();
        let inode = Inode {
            ino,
            kind,
            size: 0,
            created_ns: now_ns,
            modified_ns: now_ns,
            slot,
            extents: BTreeMap::new(),
            attrs: BTreeMap::new(),
            children: BTreeMap::new(),
            parent,
            name: name.to_vec(),
        };
        self.inodes.insert(ino, inode);
        self.store_inode(ino);
        self.link(parent, name, ino);
        self.touch(parent, now_ns);
        self.record(|| Op::Create { parent, ino, kind, now_ns, name: name.to_vec() });
        Ok(ino)
    }

    /// Queues a journal record (journaled volumes only).
    fn record(&mut self, op: impl FnOnce() -> Op) {
        if let Some(queue) = &mut self.journal {
            queue.push(op());
        }
    }

    fn touch(&mut self, ino: u64, now_ns: u64) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.modified_ns = now_ns;
            self.store_inode(ino);
        }
    }

    /// Adds the directory entry `parent/name -> ino`.
    fn link(&mut self, parent: u64, name: &[u8], ino: u64) {
        let slot = self.table(TableId::Dirents).alloc_slot();
        let rec = DirentRecord { parent, child: ino, name: name.to_vec() };
        self.put_record(TableId::Dirents, slot, |b| rec.encode_into(b));
        let dir = self.inodes.get_mut(&parent).expect("parent directory exists");
        dir.children.insert(name.to_vec(), Child { ino, slot });
        let child = self.inodes.get_mut(&ino).expect("linked inode exists");
        child.parent = parent;
        child.name = name.to_vec();
    }

    /// Removes the entry `parent/name` and returns the inode it named.
    fn unlink(&mut self, parent: u64, name: &[u8]) -> u64 {
        let dir = self.inodes.get_mut(&parent).expect("parent directory exists");
        let child = dir.children.remove(name).expect("entry exists");
        self.table(TableId::Dirents).release(child.slot);
        if let Some(i) = self.inodes.get_mut(&child.ino) {
            i.parent = 0;
            i.name.clear();
        }
        child.ino
    }

    /// Takes an unlinked inode out of the image. With open handles it becomes an orphan whose
    /// blocks stay pinned; otherwise its blocks are freed (reusable after the next commit).
    fn drop_inode(&mut self, ino: u64, open: bool, alloc: &mut Allocator) {
        let inode = self.inodes.remove(&ino).expect("inode exists");
        self.table(TableId::Inodes).release(inode.slot);
        for e in inode.extents.values() {
            self.table(TableId::Extents).release(e.slot);
            alloc.free(
                BlockRange { start: e.physical, len: e.len },
                if open { Hold::Pinned } else { Hold::UntilCommit },
            );
        }
        for a in inode.attrs.values() {
            for &s in &a.slots {
                self.table(TableId::Attributes).release(s);
            }
        }
        if open {
            self.orphans.insert(ino, inode);
        }
    }

    /// The last handle of orphan `ino` closed: its blocks may return to free space.
    pub fn release_orphan(&mut self, ino: u64, alloc: &mut Allocator) {
        if let Some(inode) = self.orphans.remove(&ino) {
            for e in inode.extents.values() {
                alloc.unpin(BlockRange { start: e.physical, len: e.len });
            }
        }
    }

    /// Removes the file or empty directory at `path`.
    pub fn remove(
        &mut self,
        path: &[u8],
        is_open: impl Fn(u64) -> bool,
        alloc: &mut Allocator,
        now_ns: u64,
    ) -> Result<()> {
        let (parent, name) = self.resolve_parent(path)?;
        let ino = self.inodes[&parent]
            .children
            .get(name)
            .ok_or_else(|| Error::NotFound { path: path.to_vec() })?
            .ino;
        let inode = &self.inodes[&ino];
        if inode.kind == InodeKind::Directory && !inode.children.is_empty() {
            return Err(Error::DirectoryNotEmpty { path: path.to_vec() });
        }
        self.unlink(parent, name);
        self.drop_inode(ino, is_open(ino), alloc);
        self.touch(parent, now_ns);
        self.record(|| Op::Remove { now_ns, path: path.to_vec() });
        Ok(())
    }

    /// Atomically renames `from` to `to`, replacing a file, or an empty directory, at `to`.
    pub fn rename(
        &mut self,
        from: &[u8],
        to: &[u8],
        is_open: impl Fn(u64) -> bool,
        alloc: &mut Allocator,
        now_ns: u64,
    ) -> Result<()> {
        let (src_parent, src_name) = self.resolve_parent(from)?;
        let src = self.inodes[&src_parent]
            .children
            .get(src_name)
            .ok_or_else(|| Error::NotFound { path: from.to_vec() })?
            .ino;
        let (dst_parent, dst_name) = self.resolve_parent(to)?;
        check_name(dst_name)?;
        // A directory may not move into its own subtree.
        let mut up = dst_parent;
        while up != 0 {
            if up == src {
                return Err(Error::Invalid(Invalid::Rename));
            }
            up = self.inodes[&up].parent;
        }
        let existing = self.inodes[&dst_parent].children.get(dst_name).map(|c| c.ino);
        if let Some(dst) = existing {
            if dst == src {
                return Ok(());
            }
            let (src_kind, dst_inode) = (self.inodes[&src].kind, &self.inodes[&dst]);
            match (src_kind, dst_inode.kind) {
                (InodeKind::File, InodeKind::Directory) => {
                    return Err(Error::IsADirectory { path: to.to_vec() });
                }
                (InodeKind::Directory, InodeKind::File) => {
                    return Err(Error::NotADirectory { path: to.to_vec() });
                }
                (InodeKind::Directory, InodeKind::Directory) if !dst_inode.children.is_empty() => {
                    return Err(Error::DirectoryNotEmpty { path: to.to_vec() });
                }
                _ => {}
            }
            self.unlink(dst_parent, dst_name);
            self.drop_inode(dst, is_open(dst), alloc);
        }
        self.unlink(src_parent, src_name);
        self.link(dst_parent, dst_name, src);
        self.touch(src_parent, now_ns);
        self.touch(dst_parent, now_ns);
        self.record(|| Op::Rename { now_ns, from: from.to_vec(), to: to.to_vec() });
        Ok(())
    }

    /// Sets `ino`'s size and stamps it modified.
    pub fn set_size(&mut self, ino: u64, size: u64, now_ns: u64) {
        assert!(size <= MAX_FILE_SIZE, "size {size} past the format limit");
        let Some(inode) = self.get_mut(ino) else { return };
        inode.size = size;
        inode.modified_ns = now_ns;
        if self.inodes.contains_key(&ino) {
            self.store_inode(ino);
            self.record(|| Op::SetSize { ino, size, now_ns });
        }
    }

    /// Maps logical blocks `[logical, logical + run.len)` of `ino` to `run` (held blocks that
    /// the caller just filled), merging with a physically contiguous predecessor.
    pub fn attach_extent(
        &mut self,
        ino: u64,
        logical: u64,
        run: BlockRange,
        alloc: &mut Allocator,
    ) {
        alloc.attach(run);
        let in_image = self.inodes.contains_key(&ino);
        if in_image {
            self.record(|| Op::Attach { ino, logical, start: run.start, len: run.len });
        }
        let inode = self.get_mut(ino).expect("attaching to a live inode");
        debug_assert!(
            (logical..logical + run.len).all(|lb| inode.physical_of(lb).is_none()),
            "remapping a mapped block"
        );
        let prev = inode.extents.range(..logical).next_back().map(|(&s, e)| (s, *e));
        if let Some((start, mut e)) = prev
            && start + e.len == logical
            && e.physical + e.len == run.start
            && u32::try_from(e.len + run.len).is_ok()
        {
            e.len += run.len;
            inode.extents.insert(start, e);
            if in_image {
                self.store_extent(ino, start, e);
            } else {
                // Orphans are not in the image; their extents have no records.
            }
            return;
        }
        if !in_image {
            inode
                .extents
                .insert(logical, Extent { physical: run.start, len: run.len, slot: u64::MAX });
            return;
        }
        let slot = self.table(TableId::Extents).alloc_slot();
        let e = Extent { physical: run.start, len: run.len, slot };
        self.get_mut(ino).expect("inode").extents.insert(logical, e);
        self.store_extent(ino, logical, e);
    }

    /// Unmaps every block at or past logical block `keep` and frees it.
    pub fn truncate_blocks(&mut self, ino: u64, keep: u64, alloc: &mut Allocator) {
        let in_image = self.inodes.contains_key(&ino);
        if in_image {
            self.record(|| Op::Truncate { ino, keep });
        }
        let inode = self.get_mut(ino).expect("truncating a live inode");
        let hold = if in_image { Hold::UntilCommit } else { Hold::Pinned };
        let affected: Vec<(u64, Extent)> = inode
            .extents
            .range(..)
            .filter(|(s, e)| *s + e.len > keep)
            .map(|(s, e)| (*s, *e))
            .collect();
        let mut records = Vec::new();
        for (start, e) in affected {
            let inode = self.get_mut(ino).expect("inode");
            if start >= keep {
                inode.extents.remove(&start);
                alloc.free(BlockRange { start: e.physical, len: e.len }, hold);
                records.push((start, e, true));
            } else {
                let kept = keep - start;
                let shrunk = Extent { len: kept, ..e };
                inode.extents.insert(start, shrunk);
                alloc.free(BlockRange { start: e.physical + kept, len: e.len - kept }, hold);
                records.push((start, shrunk, false));
            }
        }
        if in_image {
            for (start, e, removed) in records {
                if removed {
                    self.table(TableId::Extents).release(e.slot);
                } else {
                    self.store_extent(ino, start, e);
                }
            }
        }
    }

    /// Sets attribute `key` of `ino` to `value`.
    pub fn set_attr(&mut self, ino: u64, key: &[u8], value: &[u8]) -> Result<()> {
        if key.is_empty() || key.len() > MAX_ATTR_KEY_LEN {
            return Err(Error::Invalid(Invalid::AttributeKey {
                len: key.len(),
                max: MAX_ATTR_KEY_LEN,
            }));
        }
        if u32::try_from(value.len()).is_err() {
            return Err(Error::Invalid(Invalid::FileTooLarge { bytes: value.len() as u64 }));
        }
        let id = self.next_attr_id;
        self.set_attr_as(ino, id, key, value);
        Ok(())
    }

    /// `set_attr` with the attribute id given (live: `next_attr_id`; replay: the record's).
    fn set_attr_as(&mut self, ino: u64, id: u64, key: &[u8], value: &[u8]) {
        let journal = self.journal.take();
        self.remove_attr(ino, key);
        self.journal = journal;
        self.next_attr_id = self.next_attr_id.max(id + 1);
        let in_image = self.inodes.contains_key(&ino);
        if in_image {
            self.record(|| Op::SetAttr { ino, id, key: key.to_vec(), value: value.to_vec() });
        }
        let mut slots = Vec::new();
        if in_image {
            for part in AttrPart::split(ino, id, key, value) {
                let slot = self.table(TableId::Attributes).alloc_slot();
                self.put_record(TableId::Attributes, slot, |b| part.encode_into(b));
                slots.push(slot);
            }
        }
        let attr = Attr { value: value.to_vec(), id, slots };
        self.get_mut(ino).expect("inode").attrs.insert(key.to_vec(), attr);
    }

    /// Removes attribute `key` of `ino`; true when it existed.
    pub fn remove_attr(&mut self, ino: u64, key: &[u8]) -> bool {
        let Some(old) = self.get_mut(ino).and_then(|i| i.attrs.remove(key)) else { return false };
        for s in old.slots {
            self.table(TableId::Attributes).release(s);
        }
        if self.inodes.contains_key(&ino) {
            self.record(|| Op::RemoveAttr { ino, key: key.to_vec() });
        }
        true
    }

    /// Replays one journal record of batch `sequence` (whose first block is at carrier byte
    /// `offset`) with the live path's own methods. The
    /// allocator is the replay's scratch allocator (its live set: the checkpoint's reachable
    /// blocks); an attached run must be free there. A record that does not apply (which a
    /// verified batch written by this code never holds) is `Corrupt`, never a panic.
    pub fn apply(
        &mut self,
        op: &Op,
        alloc: &mut Allocator,
        sequence: u64,
        offset: u64,
    ) -> Result<()> {
        let bad = |what: &'static str| {
            Error::corrupt(Region::Journal, offset, Corruption::JournalRecord { sequence, what })
        };
        let file = |ns: &Namespace, ino: u64| {
            ns.inodes.get(&ino).is_some_and(|i| i.kind == InodeKind::File)
        };
        match op {
            Op::Create { parent, ino, kind, now_ns, name } => {
                let parent_is_dir =
                    self.inodes.get(parent).is_some_and(|p| p.kind == InodeKind::Directory);
                if !parent_is_dir || *ino <= ROOT_INO || self.inodes.contains_key(ino) {
                    return Err(bad("create"));
                }
                self.create_as(*ino, *parent, name, *kind, *now_ns, name)
                    .map_err(|_| bad("create"))?;
            }
            Op::Remove { now_ns, path } => {
                self.remove(path, |_| false, alloc, *now_ns).map_err(|_| bad("remove"))?;
            }
            Op::Rename { now_ns, from, to } => {
                self.rename(from, to, |_| false, alloc, *now_ns).map_err(|_| bad("rename"))?;
            }
            Op::SetSize { ino, size, now_ns } => {
                let blocks = self.inodes.get(ino).and_then(|i| i.extents.iter().next_back());
                let mapped_end = blocks.map_or(0, |(s, e)| s + e.len);
                if !file(self, *ino)
                    || *size > MAX_FILE_SIZE
                    || size.div_ceil(self.block_size) < mapped_end
                {
                    return Err(bad("set size"));
                }
                self.set_size(*ino, *size, *now_ns);
            }
            Op::Attach { ino, logical, start, len } => {
                let run = BlockRange { start: *start, len: *len };
                let end = logical.checked_add(*len);
                let unmapped = file(self, *ino)
                    && end.is_some_and(|end| {
                        self.inodes[ino].mapped_runs(*logical, end).is_empty()
                            && end <= MAX_FILE_SIZE / self.block_size
                    });
                if *len == 0 || u32::try_from(*len).is_err() || !unmapped || !alloc.claim(run) {
                    return Err(bad("attach"));
                }
                self.attach_extent(*ino, *logical, run, alloc);
            }
            Op::Truncate { ino, keep } => {
                if !file(self, *ino) {
                    return Err(bad("truncate"));
                }
                self.truncate_blocks(*ino, *keep, alloc);
            }
            Op::SetAttr { ino, id, key, value } => {
                let fits = !key.is_empty()
                    && key.len() <= MAX_ATTR_KEY_LEN
                    && u32::try_from(value.len()).is_ok();
                if !self.inodes.contains_key(ino) || !fits {
                    return Err(bad("set attribute"));
                }
                self.set_attr_as(*ino, *id, key, value);
            }
            Op::RemoveAttr { ino, key } => {
                if !self.inodes.contains_key(ino) {
                    return Err(bad("remove attribute"));
                }
                self.remove_attr(*ino, key);
            }
        }
        Ok(())
    }

    /// Checks the invariants in the module docs (tests and fuzzers call this).
    pub fn check_invariants(&self) {
        let root = &self.inodes[&ROOT_INO];
        assert_eq!(root.kind, InodeKind::Directory);
        let mut seen = 1;
        let mut stack = vec![ROOT_INO];
        while let Some(d) = stack.pop() {
            for (name, c) in &self.inodes[&d].children {
                let child = &self.inodes[&c.ino];
                assert_eq!(child.parent, d, "inode {} has the wrong parent", c.ino);
                assert_eq!(&child.name, name);
                seen += 1;
                if child.kind == InodeKind::Directory {
                    stack.push(c.ino);
                }
            }
        }
        assert_eq!(seen, self.inodes.len(), "inodes unreachable from the root");
        for inode in self.inodes.values().chain(self.orphans.values()) {
            let blocks = inode.size.div_ceil(self.block_size);
            let mut end = 0;
            for (&s, e) in &inode.extents {
                assert!(s >= end, "overlapping extents in inode {}", inode.ino);
                end = s + e.len;
            }
            assert!(
                end <= blocks,
                "inode {} maps block {end} past its size {}",
                inode.ino,
                inode.size
            );
        }
    }
}
