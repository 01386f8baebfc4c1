//! The volume: one carrier, its superblocks, bitmap and image, and the namespace on top.
//!
//! Locking, outermost first: a file's IO lock (shared for reads and writes, exclusive for
//! `set_len`), then the data-write gate (the whole volume in serial mode, the file in parallel
//! mode), then the metadata mutex. The metadata mutex is never held across a data write, so
//! reads and write-through appends of one file do not wait for metadata work on another; it
//! is held across a commit, so metadata changes are serialized with the commit protocol.
//!
//! Submodules: `open` (format; lock -> adopt -> replay -> reconcile -> recover -> writable),
//! `commit` (data before metadata, then a journal batch or a checkpoint), `checkpoint` (the
//! image and the two-barrier flip), `grow` (a thin carrier's extension and auto-grow), `data`
//! (the data path: extents, allocation, the write plan), `file` (the `File` handle), `check`
//! (the read-only checker). Every carrier call goes through the IO layer (`crate::io`), which
//! the volume owns; the journal (`crate::journal`) knows nothing of the volume.

mod check;
mod checkpoint;
mod commit;
mod data;
mod file;
mod grow;
mod members;
mod open;
mod options;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

pub use check::{CheckReport, Finding, FindingKind, SlotStatus, check, check_members};
pub use file::File;
pub use members::{MemberCarrier, MemberInfo, Opener, gather_members};
pub use open::OpenReport;
#[cfg(feature = "internals")]
pub use open::read_slots;
pub use options::{
    CommitMutation, DEFAULT_CACHE_BYTES, FormatOptions, IoPolicy, Tier, VolumeOptions,
    WriteConcurrency, default_journal_bytes,
};

use crate::bitmap::Allocator;
use crate::carrier::{Carrier, CarrierKind, CarrierOptions, StatsSnapshot};
use crate::error::{Error, Result};
use crate::io::CacheStats;
use crate::io::Io;
use crate::journal::{Journal, checkpointer};
use crate::layout::Layout;
use crate::namespace::Namespace;
use crate::records::InodeKind;
use crate::superblock::{LAYOUT_SPARSE, LAYOUT_THIN, Superblock, VolumeState};

/// Per-open-inode IO locks.
#[derive(Debug, Default)]
pub(crate) struct InodeIo {
    /// Shared by reads and writes; exclusive for size changes that free blocks.
    pub(crate) rw: RwLock<()>,
    /// Serializes the data writes of this file (parallel mode).
    pub(crate) write: Mutex<()>,
    /// Readahead state of buffered reads: where the last read ended, and the window.
    pub(crate) readahead: Mutex<crate::io::Readahead>,
}

#[derive(Debug)]
pub(crate) struct OpenInode {
    pub(crate) handles: usize,
    pub(crate) io: Arc<InodeIo>,
}

/// Everything the metadata mutex protects.
#[derive(Debug)]
pub(crate) struct Meta {
    pub(crate) ns: Namespace,
    pub(crate) alloc: Allocator,
    /// The last durable commit.
    pub(crate) sb: Superblock,
    pub(crate) open: HashMap<u64, OpenInode>,
    /// Bytes of the carrier that exist (a thin carrier grows toward the capacity).
    pub(crate) carrier_len: u64,
    /// Whether commits are journal batches, and where the ring stands.
    pub(crate) journal: Journal,
    /// The generation of the last commit that wrote an image (a flip that only grew the
    /// volume does not).
    pub(crate) image_generation: u64,
    /// When the last checkpoint completed (or the volume opened).
    pub(crate) last_checkpoint: std::time::Instant,
    /// Member 0's carrier path, when it was opened by path (recorded in the member table
    /// when a member is added).
    pub(crate) first_path: Option<std::path::PathBuf>,
}

impl Meta {
    /// True when the next commit has something to write.
    pub(crate) fn is_dirty(&self) -> bool {
        match &self.ns.journal {
            Some(queue) => !queue.is_empty() || !self.alloc.pending_release().is_empty(),
            None => {
                self.ns.tables.iter().any(crate::chain::Table::is_dirty)
                    || self.alloc.has_dirty_bitmap()
            }
        }
    }

