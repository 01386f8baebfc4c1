//! The volume's own page cache (design: "Own page cache").
//!
//! A fixed set of frames, one volume block each, allocated once at open and aligned for direct
//! IO, keyed by physical block number. The cache knows nothing of files: the data path above
//! decides what goes through it (the buffered tier) and what bypasses it (the direct tier),
//! and passes the contiguous run of the file's extent as the readahead limit.
//!
//! Eviction is S3-FIFO: a page enters a small probation queue with no credit; a hit gives it
//! credit (up to 3); leaving the probation queue with credit promotes it to the main queue,
//! without credit evicts it (its block is remembered in a ghost list, and a miss on a ghost
//! enters the main queue directly). The main queue is a CLOCK over the credit. Readahead pages
//! enter cold and their first hit is not credit, so one sequential scan only churns the
//! probation queue and leaves the hot set in the main queue.
//!
//! Invariants (asserted where a breach would return or write wrong bytes):
//! - A frame is in the map under exactly one block, or on the free list; never both.
//! - A pinned page (`pins > 0`: IO in flight, a copy in progress) is never evicted, discarded
//!   or reused: eviction skips it, discard waits for it.
//! - A `Loading` page's bytes are not valid: readers wait until it is `Ready` or gone.
//! - A dirty page is never evicted: it is written back first (by the writeback thread, a
//!   writer over the hard threshold, a direct IO overlapping it, or `flush_all`). Writeback
//!   clears `dirty` before it copies the bytes, so a write that lands during the writeback
//!   dirties the page again and is written by a later one.
//! - A page under writeback stays pinned until the carrier write returned: discarding it (a
//!   direct write, freed blocks) waits, so a stale writeback never lands after newer bytes.
//! - Locks: the state mutex and a frame's mutex are never held together, and no lock of the
//!   cache is held across a carrier call except a frame's, by the one thread that pinned it.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Condvar, Mutex, MutexGuard};

/// The unit frames are built of: 4096 bytes on a 4096-byte boundary, so a frame (one or more
/// units) is aligned for direct IO on any carrier (`open` refuses carriers that need more).
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C, align(4096))]
pub(crate) struct Unit([u8; 4096]);

/// An aligned buffer of whole units.
pub(crate) struct PageBuf(Box<[Unit]>);

impl PageBuf {
    pub(crate) fn zeroed(bytes: usize) -> PageBuf {
        assert!(bytes.is_multiple_of(4096), "page buffers are whole 4096-byte units");
        PageBuf(vec![Unit([0; 4096]); bytes / 4096].into_boxed_slice())
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.0)
    }
}

/// Where the cache reads pages from and writes them back to (the IO layer; a model in tests).
pub(crate) trait Backing {
    type Error: Send;
    /// Reads `buf.len()` bytes at byte `offset` (whole pages, aligned).
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Self::Error>;
    /// Writes `buf` at byte `offset`: a plain (not durable) data write.
    fn write(&self, offset: u64, buf: &[u8]) -> Result<(), Self::Error>;
    /// Reads into `bufs` in order from `offset` (one carrier call: frames filled in place).
    fn read_vectored(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), Self::Error>;
    /// Writes `bufs` in order from `offset` (one plain carrier write, from the frames).
    fn write_vectored(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), Self::Error>;
}

/// Counters of the cache (monotonic, except `dirty_pages`).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) readahead_pages: AtomicU64,
    pub(crate) writeback_pages: AtomicU64,
    pub(crate) writeback_writes: AtomicU64,
    pub(crate) writeback_ns: AtomicU64,
    pub(crate) writeback_bytes: AtomicU64,
    pub(crate) bypassed: AtomicU64,
}

/// Metric names of the cache (Prometheus), published by `Volume::publish_metrics`.
pub mod names {
    pub const HITS_TOTAL: &str = "vellum_cache_hits_total";
    pub const MISSES_TOTAL: &str = "vellum_cache_misses_total";
    pub const EVICTIONS_TOTAL: &str = "vellum_cache_evictions_total";
    pub const READAHEAD_PAGES_TOTAL: &str = "vellum_cache_readahead_pages_total";
    pub const WRITEBACK_PAGES_TOTAL: &str = "vellum_cache_writeback_pages_total";
    pub const WRITEBACK_BYTES_TOTAL: &str = "vellum_cache_writeback_bytes_total";
    pub const WRITEBACK_WRITES_TOTAL: &str = "vellum_cache_writeback_writes_total";
    pub const WRITEBACK_BUSY_SECONDS: &str = "vellum_cache_writeback_busy_seconds";
    pub const BYPASSED_PAGES_TOTAL: &str = "vellum_cache_bypassed_pages_total";
    pub const DIRTY_PAGES: &str = "vellum_cache_dirty_pages";
    pub const RESIDENT_PAGES: &str = "vellum_cache_resident_pages";
    pub const CAPACITY_BYTES: &str = "vellum_cache_capacity_bytes";
}

