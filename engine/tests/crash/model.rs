//! The in-memory model the crash checker compares a recovered volume with.
//!
//! It mirrors what the engine promises, not how it is built: a namespace of paths, files of
//! bytes, and attributes; commits snapshot the namespace. File data is modelled per *block
//! identity*: a write into a mapped block changes that block in place (so a committed
//! snapshot that maps it sees the change, as on the carrier), while a block unmapped by a
//! truncation keeps its content and a later extension gets a new block. Every data write
//! records the sectors it touched and whether it became durable, so the checker can skip
//! exactly the sectors a power cut may have torn, and nothing else.

use std::collections::{BTreeMap, HashMap};

pub const BS: u64 = 4096;
pub const SECTOR: u64 = 512;

pub type BlockId = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MFile {
    pub size: u64,
    pub blocks: BTreeMap<u64, BlockId>,
    pub attrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(u64),
}

/// A namespace state (current, or as of a commit).
#[derive(Debug, Clone, Default)]
pub struct State {
    pub paths: BTreeMap<Vec<u8>, Node>,
    pub files: HashMap<u64, MFile>,
}

/// One data write the model applied, and whether it is known durable.
#[derive(Debug, Clone)]
pub struct WriteRecord {
    pub block: BlockId,
    pub range: std::ops::Range<u64>,
    /// Carrier barriers completed when the write returned; `None` while it has not returned.
    pub returned_at: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct Model {
    pub current: State,
    /// Committed states by commit id (the generation, or the journal sequence).
    pub committed: BTreeMap<u64, State>,
    /// The commit in flight when power was cut, if any: (commit id, state).
    pub in_flight: Option<(u64, State)>,
    pub phys: HashMap<BlockId, Vec<u8>>,
    pub writes: Vec<WriteRecord>,
    next_block: BlockId,
    next_ino: u64,
    /// With a page cache, a write is durable once a commit that started after it returned
    /// completed (a barrier alone does not write dirty pages back).
    pub durable_by_commits: bool,
    commits_done: u64,
    /// The journal ring was destroyed in this run: every later open must report the loss,
    /// and may go back to the last checkpoint.
    pub ring_destroyed: bool,
}

impl Model {
    pub fn new(generation: u64) -> Model {
        let mut m = Model::default();
        m.current.paths.insert(b"/".to_vec(), Node::Dir);
        m.committed.insert(generation, m.current.clone());
        m.next_ino = 1;
        m
    }

    pub fn dirs(&self) -> Vec<Vec<u8>> {
        self.current
            .paths
            .iter()
            .filter(|(_, n)| **n == Node::Dir)
            .map(|(p, _)| p.clone())
            .collect()
    }