    /// The last durable commit: the image's generation without a journal, the sequence of
    /// the last batch (or of the last checkpoint's records) with one.
    pub(crate) fn commit_id(&self) -> u64 {
        match &self.journal {
            Journal::On(ring) => ring.next_sequence - 1,
            Journal::Off => self.image_generation,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    /// The IO layer: the carrier, its counts, the page cache, poisoning.
    pub(crate) io: Arc<Io>,
    pub(crate) layout: Layout,
    pub(crate) options: VolumeOptions,
    /// The cache budget in effect (0: none).
    pub(crate) cache_bytes: usize,
    pub(crate) read_only: bool,
    pub(crate) meta: Mutex<Meta>,
    /// The data-write gate of serial mode.
    pub(crate) gate: Mutex<()>,
    pub(crate) closed: AtomicBool,
    pub(crate) report: OpenReport,
    /// The background checkpointer of a writable journaled volume.
    pub(crate) checkpointer: Mutex<Option<checkpointer::Worker>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropped without close (every handle gone): like a crash, nothing is committed, but
        // the threads stop and the carrier (and its lock) is released.
        self.stop_checkpointer();
        self.io.stop_writeback();
    }
}

/// The background checkpointer's view of the volume: checkpoint when the ring says so and
/// no record is queued (so nothing becomes durable earlier than its commit asked).
impl checkpointer::Target for Inner {
    fn checkpoint_if_due(&self, interval: std::time::Duration) -> bool {
        if self.usable().is_err() {
            return false;
        }
        let mut meta = self.meta();
        let queued = meta.ns.journal.as_ref().is_some_and(|q| !q.is_empty());
        let waited = meta.last_checkpoint.elapsed();
        let due =
            !queued && meta.journal.ring().is_some_and(|r| r.background_due(waited, interval));
        if due && let Err(error) = checkpoint::checkpoint(self, &mut meta, VolumeState::Dirty) {
            // A carrier failure poisoned the volume (the next caller hears of it); a full
            // volume waits for the next commit to make room.
            tracing::warn!(%error, "background checkpoint failed");
        }
        true
    }
}

pub(crate) use crate::io::lock;

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Inner {
    /// The tiers a file opens with when it does not ask.
    pub(crate) fn default_policy(&self) -> IoPolicy {
        self.options.default_policy(self.io.medium, self.io.options)
    }

    /// Refuses use after close or after a failed write.
    pub(crate) fn usable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.io.is_poisoned() {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    pub(crate) fn writable(&self) -> Result<()> {
        self.usable()?;
        if self.read_only { Err(Error::ReadOnly) } else { Ok(()) }
    }

    /// Marks the volume poisoned; every later call fails with `Poisoned` until reopen. A
    /// failed write or barrier may have left the kernel's view and the medium apart
    /// (fsyncgate): nothing is retried and counted as success.
    pub(crate) fn poison(&self, error: &Error) {
        self.io.poison(error);
    }

    pub(crate) fn meta(&self) -> MutexGuard<'_, Meta> {
        lock(&self.meta)
    }

    /// Wakes the background checkpointer (a batch left the ring past its background line).
    pub(crate) fn kick_checkpointer(&self) {
        if let Some(h) = lock(&self.checkpointer).as_ref() {
            h.kick();
        }
    }

    /// Stops the background checkpointer and waits for a checkpoint in progress.
    pub(crate) fn stop_checkpointer(&self) {
        let handle = lock(&self.checkpointer).take();
        if let Some(h) = handle {
            h.stop();
        }
    }
}

/// Whether a path names a file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
}