/// A snapshot of the cache's counters and state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Budget in bytes (frames × page size).
    pub capacity_bytes: u64,
    pub page_size: u32,
    /// Pages holding a block.
    pub resident_pages: u64,
    pub dirty_pages: u64,
    /// Reads of a page that was resident.
    pub hits: u64,
    /// Reads that had to go to the carrier (each reads a run, readahead included).
    pub misses: u64,
    pub evictions: u64,
    /// Pages read ahead of a request (along the file's extent).
    pub readahead_pages: u64,
    /// Pages written back, and the carrier writes that took (contiguous pages go as one).
    pub writeback_pages: u64,
    pub writeback_writes: u64,
    /// Time spent in writeback carrier writes, and the bytes they wrote.
    pub writeback_ns: u64,
    pub writeback_bytes: u64,
    /// Pages that went straight to the carrier because every frame was pinned or dirty.
    pub bypassed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Free,
    Loading,
    Ready,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

#[derive(Debug, Clone)]
struct Slot {
    block: u64,
    phase: Phase,
    pins: u32,
    credit: u8,
    /// Read ahead and not yet read: its first hit earns no credit.
    prefetched: bool,
    dirty: bool,
    /// Which units of the page (`PageCache::unit` bytes each) were written since the last
    /// writeback: only those go to the carrier.
    units: u128,
    dirty_since: Option<Instant>,
    writeback: bool,
    queue: Queue,
}

impl Slot {
    fn free() -> Slot {
        Slot {
            block: 0,
            phase: Phase::Free,
            pins: 0,
            credit: 0,
            prefetched: false,
            dirty: false,
            units: 0,
            dirty_since: None,
            writeback: false,
            queue: Queue::Small,
        }
    }

    fn evictable(&self) -> bool {
        self.phase == Phase::Ready && self.pins == 0 && !self.dirty && !self.writeback
    }
}

struct State {
    map: HashMap<u64, usize>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Queue entries are `(frame, epoch)`; an entry whose epoch is not the frame's current
    /// one (the page was removed, the frame reused) is dropped when it comes up.
    small: VecDeque<(usize, u32)>,
    main: VecDeque<(usize, u32)>,
    epochs: Vec<u32>,
    ghost: HashSet<u64>,
    ghost_order: VecDeque<u64>,
    /// Blocks of dirty pages, in block order (contiguous runs go out as one write).
    dirty: BTreeSet<u64>,
    /// Pages under writeback now.
    in_writeback: usize,
}

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

/// The page cache. See the module docs for its invariants.
pub(crate) struct PageCache {
    page: usize,
    frames: Vec<Mutex<PageBuf>>,
    state: Mutex<State>,
    /// Signalled when a page leaves `Loading`, is unpinned, or finishes writeback.
    changed: Condvar,
    /// Threads waiting on `changed`.
    waiting: AtomicUsize,
    pub(crate) counters: Counters,
    /// Longest run one carrier read brings in (demand plus readahead).
    max_run: u64,
    /// The unit of dirty tracking: the carrier's atomic write unit. Writeback rewrites only
    /// the units a write touched, never the page's other units: a power cut during a
    /// writeback may tear what it writes, and rewriting bytes nobody changed would put
    /// already durable bytes at risk (the same rule the direct tier keeps).
    unit: usize,
    /// The mutant the loom model must catch: eviction ignores pins.
    evict_pinned: bool,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("page", &self.page)
            .field("frames", &self.frames.len())
            .finish_non_exhaustive()
    }
}

/// A writeback of at least this many runs is spread over [`WRITEBACK_LANES`] threads.
const PARALLEL_RUNS: usize = 4;
/// Threads one large writeback uses (its writes reach the device queued together).
const WRITEBACK_LANES: usize = 4;

