//! S3-FIFO eviction (module docs of `cache`): a small probation queue, a main queue (a CLOCK
//! over the credit) and a ghost list of blocks evicted from probation.
//!
//! Invariants (asserted): a frame is in the map under exactly one block or on the free list;
//! only a ready, unpinned, clean page that no writeback holds is evicted (the kept mutant
//! `with_mutant_evicting_pinned_pages` breaks this for the loom model).

use super::{PageCache, Phase, Queue, Slot, State};
use crate::sync::atomic::Ordering;

impl PageCache {
    /// A frame for a new page: a free one, or one evicted by S3-FIFO. `None` when every frame
    /// is pinned, loading or dirty.
    pub(super) fn alloc_frame(&self, st: &mut State) -> Option<usize> {
        if let Some(f) = st.free.pop() {
            return Some(f);
        }
        let n = self.frames.len();
        let small_target = (n / 10).max(1);
        for _ in 0..2 * n + 2 {
            let from_small = st.small.len() > small_target || st.main.is_empty();
            let (f, epoch) = if from_small { st.small.pop_front() } else { st.main.pop_front() }?;
            if st.epochs[f] != epoch || st.slots[f].phase == Phase::Free {
                continue;
            }
            let slot = &mut st.slots[f];
            let pinned_only = slot.pins > 0 && !slot.dirty && !slot.writeback;
            let mutant = self.evict_pinned && pinned_only && slot.phase == Phase::Ready;
            if !(slot.evictable() || mutant) {
                if from_small {
                    st.small.push_back((f, epoch));
                } else {
                    st.main.push_back((f, epoch));
                }
                continue;
            }
            if slot.credit > 0 {
                if from_small {
                    slot.queue = Queue::Main;
                } else {
                    slot.credit -= 1;
                }
                st.main.push_back((f, epoch));
                continue;
            }
            let block = slot.block;
            *slot = Slot::free();
            let removed = st.map.remove(&block);
            assert_eq!(removed, Some(f), "frame {f} evicted under block {block}");
            if from_small {
                st.ghost.insert(block);
                st.ghost_order.push_back(block);
                while st.ghost_order.len() > n {
                    if let Some(old) = st.ghost_order.pop_front() {
                        st.ghost.remove(&old);
                    }
                }
            }
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            return Some(f);
        }
        None
    }

    /// Puts frame `f` in the map under `block`, loading and pinned once.
    pub(super) fn insert(st: &mut State, f: usize, block: u64, cold: bool) {
        assert!(st.slots[f].phase == Phase::Free, "frame {f} reused while in use");
        let queue = if !cold && st.ghost.remove(&block) { Queue::Main } else { Queue::Small };
        st.slots[f] =
            Slot { block, phase: Phase::Loading, pins: 1, prefetched: cold, queue, ..Slot::free() };
        let previous = st.map.insert(block, f);
        assert!(previous.is_none(), "block {block} cached twice");
        st.epochs[f] = st.epochs[f].wrapping_add(1);
        let entry = (f, st.epochs[f]);
        match queue {
            Queue::Small => st.small.push_back(entry),
            Queue::Main => st.main.push_back(entry),
        }
    }

    /// Removes a page that is not pinned by anyone else (its frame returns to the free list;
    /// the queues drop its entry when it comes up).
    pub(super) fn remove(st: &mut State, f: usize) {
        let slot = &st.slots[f];
        assert!(slot.phase != Phase::Free, "removing free frame {f}");
        let block = slot.block;
        if slot.dirty {
            st.dirty.remove(&block);
        }
        let removed = st.map.remove(&block);
        assert_eq!(removed, Some(f), "frame {f} removed under block {block}");
        st.slots[f] = Slot::free();
        st.free.push(f);
    }
}