impl From<InodeKind> for FileKind {
    fn from(k: InodeKind) -> FileKind {
        match k {
            InodeKind::File => FileKind::File,
            InodeKind::Directory => FileKind::Directory,
        }
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The name, byte for byte.
    pub name: Vec<u8>,
    /// The inode number.
    pub ino: u64,
    /// File or directory.
    pub kind: FileKind,
    /// Size in bytes (0 for a directory).
    pub size: u64,
}

/// What `stat` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// The inode number.
    pub ino: u64,
    /// File or directory.
    pub kind: FileKind,
    /// Size in bytes (0 for a directory).
    pub size: u64,
    /// Blocks mapped by extents (a sparse file maps fewer than its size).
    pub allocated_blocks: u64,
    /// Extents mapping the file's blocks.
    pub extents: usize,
    /// Inline attributes.
    pub attributes: usize,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
    /// Last modification time, nanoseconds since the Unix epoch.
    pub modified_unix_ns: u64,
}

/// One extent of a file: logical block, physical block, length in blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentInfo {
    /// First block of the extent in the file.
    pub logical_block: u64,
    /// First block of the extent on the volume.
    pub physical_block: u64,
    /// Length in blocks.
    pub blocks: u64,
}

/// Where the journal of a journaled volume stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalInfo {
    /// Blocks of the ring.
    pub blocks: u64,
    /// Blocks holding batches since the last checkpoint.
    pub used_blocks: u64,
    /// Ring block where the last checkpoint's tail is.
    pub tail: u64,
    /// The sequence of the next batch.
    pub next_sequence: u64,
    /// Set when open found the journal region destroyed: the sequence from which records
    /// may be lost, until acknowledged.
    pub lost_from: Option<u64>,
}

/// A summary of an open volume.
#[derive(Debug, Clone)]
pub struct VolumeInfo {
    /// The volume's identity, the same in both superblocks.
    pub uuid: crate::format::consts::Uuid,
    /// The generation of the last commit.
    pub generation: u64,
    /// Where the regions lie.
    pub layout: Layout,
    /// The medium under the volume.
    pub medium: CarrierKind,
    /// The carrier's knobs in effect.
    pub carrier: CarrierOptions,
    /// The unit the carrier writes atomically: a torn write damages whole units of this size.
    pub physical_sector: u32,
    /// Blocks are allocated on the carrier as they are used (formatted `--thin`).
    pub thin: bool,
    /// Unwritten ranges are holes instead of zeros (formatted `--sparse`).
    pub sparse: bool,
    /// Opened without writing anything.
    pub read_only: bool,
    /// Blocks the allocator can still hand out.
    pub free_blocks: u64,
    /// Every member, member 0 first (one for a volume of one carrier).
    pub members: Vec<MemberInfo>,
    /// Inodes in the namespace, the root included.
    pub inodes: usize,
    /// The page cache's budget in bytes (0: no cache; always 0 on memory).
    pub cache_bytes: usize,
    /// The tiers files open with unless they ask otherwise.
    pub default_policy: IoPolicy,
    /// The journal, on a journaled volume.
    pub journal: Option<JournalInfo>,
}

/// An open volume. Cheap to clone; all clones and all [`File`]s share one open volume.
#[derive(Debug, Clone)]
pub struct Volume {
    pub(crate) inner: Arc<Inner>,
}

impl Volume {
    /// Formats `carrier` and returns the volume open for writing.
    ///
    /// ```
    /// use vellum_engine::carrier::MemoryCarrier;
    /// use vellum_engine::{FormatOptions, Volume, VolumeOptions};
    ///
    /// let carrier = Box::new(MemoryCarrier::new(16 << 20));
    /// let volume = Volume::format(carrier, &FormatOptions::default(), VolumeOptions::default())?;
    /// assert!(volume.info().free_blocks > 0);
    /// # Ok::<(), vellum_engine::Error>(())
    /// ```
    pub fn format(
        carrier: Box<dyn Carrier>,
        format: &FormatOptions<'_>,
        options: VolumeOptions,
    ) -> Result<Volume> {
        open::format(carrier, format, options)
    }

    /// Opens the volume on `carrier`: adopt a superblock, load its image, reconcile the
    /// bitmap, and (unless read-only) mark the volume dirty with one commit.
    pub fn open(carrier: Box<dyn Carrier>, options: VolumeOptions) -> Result<Volume> {
        open::open(carrier, options)
    }

