//! The IO layer: every read, write, barrier and grow of the engine goes through here.
//!
//! It owns the carriers (one per member of the volume: `members`, the member table that turns
//! the volume's one block space into a carrier and an offset) and answers for these things
//! the modules above never do themselves:
//! - **Regions.** Every request names the area it is for (a superblock slot, the bitmap,
//!   image or data blocks) and must lie inside it (`assert!`: a request outside its area is a
//!   bug that would overwrite a superblock or the bitmap, so it stops the process before the
//!   write). Image and data blocks share one block space (FORMAT.md, "Layout"); which of them
//!   a file or the image owns is the allocator's business, and the data path asserts it.
//! - **Alignment.** Buffers come from [`Io::buffer`]: [`IO_ALIGN`]-aligned, the most any
//!   carrier is allowed to need (`open` refuses others), so direct IO takes them as they are.
//! - **Counting.** Reads, writes, durable writes, barriers and bytes per area.
//! - **Alignment.** Every metadata request (superblocks, bitmap, journal, image) is whole
//!   [`IO_ALIGN`] units at an [`IO_ALIGN`]-aligned offset from an [`IO_ALIGN`]-aligned
//!   buffer, and every page-cache request whole sectors (asserted: TigerBeetle's
//!   `verify_iop`), so direct IO takes them as they are. File data written straight from a
//!   caller's buffer may be unaligned: the carrier bounces it.
//! - **Poisoning.** Any failed write, barrier or grow poisons the volume: every later write,
//!   barrier or grow fails with `Poisoned` here, at the door, whoever issues it, until the
//!   volume is reopened. After a failed write or barrier the kernel's view and the medium
//!   may differ (fsyncgate), and nothing here retries. A failed read changed nothing and does
//!   not poison: its caller decides (the raft log reads around an unreadable block at
//!   recovery; one bad sector must not stop the volume).
//! - **The error sequence.** Every failed write, writeback, barrier or grow also advances a
//!   counter ([`Io::errors`]). A sync samples it when it starts and fails if it moved
//!   (errseq, as the kernel keeps it per file): a writeback that another thread issued, that
//!   the sync only waited for, and that marked its page clean when it failed still fails the
//!   sync.
//!
//! The page cache (`cache`) plugs in here, with its writeback thread (`writeback`), and so do
//! the two IO tiers of file data (`tiers`): which requests go through the cache and how the
//! tiers stay coherent with it is decided here, not in the data path.
//!
//! Closing takes the carrier's write lock; every carrier call holds its read lock (a
//! [`Session`]), so close waits for IO in flight and nothing reaches the carrier after it.

pub(crate) mod cache;
pub(crate) mod members;
mod tiers;
pub(crate) mod worker;
pub(crate) mod writeback;

pub use cache::{CacheStats, names as cache_metric_names};
pub(crate) use tiers::Readahead;
pub use tiers::Tier;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock, RwLockReadGuard};

pub(crate) use crate::aligned::AlignedBuf;
use crate::carrier::{Carrier, CarrierKind, CarrierOptions, Geometry, StatsSnapshot};
use crate::error::{Error, IoOp, Result};
use crate::layout::{Layout, MemberSpan, VolumeGeometry};
use cache::{Backing, PageCache};
use members::{IoMember, Route, Table};

/// Alignment of every buffer the engine hands to a carrier (address; offsets and lengths are
/// whole blocks or sectors). A carrier that needs more is refused at open.
pub const IO_ALIGN: usize = 4096;

/// Locks a mutex, taking over a poisoned one: a panic while holding it already failed
/// loudly, and the state it protects is checked by assertions.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Protocol rules of the IO layer broken on purpose for the crash checkers (`test-util`'s
/// `CommitMutation`); all off in production.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mutants {
    /// Mark the volume unflushed before a data write instead of after it returned.
    pub(crate) unflushed_before_write: bool,
    /// Write back whole pages instead of the sectors a write touched.
    pub(crate) whole_page_writeback: bool,
    /// Let writes and barriers through on a poisoned volume (`SyncIgnoresWritebackError`).
    pub(crate) ignore_poison: bool,
}

