//! Writeback of dirty pages: the drains of the writeback thread and of writers over the hard
//! line, and the flushes of syncs, commits and direct IO.
//!
//! Invariants (asserted): a page is taken for writeback only when it is dirty and not under
//! another writeback; taking it clears `dirty` and pins it until its carrier write returned;
//! only the units a write touched go to the carrier. A flush of a range writes back, or waits
//! for the writeback in flight of, every page of the range dirtied before the flush started
//! (its dirty sequence is lower), and nothing else: it ends whatever other threads keep
//! writing, and on return every write the cache accepted before the call has reached the
//! backing (or failed there: the IO layer's error sequence tells the caller).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::{Backing, PageBuf, PageCache, State};
use crate::sync::MutexGuard;
use crate::sync::atomic::Ordering;

/// Which dirty pages a background drain takes: pages dirty for longer than `older_than`,
/// then the lowest blocks while more than `above` pages are dirty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Select {
    pub(crate) older_than: Duration,
    pub(crate) above: usize,
}

/// Bytes `[start, end)` of the page of `taken[index]`, part of one writeback write.
type Piece = (usize, usize, usize);

/// A page taken for writeback: its block, frame, and the units to write.
struct Taken {
    block: u64,
    frame: usize,
    units: u128,
}

/// A writeback of at least this many runs goes out from this many threads or more: one
/// per this many runs, up to [`WRITEBACK_LANES`].
const PARALLEL_RUNS: usize = 4;
/// Threads one large writeback uses at most: its writes reach the device queued together,
/// as the host's writeback queues them. Random 4 KiB writes then a sync, against the host's
/// buffered writes + fdatasync (the cache suite): 4 threads 0.55x, 16 0.88x, 32 1.00x, 64
/// 0.88x (on a direct-IO carrier, one run each, this machine's noise about 10 %).
const WRITEBACK_LANES: usize = 32;

impl PageCache {
    /// Takes dirty pages for writeback: clears `dirty`, sets `writeback`, pins them.
    fn take_dirty(st: &mut State, blocks: &[u64]) -> Vec<Taken> {
        let mut out = Vec::with_capacity(blocks.len());
        for &b in blocks {
            let f = st.map[&b];
            let slot = &mut st.slots[f];
            assert!(slot.dirty && !slot.writeback, "block {b} taken for writeback twice");
            let units = std::mem::take(&mut slot.units);
            slot.dirty = false;
            slot.dirty_since = None;
            slot.writeback = true;
            slot.writeback_seq = std::mem::take(&mut slot.dirty_seq);
            slot.pins += 1;
            st.dirty.remove(&b);
            st.writing.insert(b);
            out.push(Taken { block: b, frame: f, units });
        }
        out
    }

    /// Writes the taken pages back, then releases them: the written units of each page,
    /// one carrier write per run of consecutive written units (across pages: consecutive
    /// whole pages go out as one write). On a failure the remaining pages are released too
    /// (their bytes are lost: the IO layer poisoned the volume).
    fn write_back<B: Backing + Sync>(&self, backing: &B, taken: &[Taken]) -> Result<(), B::Error> {
        let started = Instant::now();
        let (ps, unit) = (self.page as u64, self.unit as u64);
        // Byte runs on the carrier: (offset, pieces of (taken index, start, end in page)).
        let mut runs: Vec<(u64, Vec<Piece>)> = Vec::new();
        for (i, t) in taken.iter().enumerate() {
            let mut u = 0;
            let units = (self.page / self.unit).min(128);
            while u < units {
                if t.units & (1u128 << u) == 0 {
                    u += 1;
                    continue;
                }
                let first = u;
                while u < units && t.units & (1u128 << u) != 0 {
                    u += 1;
                }
                let (lo, hi) = (first * self.unit, u * self.unit);
                let at = t.block * ps + lo as u64;
                match runs.last_mut() {
                    Some((offset, pieces))
                        if *offset + pieces.iter().map(|p| (p.2 - p.1) as u64).sum::<u64>()
                            == at
                            && pieces.len() < 256 =>
                    {
                        pieces.push((i, lo, hi));
                    }
                    _ => runs.push((at, vec![(i, lo, hi)])),
                }
            }
        }
        debug_assert!(runs.iter().all(|r| r.0 % unit == 0));
        // Many runs (random pages) go out from a few threads at once: the device sees them
        // queued together, as the host's own writeback would issue them.
        let lanes = if runs.len() >= PARALLEL_RUNS {
            (runs.len() / PARALLEL_RUNS).clamp(PARALLEL_RUNS, WRITEBACK_LANES)
        } else {
            1
        };
        let result = if lanes == 1 {
            self.write_runs(backing, taken, &runs)
        } else {
            let per = runs.len().div_ceil(lanes);
            std::thread::scope(|s| {
                let mut result = Ok(());
                let handles: Vec<_> = runs
                    .chunks(per)
                    .filter_map(|chunk| {
                        let lane = move || self.write_runs(backing, taken, chunk);
                        let spawned = std::thread::Builder::new().spawn_scoped(s, lane).ok();
                        if spawned.is_none() {
                            // The system refused a thread (a limit on threads): this lane's
                            // runs go out from this one, never a panic in a sync.
                            let r = self.write_runs(backing, taken, chunk);
                            if result.is_ok() {
                                result = r;
                            }
                        }
                        spawned
                    })
                    .collect();
                for h in handles {
                    let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    if result.is_ok() {
                        result = r;
                    }
                }
                result
            })
        };
        self.counters.writeback_pages.fetch_add(taken.len() as u64, Ordering::Relaxed);
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.counters.writeback_ns.fetch_add(ns, Ordering::Relaxed);
        let mut st = self.state();
        for t in taken {
            let slot = &mut st.slots[t.frame];
            assert!(
                slot.writeback && slot.block == t.block,
                "block {} written back twice",
                t.block
            );
            slot.writeback = false;
            slot.writeback_seq = 0;
            slot.pins -= 1;
            st.writing.remove(&t.block);
        }
        drop(st);
        self.notify();
        result
    }