    /// Creates a carrier at `path` (a new file, or a block device) and formats it.
    pub fn create_path(
        path: &Path,
        format: &FormatOptions<'_>,
        carrier: CarrierOptions,
        options: VolumeOptions,
    ) -> Result<Volume> {
        open::create_path(path, format, carrier, options)
    }

    /// Switches the journal on in the reserved region of the volume on `carrier`, offline
    /// (the carrier's lock refuses a volume that is open elsewhere). Refuses a volume whose
    /// region is smaller than two blocks, and one whose journal is already on.
    pub fn enable_journal(carrier: Box<dyn Carrier>, options: VolumeOptions) -> Result<()> {
        open::enable_journal(carrier, options)
    }

    /// Opens the volume on the file or block device at `path`.
    ///
    /// ```
    /// use vellum_engine::media::CarrierOptions;
    /// use vellum_engine::{FormatOptions, Volume, VolumeOptions};
    ///
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let path = dir.path().join("log.vlm");
    /// let format = FormatOptions::journaled(16 << 20);
    /// let volume = Volume::create_path(&path, &format, CarrierOptions::PRODUCTION, VolumeOptions::default())?;
    /// volume.create_file("/a")?;
    /// volume.commit()?;
    /// volume.close()?;
    ///
    /// let volume = Volume::open_path(&path, CarrierOptions::PRODUCTION, VolumeOptions::default())?;
    /// assert!(volume.stat("/a").is_ok());
    /// # Ok::<(), vellum_engine::Error>(())
    /// ```
    pub fn open_path(
        path: &Path,
        carrier: CarrierOptions,
        options: VolumeOptions,
    ) -> Result<Volume> {
        let read_only = carrier.read_only || options.read_only;
        let knobs = CarrierOptions { read_only, ..carrier };
        let opener = |p: &Path| crate::carrier::open_path(p, knobs);
        Volume::open_path_with(path, knobs, options, &opener)
    }

    /// [`Volume::open_path`], opening the members after the first (those member 0's table
    /// names by path) with `opener`: each member with its own knobs.
    pub fn open_path_with(
        path: &Path,
        carrier: CarrierOptions,
        options: VolumeOptions,
        opener: &dyn Fn(&Path) -> Result<Box<dyn Carrier>>,
    ) -> Result<Volume> {
        let read_only = carrier.read_only || options.read_only;
        let first = crate::carrier::open_path(path, CarrierOptions { read_only, ..carrier })?;
        let given = vec![MemberCarrier { carrier: first, path: Some(path.to_owned()) }];
        open::open_members(given, Some(opener), VolumeOptions { read_only, ..options })
    }

    /// Formats a volume over several carriers: member 0 (`first`, laid out by `format`,
    /// holding the journal and the commit point), then each of `others`, whole (FORMAT.md,
    /// "Members"). Members are concatenated, not mirrored: losing one loses the volume.
    ///
    /// ```
    /// use vellum_engine::carrier::MemoryCarrier;
    /// use vellum_engine::{FormatOptions, MemberCarrier, Volume, VolumeOptions};
    ///
    /// let first = MemberCarrier::new(Box::new(MemoryCarrier::new(16 << 20)));
    /// let second = MemberCarrier::new(Box::new(MemoryCarrier::new(16 << 20)));
    /// let fmt = FormatOptions::default();
    /// let volume = Volume::format_members(first, vec![second], &fmt, VolumeOptions::default())?;
    /// assert_eq!(volume.members().len(), 2);
    /// # Ok::<(), vellum_engine::Error>(())
    /// ```
    pub fn format_members(
        first: MemberCarrier,
        others: Vec<MemberCarrier>,
        format: &FormatOptions<'_>,
        options: VolumeOptions,
    ) -> Result<Volume> {
        open::format_members(first, others, format, options)
    }