/// What a request is for; the IO layer checks that it stays inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Area {
    /// Both superblock slots at once (read at open).
    Superblocks,
    /// One slot (0 = A, 1 = B).
    Superblock(u8),
    Bitmap,
    /// Blocks of the journal ring.
    Journal,
    /// Blocks of the checkpoint image (record blocks, spines, root).
    Image,
    /// File data blocks.
    Data,
}

impl Area {
    fn index(self) -> usize {
        match self {
            Area::Superblocks | Area::Superblock(_) => 0,
            Area::Bitmap => 1,
            Area::Image => 2,
            Area::Data => 3,
            Area::Journal => 4,
        }
    }
}

/// Areas counted apart in [`IoCounts`].
const AREAS: usize = 5;

/// Operation counts of the IO layer, per area (superblocks, bitmap, image, data, journal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounts {
    /// Carrier reads, per area (superblocks, bitmap, image, data, journal).
    pub reads: [u64; AREAS],
    /// Bytes read, per area.
    pub read_bytes: [u64; AREAS],
    /// Carrier writes, per area.
    pub writes: [u64; AREAS],
    /// Bytes written, per area.
    pub write_bytes: [u64; AREAS],
    /// Barriers (cache flushes) issued.
    pub barriers: u64,
}

impl IoCounts {
    /// Index of the journal's counts in the per-area arrays.
    pub const JOURNAL: usize = 4;
    /// Index of the superblocks' counts.
    pub const SUPERBLOCKS: usize = 0;
    /// Index of the image's counts.
    pub const IMAGE: usize = 2;
}

#[derive(Debug, Default)]
struct Counters {
    reads: [AtomicU64; AREAS],
    read_bytes: [AtomicU64; AREAS],
    writes: [AtomicU64; AREAS],
    write_bytes: [AtomicU64; AREAS],
    barriers: AtomicU64,
}

/// The IO layer of one open volume. See the module docs.
#[derive(Debug)]
pub(crate) struct Io {
    table: RwLock<Option<Table>>,
    /// Member 0's medium, knobs and geometry (write-through only when every member has it).
    pub(crate) medium: CarrierKind,
    pub(crate) options: CarrierOptions,
    pub(crate) geometry: Geometry,
    block_size: OnceLock<u32>,
    cache: OnceLock<PageCache>,
    poisoned: AtomicBool,
    /// Failed writes, writebacks, barriers and grows so far (the error sequence).
    errors: AtomicU64,
    /// The `SyncIgnoresWritebackError` mutant: the door does not check the poison.
    ignore_poison: bool,
    /// Plain (not durable) data writes returned since the last barrier.
    unflushed: AtomicBool,
    /// The `UnflushedBeforeWrite` mutant: mark before the write instead of after it.
    mark_unflushed_early: bool,
    /// The `WholePageWriteback` mutant.
    whole_pages: bool,
    counters: Counters,
    final_stats: Mutex<StatsSnapshot>,
    pub(crate) writeback: Mutex<Option<worker::Worker>>,
    /// The readahead thread, and the windows queued for it (`writeback.rs`).
    pub(crate) readahead: Mutex<Vec<worker::Worker>>,
    pub(crate) prefetches: Mutex<std::collections::VecDeque<(u64, u64)>>,
}

/// A carrier call's hold on the open carriers (close waits for every session to end).
pub(crate) struct Session<'a> {
    io: &'a Io,
    table: RwLockReadGuard<'a, Option<Table>>,
}