    /// Writes `runs` in order, each straight from the frames: each page of a run appears once,
    /// and its frame is pinned by this writeback (writers copy in under the same lock, in
    /// turn). Stops at the first failure.
    fn write_runs<B: Backing + Sync>(
        &self,
        backing: &B,
        taken: &[Taken],
        runs: &[(u64, Vec<Piece>)],
    ) -> Result<(), B::Error> {
        for (offset, pieces) in runs {
            let result = {
                let guards: Vec<MutexGuard<'_, PageBuf>> =
                    pieces.iter().map(|&(i, _, _)| self.frame(taken[i].frame)).collect();
                let bufs: Vec<&[u8]> =
                    guards.iter().zip(pieces).map(|(g, &(_, lo, hi))| &g.bytes()[lo..hi]).collect();
                if let [one] = bufs.as_slice() {
                    backing.write(*offset, one)
                } else {
                    backing.write_vectored(*offset, &bufs)
                }
            };
            self.counters.writeback_writes.fetch_add(1, Ordering::Relaxed);
            let len: usize = pieces.iter().map(|p| p.2 - p.1).sum();
            self.counters.writeback_bytes.fetch_add(len as u64, Ordering::Relaxed);
            result?;
        }
        Ok(())
    }

    /// One drain: takes at most `budget` dirty pages as `select` says and writes them back.
    /// Returns how many it wrote.
    pub(crate) fn drain<B: Backing + Sync>(
        &self,
        backing: &B,
        select: Select,
        budget: usize,
    ) -> Result<usize, B::Error> {
        let taken = {
            let mut st = self.state();
            let mut blocks: Vec<u64> = Vec::new();
            {
                let Select { older_than, above } = select;
                {
                    let now = Instant::now();
                    let mut chosen = BTreeSet::new();
                    for &b in &st.dirty {
                        if chosen.len() >= budget {
                            break;
                        }
                        let since = st.slots[st.map[&b]].dirty_since;
                        if since.is_some_and(|t| now.duration_since(t) >= older_than) {
                            chosen.insert(b);
                        }
                    }
                    let over = st.dirty.len().saturating_sub(above);
                    for &b in st.dirty.iter().take(over) {
                        if chosen.len() >= budget {
                            break;
                        }
                        chosen.insert(b);
                    }
                    blocks.extend(chosen);
                }
            }
            blocks.retain(|b| !st.slots[st.map[b]].writeback);
            Self::take_dirty(&mut st, &blocks)
        };
        self.write_back(backing, &taken)?;
        Ok(taken.len())
    }

    /// Writes back every dirty page and waits for writebacks already in flight: on return,
    /// every write the cache accepted before the call has reached the backing.
    pub(crate) fn flush_all<B: Backing + Sync>(&self, backing: &B) -> Result<(), B::Error> {
        self.flush_blocks(backing, 0, u64::MAX)
    }

    /// Writes back the dirty pages of blocks `[first, end)` and waits for the writebacks in
    /// flight there, until no page of the range holds bytes written before the call that
    /// have not reached the backing (a direct read of the range then sees every accepted
    /// write; a sync's barrier then covers them).
    ///
    /// A page dirtied before the call is taken here if no writeback has it, or waited for if
    /// one has (and taken after, if it was dirtied again meanwhile); pages dirtied after the
    /// call started are left to later flushes, so the loop ends.
    pub(crate) fn flush_blocks<B: Backing + Sync>(
        &self,
        backing: &B,
        first: u64,
        end: u64,
    ) -> Result<(), B::Error> {
        let mut st = self.state();
        if st.writing.range(first..end).next().is_none()
            && st.dirty.range(first..end).next().is_none()
        {
            // The common case of a direct read: nothing to write back, nothing to wait for.
            return Ok(());
        }
        let start = st.next_dirty_seq;
        loop {
            let (take, busy) = self.flush_step(&st, first, end, start);
            if !take.is_empty() {
                let taken = Self::take_dirty(&mut st, &take);
                drop(st);
                self.write_back(backing, &taken)?;
                st = self.state();
            } else if busy {
                st = self.wait(st);
            } else {
                return Ok(());
            }
        }
    }

    /// One look at the range for a flush that started at dirty sequence `start`: the dirty
    /// pages it can take now, and whether it must wait for a writeback in flight (of bytes
    /// older than `start`, or of a page dirtied before `start` again).
    fn flush_step(
        &self,
        st: &MutexGuard<'_, State>,
        first: u64,
        end: u64,
        start: u64,
    ) -> (Vec<u64>, bool) {
        let mut take = Vec::new();
        let mut busy = false;
        for &b in st.dirty.range(first..end) {
            let slot = &st.slots[st.map[&b]];
            if slot.dirty_seq >= start {
                continue;
            }
            if slot.writeback && !self.flush_takes_busy_pages {
                busy = true;
            } else {
                take.push(b);
            }
        }
        busy |= st.writing.range(first..end).any(|b| st.slots[st.map[b]].writeback_seq < start);
        (take, busy)
    }
}