/// Fewest frames a cache has (a smaller budget is rounded up).
pub(crate) const MIN_FRAMES: usize = 16;

impl PageCache {
    /// A cache of `budget_bytes` (rounded down to whole pages, at least [`MIN_FRAMES`]) of
    /// `page_size`-byte pages, all allocated now.
    pub(crate) fn new(budget_bytes: usize, page_size: usize, max_run_bytes: usize) -> PageCache {
        assert!(page_size.is_power_of_two() && page_size >= 4096, "page size {page_size}");
        let n = (budget_bytes / page_size).max(MIN_FRAMES);
        let frames = (0..n).map(|_| Mutex::new(PageBuf::zeroed(page_size))).collect();
        let state = State {
            map: HashMap::with_capacity(n),
            slots: vec![Slot::free(); n],
            free: (0..n).rev().collect(),
            small: VecDeque::with_capacity(n),
            main: VecDeque::with_capacity(n),
            epochs: vec![0; n],
            ghost: HashSet::new(),
            ghost_order: VecDeque::new(),
            dirty: BTreeSet::new(),
            in_writeback: 0,
        };
        PageCache {
            page: page_size,
            frames,
            state: Mutex::new(state),
            changed: Condvar::new(),
            waiting: AtomicUsize::new(0),
            counters: Counters::default(),
            max_run: (max_run_bytes / page_size).max(1) as u64,
            unit: (page_size / 128).max(512),
            evict_pinned: false,
        }
    }

    /// A cache of exactly `frames` frames, below the production minimum (the loom model).
    #[allow(dead_code)]
    pub(crate) fn tiny(frames: usize, page_size: usize) -> PageCache {
        let mut cache = PageCache::new(MIN_FRAMES * page_size, page_size, page_size);
        cache.frames.truncate(frames);
        {
            let mut st = cache.state();
            st.slots.truncate(frames);
            st.epochs.truncate(frames);
            st.free = (0..frames).rev().collect();
        }
        cache
    }

    /// The mutant: eviction takes pinned pages too (the loom model must catch it).
    #[allow(dead_code)]
    pub(crate) fn with_mutant_evicting_pinned_pages(mut self) -> PageCache {
        self.evict_pinned = true;
        self
    }

    /// Sets the unit of dirty tracking (a power of two, at least 1/128 of a page; the
    /// carrier's physical sector).
    pub(crate) fn with_dirty_unit(mut self, unit: usize) -> PageCache {
        let unit = unit.clamp((self.page / 128).max(1), self.page);
        assert!(unit.is_power_of_two(), "dirty unit {unit}");
        self.unit = unit;
        self
    }

    /// The mask of units `[within, within + n)` touches.
    fn units_of(&self, within: usize, n: usize) -> u128 {
        let first = within / self.unit;
        let end = (within + n).div_ceil(self.unit);
        let ones = if end - first >= 128 { u128::MAX } else { (1u128 << (end - first)) - 1 };
        ones << first
    }

    pub(crate) fn page_size(&self) -> usize {
        self.page
    }

    pub(crate) fn frames(&self) -> usize {
        self.frames.len()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for `changed`. The waiter count is raised under the state lock, so a thread that
    /// changes the state after this one checked it (which needs the lock) sees the count.
    fn wait<'a>(&self, st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let st = self.changed.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        st
    }