    /// Opens the volume whose members are `given`, in any order (every member must be
    /// given; [`Volume::open_path`] opens the others by the paths the member table records).
    pub fn open_members(given: Vec<MemberCarrier>, options: VolumeOptions) -> Result<Volume> {
        open::open_members(given, None, options)
    }

    /// Adds `carrier` as the volume's next member, online: zero-filled, its superblocks
    /// durable, then member 0's table names it in one commit (FORMAT.md, "Members"). The
    /// carrier must hold no volume; its whole length (down to 64 blocks) becomes the
    /// member's capacity. `progress` sees `(bytes done, bytes total)` of the zero-fill.
    pub fn add_member(
        &self,
        carrier: MemberCarrier,
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
    ) -> Result<()> {
        members::add_member(&self.inner, carrier, false, progress)
    }

    /// Adds the member at `path`, online: a new preallocated file of `size_bytes` (created
    /// zero-filled), or a block device (zero-filled here). Refuses a path that holds a
    /// volume or a member already (this one's or another's), a non-empty file, and a block
    /// device whose first or last MiB is not zero (`NotEmpty`: open it yourself and pass it
    /// to [`Volume::add_member`] to use it anyway).
    pub fn add_member_path(
        &self,
        path: &Path,
        size_bytes: Option<u64>,
        carrier: CarrierOptions,
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
    ) -> Result<()> {
        let (carrier, zero_filled, created) =
            members::create_member(self, path, size_bytes, carrier, progress)?;
        let new = MemberCarrier { carrier, path: Some(path.to_owned()) };
        members::add_member(&self.inner, new, zero_filled, progress).inspect_err(|_| {
            if created {
                // The file this call created never became a member.
                let _ = std::fs::remove_file(path);
            }
        })
    }

    /// Replaces member `index` (1 or more) by a copy on `carrier`, online: every carrier call
    /// of the volume waits while the member is copied, verified and switched in one commit
    /// (FORMAT.md, "Members"). Member 0 is replaced offline by copying its carrier whole.
    pub fn replace_member(
        &self,
        index: usize,
        carrier: MemberCarrier,
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
    ) -> Result<()> {
        members::replace_member(&self.inner, index, carrier, progress)
    }

    /// [`Volume::replace_member`] onto a new file at `path` (the member's size) or a block
    /// device.
    pub fn replace_member_path(
        &self,
        index: usize,
        path: &Path,
        carrier: CarrierOptions,
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
    ) -> Result<()> {
        let members = self.members();
        if index == 0 || index >= members.len() {
            // Refused before anything is created (`replace_member` says why).
            let none = Box::new(crate::carrier::MemoryCarrier::new(0));
            return members::replace_member(&self.inner, index, MemberCarrier::new(none), None);
        }
        let size = members[index].blocks * u64::from(self.inner.layout.block_size);
        let (new, _, created) = members::create_member(self, path, Some(size), carrier, progress)?;
        let new = MemberCarrier { carrier: new, path: Some(path.to_owned()) };
        members::replace_member(&self.inner, index, new, progress).inspect_err(|_| {
            if created {
                // The file this call created never became a member.
                let _ = std::fs::remove_file(path);
            }
        })
    }

    /// The member whose carrier is at `path` (the paths the member table records, member 0's
    /// own included), if any.
    pub fn member_index(&self, path: &Path) -> Option<usize> {
        members::index_of(self, path)
    }

    /// Every member, member 0 first.
    pub fn members(&self) -> Vec<MemberInfo> {
        members::infos(self)
    }

    /// What open found (adopted slot, fallback, reclaimed blocks).
    pub fn open_report(&self) -> &OpenReport {
        &self.inner.report
    }