impl Io {
    /// The IO layer over the carriers of every member, member 0 first.
    pub(crate) fn with_members(carriers: Vec<Box<dyn Carrier>>, mutants: Mutants) -> Io {
        assert!(!carriers.is_empty(), "a volume has a member");
        let (medium, geometry) = (carriers[0].medium(), carriers[0].geometry());
        let mut options = carriers[0].options();
        options.write_through = carriers.iter().all(|c| c.options().write_through);
        let members = carriers.into_iter().map(IoMember::new).collect();
        Io {
            medium,
            options,
            geometry,
            table: RwLock::new(Some(Table { members, spans: Vec::new() })),
            block_size: OnceLock::new(),
            cache: OnceLock::new(),
            poisoned: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            ignore_poison: mutants.ignore_poison,
            unflushed: AtomicBool::new(false),
            mark_unflushed_early: mutants.unflushed_before_write,
            whole_pages: mutants.whole_page_writeback,
            counters: Counters::default(),
            final_stats: Mutex::new(StatsSnapshot::default()),
            writeback: Mutex::new(None),
            readahead: Mutex::new(Vec::new()),
            prefetches: Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// Fixes the geometry requests are checked against (when the volume is adopted or
    /// formatted) and sets up the page cache of `cache_bytes` (0: none).
    pub(crate) fn init(&self, geometry: &VolumeGeometry, cache_bytes: usize) {
        let layout = geometry.layout();
        self.set_geometry(geometry);
        assert!(self.block_size.set(layout.block_size).is_ok(), "the IO layer is set up once");
        if cache_bytes > 0 {
            let bs = layout.block_size as usize;
            let sector = (self.geometry.physical_sector as usize).max(512);
            let unit = if self.whole_pages { bs } else { sector };
            let cache = PageCache::new(cache_bytes, bs, writeback::MAX_READ_RUN_BYTES)
                .with_dirty_unit(unit);
            assert!(self.cache.set(cache).is_ok(), "the page cache is set up once");
        }
    }

    /// Checks every later request against `geometry` (at its cap): the adopted commit's,
    /// set once adoption chose it.
    pub(crate) fn set_geometry(&self, geometry: &VolumeGeometry) {
        let mut table = self.table.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let table = table.as_mut().expect("the carriers are open");
        assert!(
            geometry.count() <= table.members.len(),
            "a geometry of {} members over {} carriers",
            geometry.count(),
            table.members.len()
        );
        // Carriers the geometry does not name (gathered by a newer commit that adoption
        // passed over, or an add cut before its flip was durable) are not members of what
        // opened: they are released, never written.
        table.members.truncate(geometry.count());
        table.spans = geometry.at_cap().spans;
    }

    /// A member joins at the end of the block space (`Volume::add_member`: its carrier is
    /// zero-filled and carries its superblocks already). Waits for every session to end.
    pub(crate) fn add_member(&self, carrier: Box<dyn Carrier>, span: MemberSpan) -> Result<()> {
        let mut table = self.table.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(table) = table.as_mut() else { return Err(Error::Closed) };
        assert_eq!(
            table.spans.last().map_or(0, MemberSpan::end),
            span.base,
            "members join at the end"
        );
        assert_eq!(table.spans.len(), table.members.len(), "a geometry is set before members join");
        table.members.push(IoMember::new(carrier));
        table.spans.push(span);
        Ok(())
    }

    /// Runs `f` with every carrier call of the volume held off (the member table under its
    /// write lock: `f` uses the carriers directly), then puts `new` in member `k`'s place if
    /// `f` succeeded (`Volume::replace_member`).
    pub(crate) fn replace_carrier(
        &self,
        k: usize,
        new: Box<dyn Carrier>,
        f: impl FnOnce(&Table, &dyn Carrier) -> Result<()>,
    ) -> Result<()> {
        let mut guard = self.table.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(table) = guard.as_mut() else { return Err(Error::Closed) };
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        assert!(k > 0 && k < table.members.len(), "replacing member {k}");
        f(table, new.as_ref())?;
        table.members[k] = IoMember::new(new);
        Ok(())
    }

    /// Each open member's medium and knobs, member 0 first.
    pub(crate) fn member_knobs(&self) -> Vec<(CarrierKind, CarrierOptions)> {
        self.session().map_or_else(
            |_| Vec::new(),
            |s| {
                s.table()
                    .members
                    .iter()
                    .map(|m| (m.carrier.medium(), m.carrier.options()))
                    .collect()
            },
        )
    }

    fn block_size(&self) -> u64 {
        u64::from(*self.block_size.get().expect("the IO layer is initialized before block IO"))
    }

    pub(crate) fn cache(&self) -> Option<&PageCache> {
        self.cache.get()
    }

    /// The page cache's counters, or `None` without a cache.
    pub(crate) fn cache_stats(&self) -> Option<CacheStats> {
        self.cache().map(PageCache::stats)
    }

    /// Starts the writeback thread (a cache, a writable volume, writes that are not
    /// write-through: dirty pages can exist).
    pub(crate) fn start_writeback(self: &std::sync::Arc<Self>) {
        writeback::start(self);
    }

    /// Stops the cache's threads (writeback, readahead), if any, and waits for their work
    /// in flight.
    pub(crate) fn stop_writeback(&self) {
        writeback::stop(self);
    }

    /// Starts the readahead thread (a cache: a volume that reads through it).
    pub(crate) fn start_readahead(self: &std::sync::Arc<Self>) {
        writeback::start_readahead(self);
    }

    /// Has the readahead thread load the absent pages of physical blocks `first..until`
    /// ahead of a sequential reader (nothing without the thread).
    pub(crate) fn prefetch(&self, first: u64, until: u64) {
        writeback::prefetch(self, first, until);
    }

    /// A buffer aligned for any carrier.
    pub(crate) fn buffer(len: usize) -> AlignedBuf {
        AlignedBuf::zeroed(len, IO_ALIGN)
    }

    /// Holds the carriers open for a series of calls; `Closed` once they were released.
    pub(crate) fn session(&self) -> Result<Session<'_>> {
        let table = self.table.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if table.is_none() {
            return Err(Error::Closed);
        }
        Ok(Session { io: self, table })
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Marks the volume poisoned; every later call fails with `Poisoned` until reopen.
    pub(crate) fn poison(&self, error: &Error) {
        if !self.poisoned.swap(true, Ordering::AcqRel) {
            tracing::error!(%error, "volume poisoned by a failed carrier operation");
        }
    }

    /// The error sequence: failed writes, writebacks, barriers and grows so far.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Acquire)
    }

    /// `Poisoned` if any write failed since the error sequence was `since`, or the volume is
    /// poisoned: what a sync checks after its barrier.
    pub(crate) fn check_errors_since(&self, since: u64) -> Result<()> {
        if self.errors() != since || self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Takes the flag "plain data writes returned since the last barrier".
    pub(crate) fn take_unflushed(&self) -> bool {
        self.unflushed.swap(false, Ordering::AcqRel)
    }

    pub(crate) fn counts(&self) -> IoCounts {
        let get = |a: &[AtomicU64; AREAS]| a.each_ref().map(|c| c.load(Ordering::Relaxed));
        let c = &self.counters;
        IoCounts {
            reads: get(&c.reads),
            read_bytes: get(&c.read_bytes),
            writes: get(&c.writes),
            write_bytes: get(&c.write_bytes),
            barriers: c.barriers.load(Ordering::Relaxed),
        }
    }

    /// The carriers' counts, summed over the members (kept after close).
    pub(crate) fn carrier_stats(&self) -> StatsSnapshot {
        match self.session() {
            Ok(s) => sum_stats(&s.table().members),
            Err(_) => *lock(&self.final_stats),
        }
    }

    /// Releases the carrier (and its lock) once every session ended, first writing back any
    /// dirty page a write racing the close left behind (with a barrier). Nothing reaches the
    /// carrier afterwards.
    pub(crate) fn release(&self) {
        writeback::stop(self);
        let mut guard = self.table.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some(cache), Some(table)) = (self.cache(), guard.as_ref())
            && cache.dirty_pages() > 0
            && !self.is_poisoned()
        {
            let late = Late { io: self, table };
            // Poison checked above: the door is open for these last writebacks.
            if let Err(e) = cache.flush_all(&late).and_then(|()| late.barrier()) {
                self.poison(&e);
            }
        }
        if let Some(t) = guard.take() {
            *lock(&self.final_stats) = sum_stats(&t.members);
        }
    }

    /// Checks that a metadata request is aligned for direct IO (see the module docs).
    fn check_aligned(area: Area, offset: u64, buf: &[u8]) {
        if area == Area::Data {
            return;
        }
        let align = IO_ALIGN as u64;
        assert!(
            offset.is_multiple_of(align) && (buf.len() as u64).is_multiple_of(align),
            "{area:?} request at {offset} of {} bytes is not in whole {IO_ALIGN}-byte units",
            buf.len()
        );
        assert!(
            (buf.as_ptr() as usize).is_multiple_of(IO_ALIGN),
            "{area:?} request from a buffer that is not {IO_ALIGN}-aligned"
        );
    }

    /// Checks that a page-cache request is whole sectors (frames are aligned, runs are whole
    /// dirty units).
    fn check_sectors(offset: u64, len: usize) {
        let sector = crate::format::consts::SECTOR_LEN as u64;
        assert!(
            offset.is_multiple_of(sector) && (len as u64).is_multiple_of(sector),
            "cache request at {offset} of {len} bytes is not whole sectors"
        );
    }

    fn count(counter: &[AtomicU64; AREAS], bytes: &[AtomicU64; AREAS], area: Area, len: usize) {
        counter[area.index()].fetch_add(1, Ordering::Relaxed);
        bytes[area.index()].fetch_add(len as u64, Ordering::Relaxed);
    }

    fn failed(&self, op: IoOp, offset: u64, len: usize) -> impl FnOnce(std::io::Error) -> Error {
        move |source| {
            let e = Error::Io { op, offset, len: len as u64, source };
            if op != IoOp::Read {
                self.errors.fetch_add(1, Ordering::AcqRel);
                self.poison(&e);
            }
            e
        }
    }
}

/// The counts of every member's carrier, summed.
fn sum_stats(members: &[IoMember]) -> StatsSnapshot {
    let mut sum = StatsSnapshot::default();
    for m in members {
        let s = m.carrier.stats().snapshot();
        sum.reads += s.reads;
        sum.read_bytes += s.read_bytes;
        sum.writes += s.writes;
        sum.written_bytes += s.written_bytes;
        sum.durable_writes += s.durable_writes;
        sum.barriers += s.barriers;
        sum.dir_syncs += s.dir_syncs;
    }
    sum
}

impl Session<'_> {
    pub(crate) fn table(&self) -> &Table {
        self.table.as_ref().expect("a session holds open carriers")
    }