    /// Wakes the waiters, if any (a hit then costs no futex call).
    fn notify(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.changed.notify_all();
        }
    }

    fn frame(&self, f: usize) -> MutexGuard<'_, PageBuf> {
        self.frames[f].lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn dirty_pages(&self) -> usize {
        self.state().dirty.len()
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let (resident, dirty) = {
            let st = self.state();
            (st.map.len() as u64, st.dirty.len() as u64)
        };
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            capacity_bytes: (self.frames.len() * self.page) as u64,
            page_size: self.page as u32,
            resident_pages: resident,
            dirty_pages: dirty,
            hits: get(&c.hits),
            misses: get(&c.misses),
            evictions: get(&c.evictions),
            readahead_pages: get(&c.readahead_pages),
            writeback_pages: get(&c.writeback_pages),
            writeback_writes: get(&c.writeback_writes),
            writeback_ns: get(&c.writeback_ns),
            writeback_bytes: get(&c.writeback_bytes),
            bypassed: get(&c.bypassed),
        }
    }

    /// A frame for a new page: a free one, or one evicted by S3-FIFO. `None` when every frame
    /// is pinned, loading or dirty.
    fn alloc_frame(&self, st: &mut State) -> Option<usize> {
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
    fn insert(st: &mut State, f: usize, block: u64, cold: bool) {
        assert!(st.slots[f].phase == Phase::Free, "frame {f} reused while in use");
        let queue = if !cold && st.ghost.remove(&block) { Queue::Main } else { Queue::Small };
        st.slots[f] = Slot {
            block,
            phase: Phase::Loading,
            pins: 1,
            credit: 0,
            prefetched: cold,
            dirty: false,
            units: 0,
            dirty_since: None,
            writeback: false,
            queue,
        };
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
    fn remove(st: &mut State, f: usize) {
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

    fn unpin(&self, f: usize) {
        let mut st = self.state();
        let slot = &mut st.slots[f];
        assert!(slot.pins > 0, "unpinning frame {f} that is not pinned");
        slot.pins -= 1;
        drop(st);
        self.notify();
    }

    /// Pins the ready page of `block`, loading it (and the readahead run up to `ra_until`,
    /// blocks `>= want_until` entering cold) when absent. `None`: no frame could be had.
    fn pin_or_load<B: Backing + Sync>(
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
                drop(st);
                self.counters.readahead_pages.fetch_add(ahead, Ordering::Relaxed);
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

    /// Reads the pages of `run` (frames of consecutive blocks from `first`) from the carrier
    /// straight into their frames, with one (vectored) read. Nobody else locks these frames:
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

    /// Reads `dst.len()` bytes at physical byte `offset` through the cache. The range is
    /// physically contiguous; `ra_until` (a block number) bounds the readahead: the end of
    /// the file extent's contiguous run, or less.
    pub(crate) fn read<B: Backing + Sync>(
        &self,
        backing: &B,
        offset: u64,
        dst: &mut [u8],
        ra_until: u64,
    ) -> Result<(), B::Error> {
        let ps = self.page as u64;
        let end = offset + dst.len() as u64;
        let want_until = end.div_ceil(ps);
        let mut pos = offset;
        while pos < end {
            // The ready pages from here on, pinned under one lock and released under one.
            let ready = self.pin_ready(pos / ps, want_until);
            for &f in &ready {
                let within = (pos % ps) as usize;
                let n = (ps - pos % ps).min(end - pos) as usize;
                let out = &mut dst[(pos - offset) as usize..(pos - offset) as usize + n];
                out.copy_from_slice(&self.frame(f).bytes()[within..within + n]);
                pos += n as u64;
            }
            if !ready.is_empty() {
                self.unpin_all(&ready);
                continue;
            }
            let block = pos / ps;
            let within = (pos % ps) as usize;
            let n = (ps - pos % ps).min(end - pos) as usize;
            let out = &mut dst[(pos - offset) as usize..(pos - offset) as usize + n];
            if let Some(f) =
                self.pin_or_load(backing, block, want_until, ra_until.max(want_until))?
            {
                out.copy_from_slice(&self.frame(f).bytes()[within..within + n]);
                self.unpin(f);
            } else {
                self.counters.bypassed.fetch_add(1, Ordering::Relaxed);
                backing.read(pos, out)?;
            }
            pos += n as u64;
        }
        Ok(())
    }

    /// Pins the ready pages of consecutive blocks `first..until` up to the first one that is
    /// absent or loading (counted as hits).
    fn pin_ready(&self, first: u64, until: u64) -> Vec<usize> {
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

    fn unpin_all(&self, frames: &[usize]) {
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
    fn pin_for_overwrite(&self, block: u64) -> Option<usize> {
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

    /// Writes `data` at physical byte `offset` into the cache as dirty pages (write-back).
    /// A page the write covers only in part is read first if absent. Returns whether any
    /// bytes went straight to the carrier instead (every frame pinned or dirty).
    pub(crate) fn write<B: Backing + Sync>(
        &self,
        backing: &B,
        offset: u64,
        data: &[u8],
    ) -> Result<(), B::Error> {
        let ps = self.page as u64;
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let block = pos / ps;
            let within = (pos % ps) as usize;
            let n = (ps - pos % ps).min(end - pos) as usize;
            let src = &data[(pos - offset) as usize..(pos - offset) as usize + n];
            let frame = if n == self.page {
                self.pin_for_overwrite(block)
            } else {
                self.pin_or_load(backing, block, block + 1, block + 1)?
            };
            if let Some(f) = frame {
                {
                    self.frame(f).bytes_mut()[within..within + n].copy_from_slice(src);
                    let mut st = self.state();
                    let slot = &mut st.slots[f];
                    slot.phase = Phase::Ready;
                    slot.pins -= 1;
                    slot.units |= self.units_of(within, n);
                    if !slot.dirty {
                        slot.dirty = true;
                        slot.dirty_since = Some(Instant::now());
                        st.dirty.insert(block);
                    }
                    drop(st);
                    self.notify();
                }
            } else {
                self.counters.bypassed.fetch_add(1, Ordering::Relaxed);
                backing.write(pos, src)?;
            }
            pos += n as u64;
        }
        Ok(())
    }

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
            slot.pins += 1;
            st.dirty.remove(&b);
            st.in_writeback += 1;
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
        let lanes = if runs.len() >= PARALLEL_RUNS { WRITEBACK_LANES } else { 1 };
        let result = if lanes == 1 {
            self.write_runs(backing, taken, &runs)
        } else {
            let per = runs.len().div_ceil(lanes);
            std::thread::scope(|s| {
                let handles: Vec<_> = runs
                    .chunks(per)
                    .map(|chunk| s.spawn(move || self.write_runs(backing, taken, chunk)))
                    .collect();
                let mut result = Ok(());
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
            slot.writeback = false;
            slot.pins -= 1;
            st.in_writeback -= 1;
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
    /// flight there (a direct read of the range then sees every accepted write).
    pub(crate) fn flush_blocks<B: Backing + Sync>(
        &self,
        backing: &B,
        first: u64,
        end: u64,
    ) -> Result<(), B::Error> {
        let (taken, in_flight) = {
            let mut st = self.state();
            if st.in_writeback == 0 && st.dirty.range(first..end).next().is_none() {
                // The common case of a direct read: nothing to write back, nothing to wait for.
                return Ok(());
            }
            let blocks: Vec<u64> = st
                .dirty
                .range(first..end)
                .copied()
                .filter(|b| !st.slots[st.map[b]].writeback)
                .collect();
            let in_flight: Vec<(u64, usize)> = st
                .map
                .iter()
                .filter(|&(&b, &f)| b >= first && b < end && st.slots[f].writeback)
                .map(|(&b, &f)| (b, f))
                .collect();
            (Self::take_dirty(&mut st, &blocks), in_flight)
        };
        self.write_back(backing, &taken)?;
        let mut st = self.state();
        for (b, f) in in_flight {
            while st.slots[f].writeback && st.slots[f].block == b {
                st = self.wait(st);
            }
        }
        // A page dirtied again while its writeback was in flight (and skipped above) is
        // written now.
        let again: Vec<u64> = st.dirty.range(first..end).copied().collect();
        if again.is_empty() {
            return Ok(());
        }
        let taken = Self::take_dirty(&mut st, &again);
        drop(st);
        self.write_back(backing, &taken)
    }

    /// Drops the pages of blocks `[first, end)`, dirty or not, waiting for pins (loads,
    /// copies, writebacks in flight) to end: afterwards no page of the range is cached and no
    /// writeback of it is in flight. For direct writes (which supersede the pages) and freed
    /// blocks.
    pub(crate) fn discard(&self, first: u64, end: u64) {
        let mut st = self.state();
        loop {
            if st.map.is_empty() {
                return;
            }
            let found: Vec<usize> = if end - first <= (st.map.len() as u64).min(4096) {
                (first..end).filter_map(|b| st.map.get(&b).copied()).collect()
            } else {
                st.map.iter().filter(|&(&b, _)| b >= first && b < end).map(|(_, &f)| f).collect()
            };
            let mut waiting = false;
            for f in found {
                if st.slots[f].pins > 0 {
                    waiting = true;
                } else {
                    Self::remove(&mut st, f);
                }
            }
            if !waiting {
                return;
            }
            st = self.wait(st);
        }
    }

    /// True when block `b` is resident (tests and the model check).
    #[allow(dead_code)]
    pub(crate) fn contains(&self, b: u64) -> bool {
        self.state().map.contains_key(&b)
    }
}