    /// A summary of the volume: identity, layout, medium, knobs, free space.
    pub fn info(&self) -> VolumeInfo {
        let meta = self.inner.meta();
        VolumeInfo {
            uuid: meta.sb.uuid,
            generation: meta.sb.generation,
            layout: meta.sb.layout,
            medium: self.inner.io.medium,
            carrier: self.inner.io.options,
            physical_sector: self.inner.io.geometry.physical_sector,
            thin: meta.sb.layout_flags & LAYOUT_THIN != 0,
            sparse: meta.sb.layout_flags & LAYOUT_SPARSE != 0,
            read_only: self.inner.read_only,
            free_blocks: meta.alloc.free_blocks(),
            members: members::infos_locked(&self.inner, &meta),
            inodes: meta.ns.inodes.len(),
            cache_bytes: self.inner.cache_bytes,
            default_policy: self.inner.default_policy(),
            journal: meta.journal.ring().map(|r| JournalInfo {
                blocks: r.len,
                used_blocks: r.used,
                tail: r.tail,
                next_sequence: r.next_sequence,
                lost_from: r.lost_from,
            }),
        }
    }

    /// Operation counts of the carrier so far.
    pub fn carrier_stats(&self) -> StatsSnapshot {
        self.inner.io.carrier_stats()
    }

    /// Operation counts of the IO layer per area (superblocks, bitmap, image, data).
    pub fn io_counts(&self) -> crate::io::IoCounts {
        self.inner.io.counts()
    }