    /// Every member's carrier, member 0 first.
    pub(crate) fn carriers(&self) -> Vec<&dyn Carrier> {
        let table = self.table();
        (0..table.members.len()).map(|k| table.carrier(k)).collect()
    }

    /// Member 0's carrier: the commit point, and the one that grows.
    pub(crate) fn carrier(&self) -> &dyn Carrier {
        self.table().carrier(0)
    }

    /// The door: no write, barrier or grow reaches the carrier of a poisoned volume (a
    /// commit must never be written over a failed data write).
    fn open_door(&self) -> Result<()> {
        if self.io.is_poisoned() && !self.io.ignore_poison {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    fn route(&self, layout: Option<&Layout>, area: Area, offset: u64, len: usize) -> Route {
        self.table().route(layout, area, offset, len)
    }

    /// Reads inside `area` of the volume's layout.
    pub(crate) fn read(&self, area: Area, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_in(None, area, offset, buf)
    }

    /// Reads inside `area` of `layout` while the geometry is not set yet (adoption reads a
    /// candidate superblock's image before the volume's geometry is fixed).
    pub(crate) fn read_in(
        &self,
        layout: Option<&Layout>,
        area: Area,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let r = self.route(layout, area, offset, buf.len());
        Io::check_aligned(area, offset, buf);
        Io::count(&self.io.counters.reads, &self.io.counters.read_bytes, area, buf.len());
        self.table().carrier(r.member).read_exact_at(buf, r.offset).map_err(self.io.failed(
            IoOp::Read,
            offset,
            buf.len(),
        ))
    }

    /// A plain write: durable once a later barrier returns. Data writes mark the volume
    /// unflushed once they returned (a commit or sync then takes a barrier first).
    pub(crate) fn write(&self, area: Area, offset: u64, buf: &[u8]) -> Result<()> {
        self.open_door()?;
        let r = self.route(None, area, offset, buf.len());
        Io::check_aligned(area, offset, buf);
        Io::count(&self.io.counters.writes, &self.io.counters.write_bytes, area, buf.len());
        let data = area == Area::Data;
        if data && self.io.mark_unflushed_early {
            self.io.unflushed.store(true, Ordering::Release);
        }
        let member = &self.table().members[r.member];
        member.carrier.write_all_at(buf, r.offset).map_err(self.io.failed(
            IoOp::Write,
            offset,
            buf.len(),
        ))?;
        member.mark_written();
        if data && !self.io.mark_unflushed_early {
            // Only after the write returned: a barrier issued before that (by a commit on
            // another thread) does not cover it, so the flag must outlive that barrier. Set
            // before the write, a concurrent commit could clear it and flush while the write
            // was still on its way, and the writer's own `sync` would then skip the barrier
            // and acknowledge bytes that sit in a cache.
            self.io.unflushed.store(true, Ordering::Release);
        }
        if area == Area::Image
            && let Some(cache) = self.io.cache()
        {
            // Image blocks were data blocks once (freed pages are dropped at the commit that
            // releases them; this is the belt to that brace).
            let bs = self.io.block_size();
            cache.discard(offset / bs, (offset + buf.len() as u64).div_ceil(bs));
        }
        Ok(())
    }

    /// Reads data blocks into `bufs` in order from `offset` (one vectored carrier call).
    pub(crate) fn read_vectored(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let r = self.route(None, Area::Data, offset, len);
        Io::count(&self.io.counters.reads, &self.io.counters.read_bytes, Area::Data, len);
        self.table().carrier(r.member).read_vectored_at(bufs, r.offset).map_err(self.io.failed(
            IoOp::Read,
            offset,
            len,
        ))
    }

    /// Writes `bufs` in order from `offset` into data blocks: one vectored plain write,
    /// marking the volume unflushed as [`Session::write`] does.
    pub(crate) fn write_vectored(&self, offset: u64, bufs: &[&[u8]]) -> Result<()> {
        self.open_door()?;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let r = self.route(None, Area::Data, offset, len);
        Io::count(&self.io.counters.writes, &self.io.counters.write_bytes, Area::Data, len);
        if self.io.mark_unflushed_early {
            self.io.unflushed.store(true, Ordering::Release);
        }
        let member = &self.table().members[r.member];
        member.carrier.write_vectored_at(bufs, r.offset).map_err(self.io.failed(
            IoOp::Write,
            offset,
            len,
        ))?;
        member.mark_written();
        if !self.io.mark_unflushed_early {
            self.io.unflushed.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// A data write the caller makes durable with its own barrier before anything references
    /// it (preallocation's zeros): it does not mark the volume unflushed.
    pub(crate) fn write_fill(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.open_door()?;
        let r = self.route(None, Area::Data, offset, buf.len());
        Io::count(&self.io.counters.writes, &self.io.counters.write_bytes, Area::Data, buf.len());
        let member = &self.table().members[r.member];
        member.carrier.write_all_at(buf, r.offset).map_err(self.io.failed(
            IoOp::Write,
            offset,
            buf.len(),
        ))?;
        member.mark_written();
        Ok(())
    }

    /// A write that is on stable storage when it returns (write-through).
    pub(crate) fn write_durable(&self, area: Area, offset: u64, buf: &[u8]) -> Result<()> {
        self.open_door()?;
        let r = self.route(None, area, offset, buf.len());
        Io::check_aligned(area, offset, buf);
        Io::count(&self.io.counters.writes, &self.io.counters.write_bytes, area, buf.len());
        self.table().carrier(r.member).write_durable_at(buf, r.offset).map_err(self.io.failed(
            IoOp::DurableWrite,
            offset,
            buf.len(),
        ))
    }

    /// A barrier on every member written since its last one (member 0 when none was).
    pub(crate) fn barrier(&self) -> Result<()> {
        self.open_door()?;
        for k in self.table().to_flush() {
            self.io.counters.barriers.fetch_add(1, Ordering::Relaxed);
            self.table().carrier(k).barrier().map_err(self.io.failed(IoOp::Barrier, 0, 0))?;
        }
        Ok(())
    }

    /// Grows member 0's carrier to `len_bytes` (a thin file carrier; only a volume of one
    /// member grows).
    pub(crate) fn grow(&self, from: u64, len_bytes: u64, sparse: bool) -> Result<()> {
        self.open_door()?;
        self.carrier().grow(len_bytes, sparse).map_err(self.io.failed(
            IoOp::Grow,
            from,
            (len_bytes - from) as usize,
        ))
    }
}

/// The cache reads and writes data blocks through a session.
impl Backing for Session<'_> {
    type Error = Error;
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        Io::check_sectors(offset, buf.len());
        Session::read(self, Area::Data, offset, buf)
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        Io::check_sectors(offset, buf.len());
        Session::write(self, Area::Data, offset, buf)
    }
    fn read_vectored(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        Io::check_sectors(offset, bufs.iter().map(|b| b.len()).sum());
        Session::read_vectored(self, offset, bufs)
    }
    fn write_vectored(&self, offset: u64, bufs: &[&[u8]]) -> Result<()> {
        Io::check_sectors(offset, bufs.iter().map(|b| b.len()).sum());
        Session::write_vectored(self, offset, bufs)
    }
    fn read_around(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        Session::read(self, Area::Data, offset, buf)
    }
    fn write_around(&self, offset: u64, buf: &[u8]) -> Result<()> {
        Session::write(self, Area::Data, offset, buf)
    }
}

/// The carriers under close's write lock, for the dirty pages a racing write left.
struct Late<'a> {
    io: &'a Io,
    table: &'a Table,
}

impl Late<'_> {
    fn barrier(&self) -> Result<()> {
        for k in self.table.to_flush() {
            self.table.carrier(k).barrier().map_err(self.io.failed(IoOp::Barrier, 0, 0))?;
        }
        Ok(())
    }
}

