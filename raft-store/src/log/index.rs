//! The in-memory entry index and the hot tail window.
//!
//! One `Loc` per entry, in index order: where its frame lives (once written) and, for the
//! newest entries, the payload itself. Appended entries are readable at once from the window;
//! a durable entry's payload is dropped from the window, oldest first, once the window is over
//! its byte budget, and is read back from its segment after that. Entries that are not durable
//! yet are never evicted (they are not on disk to be read back).
//!
//! The index also keeps the bytes its live entries take in the log (their frames once
//! written, their payloads before), which bounds the log's space (`LogCore::purge`).

use std::collections::VecDeque;
use std::sync::Arc;

/// Where one entry is.
#[derive(Debug, Clone)]
pub struct Loc {
    pub term: u64,
    /// Segment sequence number, frame offset and length (valid once `durable`).
    pub seg: u64,
    pub offset: u64,
    pub len: u32,
    pub durable: bool,
    pub hot: Option<Arc<[u8]>>,
}

#[derive(Debug)]
pub struct Index {
    /// Index of `locs[0]` (or of the next entry when empty).
    first: u64,
    locs: VecDeque<Loc>,
    hot_bytes: usize,
    budget: usize,
    /// Position in `locs` before which nothing is hot.
    cold_until: usize,
    /// Sum of `weight` over `locs`.
    live_bytes: u64,
}

/// The bytes an entry takes in the log: its frame once written, its payload before.
fn weight(loc: &Loc) -> u64 {
    if loc.len > 0 { u64::from(loc.len) } else { loc.hot.as_ref().map_or(0, |p| p.len() as u64) }
}

impl Index {
    pub fn new(next: u64, budget: usize) -> Index {
        Index {
            first: next,
            locs: VecDeque::new(),
            hot_bytes: 0,
            budget,
            cold_until: 0,
            live_bytes: 0,
        }
    }

    /// Bytes the live entries take in the log (frames once written, payloads before).
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Index the next appended entry must have.
    pub fn next_index(&self) -> u64 {
        self.first + self.locs.len() as u64
    }

    pub fn first_index(&self) -> u64 {
        self.first
    }

    pub fn last_index(&self) -> Option<u64> {
        (!self.locs.is_empty()).then(|| self.next_index() - 1)
    }

    pub fn len(&self) -> usize {
        self.locs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.locs.is_empty()
    }

    pub fn hot_bytes(&self) -> usize {
        self.hot_bytes
    }

    pub fn get(&self, index: u64) -> Option<&Loc> {
        let i = index.checked_sub(self.first)?;
        self.locs.get(usize::try_from(i).ok()?)
    }

    /// Appends the next entry: `index` must be `next_index`, except that an empty log may
    /// start anywhere.
    pub fn push(&mut self, index: u64, loc: Loc) {
        if self.locs.is_empty() {
            self.first = index;
            self.cold_until = 0;
        }
        assert_eq!(index, self.next_index(), "appending index {index} would leave a hole");
        self.hot_bytes += loc.hot.as_ref().map_or(0, |p| p.len());
        self.live_bytes += weight(&loc);
        self.locs.push_back(loc);
    }

    /// Drops every entry at or past `since`.
    pub fn truncate(&mut self, since: u64) {
        let keep = since.saturating_sub(self.first).min(self.locs.len() as u64) as usize;
        for loc in self.locs.drain(keep..) {
            self.hot_bytes -= loc.hot.as_ref().map_or(0, |p| p.len());
            self.live_bytes -= weight(&loc);
        }
        self.cold_until = self.cold_until.min(self.locs.len());
    }

    /// Drops every entry at or before `upto`; the next entry is at least `upto + 1`.
    pub fn purge(&mut self, upto: u64) {
        let drop_n = (upto + 1).saturating_sub(self.first).min(self.locs.len() as u64) as usize;
        for loc in self.locs.drain(..drop_n) {
            self.hot_bytes -= loc.hot.as_ref().map_or(0, |p| p.len());
            self.live_bytes -= weight(&loc);
        }
        self.cold_until = self.cold_until.saturating_sub(drop_n);
        self.first = self.first.max(upto + 1);
    }

    /// Records where a written entry landed. An entry truncated meanwhile (or replaced by
    /// another term) is left alone.
    pub fn written(&mut self, index: u64, term: u64, seg: u64, offset: u64, len: u32) {
        let Some(i) = index.checked_sub(self.first).and_then(|i| usize::try_from(i).ok()) else {
            return;
        };
        if let Some(loc) = self.locs.get_mut(i)
            && loc.term == term
            && !loc.durable
        {
            self.live_bytes -= weight(loc);
            loc.seg = seg;
            loc.offset = offset;
            loc.len = len;
            loc.durable = true;
            self.live_bytes += weight(loc);
        }
    }

    /// Records that a durable entry was rewritten (a `Rewrite` frame): it now lives there.
    /// An entry truncated meanwhile, replaced by another term or not durable is left alone.
    pub fn relocated(&mut self, index: u64, term: u64, seg: u64, offset: u64, len: u32) {
        let Some(i) = index.checked_sub(self.first).and_then(|i| usize::try_from(i).ok()) else {
            return;
        };
        if let Some(loc) = self.locs.get_mut(i)
            && loc.term == term
            && loc.durable
        {
            self.live_bytes -= weight(loc);
            loc.seg = seg;
            loc.offset = offset;
            loc.len = len;
            self.live_bytes += weight(loc);
        }
    }

    /// Evicts the oldest durable payloads while over budget.
    pub fn evict(&mut self) {
        while self.hot_bytes > self.budget && self.cold_until < self.locs.len() {
            let loc = &mut self.locs[self.cold_until];
            if !loc.durable {
                break;
            }
            if let Some(p) = loc.hot.take() {
                self.hot_bytes -= p.len();
            }
            self.cold_until += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(term: u64, bytes: usize) -> Loc {
        Loc { term, seg: 0, offset: 0, len: 0, durable: false, hot: Some(vec![0u8; bytes].into()) }
    }

    #[test]
    fn push_truncate_purge_evict() {
        let mut ix = Index::new(5, 250);
        for i in 5..10 {
            ix.push(i, loc(1, 100));
        }
        assert_eq!((ix.first_index(), ix.last_index()), (5, Some(9)));
        ix.evict();
        assert_eq!(ix.hot_bytes(), 500, "nothing durable, nothing evicted");
        for i in 5..10 {
            ix.written(i, 1, 1, i * 100, 100);
        }
        ix.evict();
        assert_eq!(ix.hot_bytes(), 200);
        assert!(ix.get(5).unwrap().hot.is_none() && ix.get(9).unwrap().hot.is_some());
        ix.truncate(8);
        assert_eq!(ix.last_index(), Some(7));
        ix.purge(6);
        assert_eq!((ix.first_index(), ix.len()), (7, 1));
        ix.purge(20);
        assert_eq!((ix.first_index(), ix.next_index(), ix.is_empty()), (21, 21, true));
    }
}
