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
//! - A page is taken for writeback by one writeback at a time: only a dirty page that is not
//!   under writeback is taken (a page dirtied again during its writeback waits for it).
//! - Every page that becomes dirty gets the next *dirty sequence*; a flush writes back, or
//!   waits for the writeback of, exactly the pages dirtied before it started, so it ends
//!   however fast other threads keep dirtying pages.
//! - A page under writeback stays pinned until the carrier write returned: discarding it (a
//!   direct write, freed blocks) waits, so a stale writeback never lands after newer bytes.
//! - Locks: the state mutex and a frame's mutex are never held together, and no lock of the
//!   cache is held across a carrier call except a frame's, by the one thread that pinned it.
//!
//! Files by role: this one (the frames' bookkeeping, reads, writes, discards), `frames`
//! (pins and loads), `evict` (S3-FIFO), `flush` (writeback: drains and flushes).

mod evict;
mod flush;
mod frames;

pub(crate) use flush::Select;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Instant;

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
    /// No memory yet: a frame gets its page on first use (`PageCache::frame`).
    fn unallocated() -> PageBuf {
        PageBuf(Box::new([]))
    }
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
    /// Reads bytes that go around the frames (every frame pinned or dirty): any alignment.
    fn read_around(&self, offset: u64, buf: &mut [u8]) -> Result<(), Self::Error> {
        self.read(offset, buf)
    }
    /// Writes bytes that go around the frames: any alignment.
    fn write_around(&self, offset: u64, buf: &[u8]) -> Result<(), Self::Error> {
        self.write(offset, buf)
    }
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

/// Metric names of the cache (Prometheus), kept with the engine's other names.
pub use crate::metric_names::cache as names;

/// A snapshot of the cache's counters and state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Budget in bytes (frames × page size).
    pub capacity_bytes: u64,
    /// Bytes per page (the volume's block size).
    pub page_size: u32,
    /// Pages holding a block.
    pub resident_pages: u64,
    /// Pages written in the cache and not yet on the carrier.
    pub dirty_pages: u64,
    /// Reads of a page that was resident.
    pub hits: u64,
    /// Reads that had to go to the carrier (each reads a run, readahead included).
    pub misses: u64,
    /// Pages dropped to make room (S3-FIFO).
    pub evictions: u64,
    /// Pages read ahead of a request (along the file's extent).
    pub readahead_pages: u64,
    /// Pages written back, and the carrier writes that took (contiguous pages go as one).
    pub writeback_pages: u64,
    /// Carrier writes the writeback made for `writeback_pages`.
    pub writeback_writes: u64,
    /// Time spent in writeback carrier writes, and the bytes they wrote.
    pub writeback_ns: u64,
    /// Bytes the writeback wrote.
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
    /// The dirty sequence the page got when it last became dirty (0: clean).
    dirty_seq: u64,
    writeback: bool,
    /// The dirty sequence of the bytes the writeback in flight carries.
    writeback_seq: u64,
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
            dirty_seq: 0,
            writeback: false,
            writeback_seq: 0,
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
    /// Blocks of pages under writeback now.
    writing: BTreeSet<u64>,
    /// The next dirty sequence (starts at 1).
    next_dirty_seq: u64,
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
    /// The mutant the loom model must catch: a flush takes dirty pages that are under
    /// another writeback (the old second pass of `flush_blocks`).
    flush_takes_busy_pages: bool,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("page", &self.page)
            .field("frames", &self.frames.len())
            .finish_non_exhaustive()
    }
}

/// Fewest frames a cache has (a smaller budget is rounded up).
pub(crate) const MIN_FRAMES: usize = 16;

impl PageCache {
    /// A cache of `budget_bytes` (rounded down to whole pages, at least [`MIN_FRAMES`]) of
    /// `page_size`-byte pages, each allocated on its first use: opening a volume does not
    /// fault in and zero the whole budget (64 MiB by default, a tenth of a second).
    pub(crate) fn new(budget_bytes: usize, page_size: usize, max_run_bytes: usize) -> PageCache {
        assert!(page_size.is_power_of_two() && page_size >= 4096, "page size {page_size}");
        let n = (budget_bytes / page_size).max(MIN_FRAMES);
        let frames = (0..n).map(|_| Mutex::new(PageBuf::unallocated())).collect();
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
            writing: BTreeSet::new(),
            next_dirty_seq: 1,
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
            flush_takes_busy_pages: false,
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

    /// The mutant: a flush takes dirty pages under another writeback too (the loom model
    /// must catch it).
    #[allow(dead_code)]
    pub(crate) fn with_mutant_flushing_busy_pages(mut self) -> PageCache {
        self.flush_takes_busy_pages = true;
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

    /// Frame `f`'s page, locked (allocated, zeroed, on its first use).
    fn frame(&self, f: usize) -> MutexGuard<'_, PageBuf> {
        let mut page = self.frames[f].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if page.0.is_empty() {
            *page = PageBuf::zeroed(self.page);
        }
        page
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
                backing.read_around(pos, out)?;
            }
            pos += n as u64;
        }
        Ok(())
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
                    let seq = st.next_dirty_seq;
                    let slot = &mut st.slots[f];
                    slot.phase = Phase::Ready;
                    slot.pins -= 1;
                    slot.units |= self.units_of(within, n);
                    if !slot.dirty {
                        slot.dirty = true;
                        slot.dirty_since = Some(Instant::now());
                        slot.dirty_seq = seq;
                        st.next_dirty_seq += 1;
                        st.dirty.insert(block);
                    }
                    drop(st);
                    self.notify();
                }
            } else {
                self.counters.bypassed.fetch_add(1, Ordering::Relaxed);
                backing.write_around(pos, src)?;
            }
            pos += n as u64;
        }
        Ok(())
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