    pub fn files(&self) -> Vec<Vec<u8>> {
        self.current
            .paths
            .iter()
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    pub fn ino(&self, path: &[u8]) -> u64 {
        match self.current.paths[path] {
            Node::File(i) => i,
            Node::Dir => panic!("not a file"),
        }
    }

    pub fn file(&self, path: &[u8]) -> &MFile {
        &self.current.files[&self.ino(path)]
    }

    pub fn create_file(&mut self, path: &[u8]) {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.current.paths.insert(path.to_vec(), Node::File(ino));
        self.current
            .files
            .insert(ino, MFile { size: 0, blocks: BTreeMap::new(), attrs: BTreeMap::new() });
    }

    pub fn mkdir(&mut self, path: &[u8]) {
        self.current.paths.insert(path.to_vec(), Node::Dir);
    }

    pub fn is_empty_dir(&self, path: &[u8]) -> bool {
        let mut prefix = path.to_vec();
        prefix.push(b'/');
        !self.current.paths.keys().any(|p| p.starts_with(&prefix))
    }

    pub fn remove(&mut self, path: &[u8]) {
        if let Some(Node::File(ino)) = self.current.paths.remove(path) {
            self.current.files.remove(&ino);
        }
    }

    /// Renames a file (over a file or a free name).
    pub fn rename(&mut self, from: &[u8], to: &[u8]) {
        let node = self.current.paths.remove(from).expect("source exists");
        if let Some(Node::File(old)) = self.current.paths.insert(to.to_vec(), node) {
            self.current.files.remove(&old);
        }
    }

    fn record(&mut self, block: BlockId, range: std::ops::Range<u64>) -> usize {
        self.writes.push(WriteRecord { block, range, returned_at: None });
        self.writes.len() - 1
    }

    /// Applies a write of `data` at `offset` to `path`; returns the write records it made,
    /// to be marked returned once the engine call returns.
    pub fn write(&mut self, path: &[u8], offset: u64, data: &[u8]) -> Vec<usize> {
        let ino = self.ino(path);
        let mut recs = self.extend_to(ino, offset);
        let end = offset + data.len() as u64;
        for lb in offset / BS..end.div_ceil(BS) {
            let fresh = !self.current.files[&ino].blocks.contains_key(&lb);
            let id = self.block_of(ino, lb);
            let lo = offset.max(lb * BS);
            let hi = end.min((lb + 1) * BS);
            let content = self.phys.get_mut(&id).expect("block content");
            content[(lo - lb * BS) as usize..(hi - lb * BS) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            // A fresh block is written whole (zeros around the data).
            let range = if fresh { 0..BS } else { lo - lb * BS..hi - lb * BS };
            recs.push(self.record(id, range));
        }
        let f = self.current.files.get_mut(&ino).expect("file");
        f.size = f.size.max(end);
        recs
    }

    fn block_of(&mut self, ino: u64, lb: u64) -> BlockId {
        if let Some(&id) = self.current.files[&ino].blocks.get(&lb) {
            return id;
        }
        let id = self.next_block;
        self.next_block += 1;
        self.phys.insert(id, vec![0; BS as usize]);
        self.current.files.get_mut(&ino).expect("file").blocks.insert(lb, id);
        id
    }

    /// Zeroes the gap an extension past the end exposes in the last partial block.
    fn extend_to(&mut self, ino: u64, new_end: u64) -> Vec<usize> {
        let size = self.current.files[&ino].size;
        if new_end <= size || size.is_multiple_of(BS) {
            return Vec::new();
        }
        let lb = size / BS;
        let Some(&id) = self.current.files[&ino].blocks.get(&lb) else { return Vec::new() };
        let hi = new_end.min((lb + 1) * BS) - lb * BS;
        let lo = size - lb * BS;
        self.phys.get_mut(&id).expect("content")[lo as usize..hi as usize].fill(0);
        vec![self.record(id, lo..hi)]
    }

    pub fn set_len(&mut self, path: &[u8], len: u64) -> Vec<usize> {
        let ino = self.ino(path);
        let size = self.current.files[&ino].size;
        let mut recs = Vec::new();
        if len < size {
            let keep = len.div_ceil(BS);
            self.current.files.get_mut(&ino).expect("file").blocks.retain(|&lb, _| lb < keep);
        } else {
            recs = self.extend_to(ino, len);
        }
        self.current.files.get_mut(&ino).expect("file").size = len;
        recs
    }

    pub fn preallocate(&mut self, path: &[u8], offset: u64, len: u64) -> Vec<usize> {
        let ino = self.ino(path);
        let end = offset + len;
        let mut recs = self.extend_to(ino, end);
        for lb in offset / BS..end.div_ceil(BS) {
            if !self.current.files[&ino].blocks.contains_key(&lb) {
                let id = self.block_of(ino, lb);
                recs.push(self.record(id, 0..BS));
            }
        }
        let f = self.current.files.get_mut(&ino).expect("file");
        f.size = f.size.max(end);
        recs
    }

    pub fn returned(&mut self, recs: &[usize], barriers_done: u64) {
        let at = if self.durable_by_commits { self.commits_done } else { barriers_done };
        for &r in recs {
            self.writes[r].returned_at = Some(at);
        }
    }

    pub fn begin_commit(&mut self, generation: u64) {
        self.in_flight = Some((generation, self.current.clone()));
    }

    /// The commit in flight returned; `id` is the volume's commit id now (a journaled
    /// commit with nothing to record keeps the id it had).
    pub fn commit_done(&mut self, id: u64) {
        let (_, s) = self.in_flight.take().expect("a commit in flight");
        self.committed.insert(id, s);
        self.commits_done += 1;
    }

    /// After a writable recovery open: the volume holds `state` (one of the model's), now
    /// committed as `id`. Writes known durable are forgotten; writes a cut may have torn stay
    /// uncertain for good (their sectors are never compared again).
    pub fn rebase(&mut self, state: State, id: u64, barriers_done: u64, write_through: bool) {
        let done = if self.durable_by_commits { self.commits_done } else { barriers_done };
        self.writes.retain_mut(|w| {
            let durable = w.returned_at.is_some_and(|at| write_through || done > at);
            w.returned_at = None;
            !durable
        });
        self.current = state.clone();
        self.committed = BTreeMap::from([(id, state)]);
        self.in_flight = None;
    }

    /// Sectors (per block) that a power cut may have torn: writes that never returned, and,
    /// without write-through, writes that returned after the last completed barrier.
    pub fn uncertain(
        &self,
        barriers_done: u64,
        write_through: bool,
    ) -> HashMap<BlockId, Vec<std::ops::Range<u64>>> {
        let mut out: HashMap<BlockId, Vec<_>> = HashMap::new();
        let done = if self.durable_by_commits { self.commits_done } else { barriers_done };
        for w in &self.writes {
            let durable = match w.returned_at {
                None => false,
                Some(at) => write_through || done > at,
            };
            if !durable {
                let lo = w.range.start / SECTOR * SECTOR;
                let hi = w.range.end.div_ceil(SECTOR) * SECTOR;
                out.entry(w.block).or_default().push(lo..hi);
            }
        }
        out
    }
}