    /// The page cache's counters, or `None` without a cache.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.inner.io.cache_stats()
    }

    /// Sets the cache's metrics (names in [`crate::cache_metric_names`]) to its counters now:
    /// call it periodically (the node does, every second). Nothing without a cache.
    pub fn publish_metrics(&self) {
        use crate::io::cache_metric_names as n;
        let Some(s) = self.cache_stats() else { return };
        let secs = s.writeback_ns as f64 / 1e9;
        for (name, value) in [
            (n::HITS_TOTAL, s.hits),
            (n::MISSES_TOTAL, s.misses),
            (n::EVICTIONS_TOTAL, s.evictions),
            (n::READAHEAD_PAGES_TOTAL, s.readahead_pages),
            (n::WRITEBACK_PAGES_TOTAL, s.writeback_pages),
            (n::WRITEBACK_BYTES_TOTAL, s.writeback_bytes),
            (n::WRITEBACK_WRITES_TOTAL, s.writeback_writes),
            (n::BYPASSED_PAGES_TOTAL, s.bypassed),
        ] {
            metrics::counter!(name).absolute(value);
        }
        metrics::gauge!(n::WRITEBACK_BUSY_SECONDS).set(secs);
        metrics::gauge!(n::DIRTY_PAGES).set(s.dirty_pages as f64);
        metrics::gauge!(n::RESIDENT_PAGES).set(s.resident_pages as f64);
        metrics::gauge!(n::CAPACITY_BYTES).set(s.capacity_bytes as f64);
    }

    /// True when a data write must be followed by a barrier (or a sync) to be durable: the
    /// carrier is durable and not write-through. False under write-through (durable on
    /// return) and on memory (nothing is durable, a barrier means nothing).
    pub fn data_writes_need_barrier(&self) -> bool {
        !self.inner.io.options.write_through && self.inner.io.medium.is_durable()
    }

    /// Generation of the last durable commit.
    pub fn generation(&self) -> u64 {
        self.inner.meta().sb.generation
    }

    /// True once a failed write or barrier poisoned the volume.
    pub fn is_poisoned(&self) -> bool {
        self.inner.io.is_poisoned()
    }

    /// An identifier of the last durable commit that only grows: the generation of the last
    /// image on a volume without a journal, the sequence number of the last batch on a
    /// journaled one (a superblock flip that only grows the volume changes neither).
    pub fn commit_id(&self) -> u64 {
        self.inner.meta().commit_id()
    }

    /// Makes every change so far durable: all metadata and data. Without a journal one
    /// commit of two barriers; with one, one journal batch (one durable write, or a write
    /// and a barrier) unless the ring is full and a checkpoint takes its place.
    pub fn commit(&self) -> Result<()> {
        let since = self.inner.io.errors();
        self.inner.writable()?;
        let mut meta = self.inner.meta();
        commit::commit_changes(&self.inner, &mut meta, since)
    }

    /// Like `commit`, but does nothing when nothing changed, and only a barrier when only
    /// buffered data changed.
    ///
    /// Fails (`Poisoned`) if any write of the volume failed since the sync started, also a
    /// writeback of another thread that it only waited for: a sync never returns Ok over a
    /// failed write.
    pub fn sync(&self) -> Result<()> {
        self.sync_since(self.inner.io.errors())
    }

    /// [`Volume::sync`], failing if any write failed since the IO layer's error sequence was
    /// `since` (a file handle's last sync).
    pub(crate) fn sync_since(&self, since: u64) -> Result<()> {
        if self.inner.options.mutation() == Some(CommitMutation::SyncIgnoresWritebackError) {
            // The mutant looks at nothing but closing: a poisoned volume "syncs".
            if self.inner.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
        } else {
            self.inner.writable()?;
        }
        let mut meta = self.inner.meta();
        commit::sync(&self.inner, &mut meta, since)
    }

    /// Writes a checkpoint now (journaled volumes; a plain commit otherwise): the image and
    /// both superblocks, after which the journal ring is empty.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.writable()?;
        let mut meta = self.inner.meta();
        checkpoint::checkpoint(&self.inner, &mut meta, VolumeState::Dirty)
    }

    /// Clears the "journal lost" mark that open left when it found the journal region
    /// destroyed (`vellum journal ack`): the operator has seen that the records after the
    /// checkpoint are gone. Takes effect with a checkpoint.
    pub fn acknowledge_journal_loss(&self) -> Result<bool> {
        self.inner.writable()?;
        let mut meta = self.inner.meta();
        let Some(ring) = meta.journal.ring_mut() else { return Ok(false) };
        if ring.lost_from.take().is_none() {
            return Ok(false);
        }
        checkpoint::checkpoint(&self.inner, &mut meta, VolumeState::Dirty)?;
        Ok(true)
    }

    /// Commits with the clean state and releases the carrier and its lock, also when `File`s
    /// or clones are still around: they fail with `Closed` afterwards. A read-only volume
    /// just closes. A poisoned volume releases its carrier without writing.
    pub fn close(self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        self.inner.stop_checkpointer();
        let mut meta = self.inner.meta();
        let result = if self.inner.read_only {
            Ok(())
        } else {
            self.inner.usable().and_then(|()| {
                let orphans: Vec<u64> = meta.ns.orphans.keys().copied().collect();
                for ino in orphans {
                    let m = &mut *meta;
                    m.ns.release_orphan(ino, &mut m.alloc);
                }
                checkpoint::checkpoint(&self.inner, &mut meta, VolumeState::Clean)
            })
        };
        self.inner.closed.store(true, Ordering::Release);
        self.inner.io.release();
        drop(meta);
        result
    }

    fn create(&self, path: &[u8], kind: InodeKind) -> Result<u64> {
        self.inner.writable()?;
        let mut meta = self.inner.meta();
        let (parent, name) = meta.ns.resolve_parent(path)?;
        meta.ns.create(parent, name, kind, now_ns(), path)
    }

    /// Creates a new, empty file and opens it on the volume's default tiers.
    pub fn create_file(&self, path: impl AsRef<[u8]>) -> Result<File> {
        let policy = self.inner.default_policy();
        self.create_file_with(path, policy)
    }

    /// Creates a new, empty file and opens it with `policy` (buffered or direct reads and
    /// writes).
    pub fn create_file_with(&self, path: impl AsRef<[u8]>, policy: IoPolicy) -> Result<File> {
        let ino = self.create(path.as_ref(), InodeKind::File)?;
        Ok(File::new(self.clone(), ino, policy))
    }

    /// Creates a directory.
    pub fn create_dir(&self, path: impl AsRef<[u8]>) -> Result<()> {
        self.create(path.as_ref(), InodeKind::Directory).map(|_| ())
    }

    /// Creates every missing directory of `path`.
    pub fn create_dir_all(&self, path: impl AsRef<[u8]>) -> Result<()> {
        let path = path.as_ref();
        let names = crate::namespace::split_path(path)?;
        let mut at = Vec::new();
        for name in names {
            at.push(b'/');
            at.extend_from_slice(name);
            match self.create(&at, InodeKind::Directory) {
                Ok(_) => {}
                Err(Error::AlreadyExists { .. }) if self.stat(&at)?.kind == FileKind::Directory => {
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Opens an existing file on the volume's default tiers.
    pub fn open_file(&self, path: impl AsRef<[u8]>) -> Result<File> {
        let policy = self.inner.default_policy();
        self.open_file_with(path, policy)
    }

    /// Opens an existing file with `policy` (buffered or direct reads and writes).
    pub fn open_file_with(&self, path: impl AsRef<[u8]>, policy: IoPolicy) -> Result<File> {
        let path = path.as_ref();
        self.inner.usable()?;
        let ino = {
            let meta = self.inner.meta();
            let ino = meta.ns.resolve(path)?;
            if meta.ns.inodes[&ino].kind == InodeKind::Directory {
                return Err(Error::IsADirectory { path: path.to_vec() });
            }
            ino
        };
        Ok(File::new(self.clone(), ino, policy))
    }

    /// Removes a file or an empty directory. Open handles of a removed file keep working;
    /// its blocks return to free space after the last one closes.
    pub fn remove(&self, path: impl AsRef<[u8]>) -> Result<()> {
        self.inner.writable()?;
        let mut meta = self.inner.meta();
        let m = &mut *meta;
        let open = &m.open;
        m.ns.remove(path.as_ref(), |ino| open.contains_key(&ino), &mut m.alloc, now_ns())
    }

    /// Renames `from` to `to` atomically, replacing a file or an empty directory at `to`.
    pub fn rename(&self, from: impl AsRef<[u8]>, to: impl AsRef<[u8]>) -> Result<()> {
        self.inner.writable()?;
        let mut meta = self.inner.meta();
        let m = &mut *meta;
        let open = &m.open;
        m.ns.rename(
            from.as_ref(),
            to.as_ref(),
            |ino| open.contains_key(&ino),
            &mut m.alloc,
            now_ns(),
        )
    }

    /// Lists a directory, sorted by name (byte order).
    pub fn list(&self, path: impl AsRef<[u8]>) -> Result<Vec<DirEntry>> {
        let path = path.as_ref();
        self.inner.usable()?;
        let meta = self.inner.meta();
        let ino = meta.ns.resolve(path)?;
        let dir = &meta.ns.inodes[&ino];
        if dir.kind != InodeKind::Directory {
            return Err(Error::NotADirectory { path: path.to_vec() });
        }
        Ok(dir
            .children
            .iter()
            .map(|(name, c)| {
                let child = &meta.ns.inodes[&c.ino];
                DirEntry {
                    name: name.clone(),
                    ino: c.ino,
                    kind: child.kind.into(),
                    size: child.size,
                }
            })
            .collect())
    }

    /// Metadata of the file or directory at `path`.
    pub fn stat(&self, path: impl AsRef<[u8]>) -> Result<Metadata> {
        self.inner.usable()?;
        let meta = self.inner.meta();
        let ino = meta.ns.resolve(path.as_ref())?;
        Ok(stat_of(&meta.ns, ino))
    }

    /// True when `path` names something.
    pub fn exists(&self, path: impl AsRef<[u8]>) -> Result<bool> {
        match self.stat(path) {
            Ok(_) => Ok(true),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Checks the in-memory invariants (tests and fuzzers call this after operations).
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        let meta = self.inner.meta();
        meta.ns.check_invariants();
        meta.alloc.check_invariants();
    }
}

pub(crate) fn stat_of(ns: &Namespace, ino: u64) -> Metadata {
    let i = ns.get(ino).expect("stat of a live inode");
    Metadata {
        ino,
        kind: i.kind.into(),
        size: i.size,
        allocated_blocks: i.allocated_blocks(),
        extents: i.extents.len(),
        attributes: i.attrs.len(),
        created_unix_ns: i.created_ns,
        modified_unix_ns: i.modified_ns,
    }
}
