//! Pins and loads: how a reader or a writer gets hold of a frame (module docs of `cache`).
//!
//! Invariants (asserted): a pinned frame is never evicted, reused or discarded; a `Loading`
//! page's bytes are read by nobody until it is `Ready`; a run loaded for readahead is read
//! with one carrier call into its frames (a direct-IO carrier passes it through one
//! contiguous bounce buffer: `carrier/fd.rs`), which nobody else locks meanwhile (they are
//! pinned and loading); a failed load removes every page of its run.

use super::{Backing, PageBuf, PageCache, Phase};
use crate::sync::MutexGuard;
use crate::sync::atomic::Ordering;

impl PageCache {
    pub(super) fn unpin(&self, f: usize) {
        let mut st = self.state();
        let slot = &mut st.slots[f];
        assert!(slot.pins > 0, "unpinning frame {f} that is not pinned");
        slot.pins -= 1;
        drop(st);
        self.notify();
    }

    /// Pins the ready page of `block`, loading it (and the readahead run up to `ra_until`,
    /// blocks `>= want_until` entering cold) when absent. `None`: no frame could be had.
    pub(super) fn pin_or_load<B: Backing + Sync>(
        &self,
        backing: &B,
        block: u64,
        want_until: u64,
        ra_until: u64,
    ) -> Result<Option<usize>, B::Error> {
        let mut st = self.state();
        loop {
            if let Some(&f) = st.map.get(&block) {
                let slot = &mut st.slots[f];
                if slot.phase == Phase::Loading {
                    st = self.wait(st);
                    continue;
                }
                slot.pins += 1;
                if slot.prefetched {
                    slot.prefetched = false;
                } else {
                    slot.credit = (slot.credit + 1).min(3);
                }
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(f));
            }
            break;
        }
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        let limit = ra_until.max(block + 1).min(block + self.max_run);
        let mut run: Vec<usize> = Vec::new();
        let mut b = block;
        while b < limit && !st.map.contains_key(&b) {
            let Some(f) = self.alloc_frame(&mut st) else { break };
            Self::insert(&mut st, f, b, b >= want_until);
            run.push(f);
            b += 1;
        }
        drop(st);
        if run.is_empty() {
            return Ok(None);
        }
        let result = self.load(backing, block, &run);
        let mut st = self.state();
        match result {
            Ok(()) => {
                let mut ahead = 0;
                for (i, &f) in run.iter().enumerate() {
                    let slot = &mut st.slots[f];
                    slot.phase = Phase::Ready;
                    if i > 0 {
                        slot.pins -= 1;
                    }
                    ahead += u64::from(slot.prefetched);
                }
                // Counted before the pages can be hit (under the state lock): a reader that
                // hits one sees it counted.
                self.counters.readahead_pages.fetch_add(ahead, Ordering::Relaxed);
                drop(st);
                self.notify();
                Ok(Some(run[0]))
            }
            Err(e) => {
                for &f in &run {
                    st.slots[f].pins -= 1;
                    Self::remove(&mut st, f);
                }
                drop(st);
                self.notify();
                if run.len() > 1 {
                    // The readahead may have hit an unreadable block the request does not
                    // need: read the demanded page alone (its caller reads around errors).
                    return self.pin_or_load(backing, block, block + 1, block + 1);
                }
                Err(e)
            }
        }
    }

    /// Asynchronous readahead (the readahead thread, `writeback.rs`): loads the absent pages
    /// of blocks `first..until`, from the first absent one up to the next resident one (at
    /// most one run), inserted loading (a reader of them waits, as for any load) and entering
    /// cold, with one carrier read. Returns the pages loaded: 0 when all are resident or no
    /// frame is free. A failed read removes the run and is only returned: the reader that
    /// wants those pages loads them itself and meets the error there.
    pub(crate) fn prefetch<B: Backing + Sync>(
        &self,
        backing: &B,
        first: u64,
        until: u64,
    ) -> Result<usize, B::Error> {
        let mut st = self.state();
        let mut start = first;
        while start < until && st.map.contains_key(&start) {
            start += 1;
        }
        let until = until.min(start + self.max_run);
        let mut run: Vec<usize> = Vec::new();
        let mut b = start;
        while b < until && !st.map.contains_key(&b) {
            let Some(f) = self.alloc_frame(&mut st) else { break };
            Self::insert(&mut st, f, b, true);
            run.push(f);
            b += 1;
        }
        drop(st);
        if run.is_empty() {
            return Ok(0);
        }
        let result = self.load(backing, start, &run);
        let mut st = self.state();
        for &f in &run {
            let slot = &mut st.slots[f];
            assert!(slot.phase == Phase::Loading, "a prefetched page changed while loading");
            slot.pins -= 1;
            if result.is_ok() {
                slot.phase = Phase::Ready;
            } else {
                Self::remove(&mut st, f);
            }
        }
        if result.is_ok() {
            // Counted before the pages can be hit (under the state lock): a reader that hits
            // one sees it counted.
            self.counters.readahead_pages.fetch_add(run.len() as u64, Ordering::Relaxed);
        }
        drop(st);
        self.notify();
        result.map(|()| run.len())
    }

    /// Reads the pages of `run` (frames of consecutive blocks from `first`) from the carrier
    /// into their frames, with one (vectored) read. Nobody else locks these frames:
    /// they are pinned and loading.
    fn load<B: Backing + Sync>(
        &self,
        backing: &B,
        first: u64,
        run: &[usize],
    ) -> Result<(), B::Error> {
        let offset = first * self.page as u64;
        if let [f] = run {
            return backing.read(offset, self.frame(*f).bytes_mut());
        }
        let mut guards: Vec<MutexGuard<'_, PageBuf>> = run.iter().map(|&f| self.frame(f)).collect();
        let mut bufs: Vec<&mut [u8]> = guards.iter_mut().map(|g| g.bytes_mut()).collect();
        backing.read_vectored(offset, &mut bufs)
    }

    /// Pins the ready pages of consecutive blocks `first..until` up to the first one that is
    /// absent or loading (counted as hits).
    pub(super) fn pin_ready(&self, first: u64, until: u64) -> Vec<usize> {
        let mut st = self.state();
        let mut out = Vec::new();
        for b in first..until {
            let Some(&f) = st.map.get(&b) else { break };
            let slot = &mut st.slots[f];
            if slot.phase != Phase::Ready {
                break;
            }
            slot.pins += 1;
            if slot.prefetched {
                slot.prefetched = false;
            } else {
                slot.credit = (slot.credit + 1).min(3);
            }
            out.push(f);
        }
        drop(st);
        self.counters.hits.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    pub(super) fn unpin_all(&self, frames: &[usize]) {
        let mut st = self.state();
        for &f in frames {
            let slot = &mut st.slots[f];
            assert!(slot.pins > 0, "unpinning frame {f} that is not pinned");
            slot.pins -= 1;
        }
        drop(st);
        self.notify();
    }

    /// Pins the page of `block` for a write that covers it whole: no carrier read. An absent
    /// page is inserted (loading, so no reader sees it before the write filled it).
    pub(super) fn pin_for_overwrite(&self, block: u64) -> Option<usize> {
        let mut st = self.state();
        loop {
            if let Some(&f) = st.map.get(&block) {
                let slot = &mut st.slots[f];
                if slot.phase == Phase::Loading {
                    st = self.wait(st);
                    continue;
                }
                slot.pins += 1;
                return Some(f);
            }
            let f = self.alloc_frame(&mut st)?;
            Self::insert(&mut st, f, block, false);
            return Some(f);
        }
    }
}