impl Backing for Late<'_> {
    type Error = Error;
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.table.route(None, Area::Data, offset, buf.len());
        self.table.carrier(r.member).read_exact_at(buf, r.offset).map_err(self.io.failed(
            IoOp::Read,
            offset,
            buf.len(),
        ))
    }
    fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        let r = self.table.route(None, Area::Data, offset, buf.len());
        let member = &self.table.members[r.member];
        member.carrier.write_all_at(buf, r.offset).map_err(self.io.failed(
            IoOp::Write,
            offset,
            buf.len(),
        ))?;
        member.mark_written();
        Ok(())
    }
    fn read_vectored(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let r = self.table.route(None, Area::Data, offset, len);
        self.table.carrier(r.member).read_vectored_at(bufs, r.offset).map_err(self.io.failed(
            IoOp::Read,
            offset,
            len,
        ))
    }
    fn write_vectored(&self, offset: u64, bufs: &[&[u8]]) -> Result<()> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let r = self.table.route(None, Area::Data, offset, len);
        let member = &self.table.members[r.member];
        member.carrier.write_vectored_at(bufs, r.offset).map_err(self.io.failed(
            IoOp::Write,
            offset,
            len,
        ))?;
        member.mark_written();
        Ok(())
    }
}

/// Writes back the page cache's dirty pages straight to the carriers of `table` (held
/// exclusively by the caller), with a barrier.
pub(crate) fn flush_late(io: &Io, table: &Table) -> Result<()> {
    if let Some(cache) = io.cache()
        && cache.dirty_pages() > 0
    {
        let late = Late { io, table };
        cache.flush_all(&late)?;
        late.barrier()?;
    }
    Ok(())
}

/// Reads checked against an area: the volume's [`Session`], or a [`Probe`] of borrowed
/// carriers (the read-only checker). Adoption reads through this before a geometry is fixed.
pub(crate) trait AreaRead: Sync {
    fn read_in(
        &self,
        layout: Option<&Layout>,
        area: Area,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()>;
    /// Bytes member 0's carrier has now.
    fn carrier_len(&self) -> u64;
}

impl AreaRead for Session<'_> {
    fn read_in(
        &self,
        layout: Option<&Layout>,
        area: Area,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        Session::read_in(self, layout, area, offset, buf)
    }
    fn carrier_len(&self) -> u64 {
        self.carrier().geometry().len_bytes
    }
}

/// Area-checked reads of carriers the caller owns (nothing is counted or poisoned: the
/// checker only looks, and adoption only reads): member 0's alone until [`Probe::place`].
pub(crate) struct Probe<'a> {
    carriers: Vec<&'a dyn Carrier>,
    spans: RwLock<Vec<MemberSpan>>,
}

impl<'a> Probe<'a> {
    /// A probe of member 0's carrier alone.
    pub(crate) fn single(carrier: &'a dyn Carrier) -> Probe<'a> {
        Probe::over(vec![carrier])
    }

    /// A probe over carriers, member 0 first, placed by nothing yet: requests are checked
    /// against the layout the reader gives until [`Probe::place`].
    pub(crate) fn over(carriers: Vec<&'a dyn Carrier>) -> Probe<'a> {
        assert!(!carriers.is_empty(), "a volume has a member");
        Probe { carriers, spans: RwLock::new(Vec::new()) }
    }

    /// The carriers, member 0 first.
    pub(crate) fn carriers(&self) -> &[&'a dyn Carrier] {
        &self.carriers
    }

    /// Checks every later request against `geometry` (at its cap): adoption places each
    /// candidate superblock's members before it reads that candidate's image.
    pub(crate) fn place(&self, geometry: &VolumeGeometry) {
        assert!(
            geometry.count() <= self.carriers.len(),
            "a geometry of {} members over {} carriers",
            geometry.count(),
            self.carriers.len()
        );
        *self.spans.write().unwrap_or_else(std::sync::PoisonError::into_inner) =
            geometry.at_cap().spans;
    }
}

impl AreaRead for Probe<'_> {
    fn read_in(
        &self,
        layout: Option<&Layout>,
        area: Area,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let spans = self.spans.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let r = members::route(&spans, layout, area, offset, buf.len());
        self.carriers[r.member].read_exact_at(buf, r.offset).map_err(|source| Error::Io {
            op: IoOp::Read,
            offset,
            len: buf.len() as u64,
            source,
        })
    }
    fn carrier_len(&self) -> u64 {
        self.carriers[0].geometry().len_bytes
    }
}
