//! Format and open (FORMAT.md, "Open").
//!
//! Open: the carrier is already locked -> read both superblocks -> adopt the newest one whose
//! image verifies (falling back one generation only when the newer slot is the first write of
//! an interrupted commit) -> replay the journal's valid prefix into the namespace (journaled
//! volumes; nothing is written) -> reconcile the bitmap with the reachable set -> the
//! recovery writes ([`recover`]: a destroyed ring's loss made durable, the ring filled again,
//! then the checkpoint that marks the volume dirty) -> writable. There is no repair tool and
//! no heuristic scan: a crashed volume opens exactly at its last durable commit.
//!
//! Invariants: nothing is written before adoption and replay succeeded; a read-only open
//! writes nothing; every recovery write is idempotent under a power cut (a cut anywhere in
//! [`recover`] reopens to the same decisions, and the loss of a destroyed ring is durable
//! before anything erases the evidence of it).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use super::members::{self, MemberCarrier};
use super::{
    CommitMutation, FormatOptions, Inner, Meta, Volume, VolumeOptions, checkpoint, now_ns,
};
use crate::bitmap::{Allocator, Bitmap};
use crate::carrier::{
    Carrier, CarrierKind, CarrierOptions, CreateOptions, DeviceCarrier, FileCarrier,
};
use crate::error::{Corruption, Error, Invalid, Region, Result};
use crate::format::checksum;
use crate::format::consts::{FORMAT_VERSION, SUPERBLOCKS_LEN, Uuid};
use crate::image::reader::{self, LoadedImage};
use crate::io::{Area, AreaRead, IO_ALIGN, Io, Mutants, Probe};
use crate::journal::replay::{Apply, ReplayRules, Replayed};
use crate::journal::scan::ScanRules;
use crate::journal::{self, Journal, Op, ReplayReport, Ring};
use crate::layout::{Layout, VolumeGeometry};
use crate::namespace::Namespace;
use crate::superblock::{
    self, BlockRef, INCOMPAT_GROW, INCOMPAT_JOURNAL, JournalFields, LAYOUT_SPARSE, LAYOUT_THIN,
    MIN_JOURNAL_BLOCKS, Member, Superblock, VolumeState,
};

/// What open found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Slot of the adopted superblock (0 = A, 1 = B).
    pub adopted_slot: u8,
    /// Generation adopted.
    pub generation: u64,
    /// Set when the newest slot's image did not verify and the previous commit was adopted:
    /// the generation of the interrupted commit.
    pub fell_back_from: Option<u64>,
    /// The volume was not closed cleanly (a crash, or an open that never closed).
    pub was_dirty: bool,
    /// The bitmap was rebuilt from the image's reachable set.
    pub bitmap_rebuilt: bool,
    /// Blocks marked used on disk that nothing reaches (returned to free space).
    pub leaked_blocks: u64,
    /// The volume is open read-only because of unknown ro-compat features.
    pub ro_compat_read_only: bool,
    /// The last durable commit recovered (see [`Volume::commit_id`]).
    pub commit_id: u64,
    /// What journal replay did (journaled volumes).
    pub journal: Option<ReplayReport>,
}

impl OpenReport {
    /// True when the journal region was found destroyed at this open, or an earlier open
    /// found it and the loss is not acknowledged: the volume went on from an older
    /// checkpoint, and commits after it may be lost.
    pub fn journal_lost(&self) -> bool {
        self.journal.is_some_and(|j| j.destroyed || j.loss_unacknowledged)
    }
}

/// A superblock and its verified image.
pub(crate) struct Adopted {
    pub(crate) slot: u8,
    pub(crate) sb: Superblock,
    pub(crate) image: LoadedImage,
    pub(crate) fell_back_from: Option<u64>,
}

/// Reads and decodes both superblock slots of `carrier`. Only a failed carrier read (or a
/// carrier too short to hold them: [`Error::NotAVolume`]) is an `Err`.
pub fn read_slots(carrier: &dyn Carrier) -> Result<[superblock::SlotRead; 2]> {
    read_slots_in(&Probe::single(carrier))
}

/// Reads and decodes both superblock slots through the IO layer.
pub(crate) fn read_slots_in(reader: &dyn AreaRead) -> Result<[superblock::SlotRead; 2]> {
    let len = 2 * crate::format::consts::SUPERBLOCK_LEN;
    if reader.carrier_len() < len as u64 {
        return Err(Error::NotAVolume);
    }
    let mut bytes = Io::buffer(len);
    reader.read_in(None, Area::Superblocks, 0, bytes.as_mut_slice())?;
    Ok(superblock::decode_slots(bytes.as_slice()))
}

/// Adoption: the newest valid superblock whose image verifies. A newer slot may be passed
/// over only when it is the first-written slot of an interrupted commit (exactly one
/// generation ahead) or belongs to another volume; anything else is real damage and refuses.
/// Each candidate places the members by its own table before its image is read: a newer
/// slot that is passed over (another volume's, another journal size or member table) never
/// decides where the adopted one's blocks are.
pub(crate) fn adopt(probe: &Probe<'_>) -> Result<Adopted> {
    let order = superblock::adoption_order(read_slots_in(probe)?)?;
    let mut first_error = None;
    for (i, (slot, sb)) in order.iter().enumerate() {
        if sb.carrier_index != 0 {
            // A later member's superblock: it describes no image (FORMAT.md, "Members").
            let first = sb.member_paths.first().filter(|p| !p.is_empty());
            return Err(Error::Member {
                member: "this carrier".to_owned(),
                problem: crate::error::MemberProblem::NotFirst {
                    index: sb.carrier_index,
                    first: first.map(|p| String::from_utf8_lossy(p).into_owned()),
                },
            });
        }
        match place(probe, sb).and_then(|()| reader::load(probe, sb)) {
            Ok(image) => {
                let fell_back_from = (i > 0).then(|| order[0].1.generation);
                return Ok(Adopted { slot: *slot, sb: sb.clone(), image, fell_back_from });
            }
            Err(e @ (Error::Io { .. } | Error::Unsupported(_))) => return Err(e),
            Err(e) => {
                let may_fall_back = order.get(i + 1).is_some_and(|(_, next)| {
                    next.uuid != sb.uuid || next.generation + 1 == sb.generation
                });
                let first = first_error.take().unwrap_or(e);
                if !may_fall_back {
                    return Err(first);
                }
                first_error = Some(first);
            }
        }
    }
    Err(first_error.unwrap_or(Error::NotAVolume))
}

/// Places the members member 0's superblock `sb` names on the probe's carriers; refuses a
/// table naming more members than were gathered, or giving one more than its carrier holds
/// (nothing may size a read by a table entry before that).
fn place(probe: &Probe<'_>, sb: &Superblock) -> Result<()> {
    let count = sb.carrier_count as usize;
    let given = probe.carriers().len();
    if count > given {
        return Err(Error::Member {
            member: members::name(None, given),
            problem: crate::error::MemberProblem::Missing {
                index: given as u32,
                why: format!(
                    "the commit at generation {} names {count} members; {given} were gathered",
                    sb.generation
                ),
            },
        });
    }
    for k in 1..count {
        members::fits(sb, k, probe.carriers()[k])?;
    }
    probe.place(&sb.geometry_checked()?);
    Ok(())
}

/// Where replay applies records: the checkpoint's namespace through the live path's own
/// operations, on a scratch allocator (blocks a batch frees are free for the next batch, as
/// after a live commit).
struct ReplayTarget<'a> {
    ns: &'a mut Namespace,
    alloc: Allocator,
    /// The `ReplayDiffers` mutant: skip attribute removals.
    skip_attr_removals: bool,
}

impl Apply for ReplayTarget<'_> {
    fn apply(&mut self, op: &Op, sequence: u64, offset: u64) -> Result<()> {
        if self.skip_attr_removals && matches!(op, Op::RemoveAttr { .. }) {
            return Ok(());
        }
        self.ns.apply(op, &mut self.alloc, sequence, offset)
    }

    fn batch_done(&mut self) {
        self.alloc.commit_completed();
    }
}

/// Replays the journal of a journaled volume into `adopted`'s namespace and reachable set
/// (`journal::replay`). Reads the ring; writes nothing.
pub(crate) fn replay(
    io: &dyn AreaRead,
    adopted: &mut Adopted,
    mutation: Option<CommitMutation>,
) -> Result<Option<Replayed>> {
    let sb = &adopted.sb;
    if !sb.journaled() {
        return Ok(None);
    }
    let rules = ReplayRules {
        scan: ScanRules { accept_damage: mutation == Some(CommitMutation::ReplayAcceptsDamage) },
        reuse_sequence: mutation == Some(CommitMutation::JournalSequenceReuse),
    };
    let ns = &mut adopted.image.namespace;
    // Replay records nothing: the operations it applies are already in the ring.
    ns.journal = None;
    let mut target = ReplayTarget {
        alloc: Allocator::new(sb.geometry().layout(), adopted.image.reachable.clone()),
        ns,
        skip_attr_removals: mutation == Some(CommitMutation::ReplayDiffers),
    };
    let replayed = journal::replay::replay(io, sb, rules, &mut target)?;
    let reachable = target.alloc.live().clone();
    assert!(adopted.image.namespace.journal.is_none(), "replay queued records");
    adopted.image.namespace.journal = Some(Vec::new());
    adopted.image.reachable = reachable;
    Ok(Some(replayed))
}

fn check_alignment(io: &Io, block_size: u32) -> Result<()> {
    // Every member's carrier: a later member on a device of larger sectors than member 0's
    // could not take the volume's block IO.
    for carrier in io.session()?.carriers() {
        let g = carrier.geometry();
        if !block_size.is_multiple_of(g.offset_align.max(1)) || g.mem_align as usize > IO_ALIGN {
            return Err(Error::Invalid(Invalid::BlockSize { bytes: block_size }));
        }
    }
    Ok(())
}

/// Every member's bitmap region, concatenated in member order (what `bitmap_checksum`
/// covers), and the bitmap of the volume's block space they make together.
fn read_bitmap(io: &Io, geometry: &VolumeGeometry) -> Result<(Vec<u8>, Bitmap)> {
    let layout = geometry.layout();
    let bs = u64::from(layout.block_size);
    let mut bytes = Vec::new();
    let mut bitmap = Bitmap::new(layout.total_blocks);
    let session = io.session()?;
    for span in &geometry.spans {
        let own = span.layout;
        let mut buf = Io::buffer((own.bitmap.len * bs) as usize);
        let at = (span.base + own.bitmap.start) * bs;
        session.read_in(Some(&own), Area::Bitmap, at, buf.as_mut_slice())?;
        bitmap.or_span(span.base, own.total_blocks, buf.as_slice());
        bytes.extend_from_slice(buf.as_slice());
    }
    Ok((bytes, bitmap))
}

/// The allocator for an adopted image, and what reconciling the on-disk bitmap found.
fn reconcile(io: &Io, adopted: &Adopted, report: &mut OpenReport) -> Result<Allocator> {
    let geometry = adopted.sb.geometry();
    let layout = geometry.layout();
    let reachable = adopted.image.reachable.clone();
    let mut trusted = false;
    let replayed = report.journal.is_some_and(|j| j.batches > 0);
    if adopted.sb.state == VolumeState::Clean && !replayed {
        let (bytes, on_disk) = read_bitmap(io, &geometry)?;
        if checksum::plain(&bytes) == adopted.sb.bitmap_checksum {
            trusted = true;
            if let Some(&block) = reachable.difference(&on_disk).first() {
                let offset = layout.bitmap.start * u64::from(layout.block_size) + block / 8;
                return Err(Error::corrupt(
                    Region::Bitmap,
                    offset,
                    Corruption::BitmapMissesBlock { block },
                ));
            }
            report.leaked_blocks = on_disk.difference(&reachable).len() as u64;
        }
    }
    let mut alloc = Allocator::new(layout, reachable);
    if !trusted || report.leaked_blocks > 0 {
        report.bitmap_rebuilt = true;
        alloc.mark_all_bitmap_dirty();
    }
    Ok(alloc)
}

/// What `build` puts under the metadata mutex besides the superblock.
struct State {
    ns: Namespace,
    alloc: Allocator,
    journal: Journal,
    image_generation: u64,
}

fn build(
    io: Io,
    sb: &Superblock,
    state: State,
    options: VolumeOptions,
    read_only: bool,
    report: OpenReport,
    first_path: Option<PathBuf>,
) -> Result<Volume> {
    let cache_bytes = options.cache_bytes_for(io.medium)?;
    // The IO layer checks requests against the geometry at the cap: growth moves only the
    // end of the data region, and the allocator never hands out a block past the bound.
    let geometry = sb.geometry();
    let at_cap = geometry.at_cap().layout();
    io.init(&geometry, cache_bytes);
    let State { ns, alloc, journal, image_generation } = state;
    let carrier_len = io.session()?.carrier().geometry().len_bytes;
    let meta = Meta {
        ns,
        alloc,
        sb: sb.clone(),
        open: std::collections::HashMap::new(),
        carrier_len,
        journal,
        image_generation,
        last_checkpoint: std::time::Instant::now(),
        first_path,
    };
    let io = Arc::new(io);
    // Dirty pages exist only when data writes are not write-through and the volume writes.
    if io.cache().is_some() && !read_only && !io.options.write_through {
        io.start_writeback();
    }
    if io.cache().is_some() {
        io.start_readahead();
    }
    let inner = Inner {
        io,
        layout: at_cap,
        options,
        cache_bytes,
        read_only,
        meta: Mutex::new(meta),
        gate: Mutex::new(()),
        closed: AtomicBool::new(false),
        report,
        checkpointer: Mutex::new(None),
    };
    let inner = Arc::new(inner);
    let interval = options.checkpoint_interval.unwrap_or(journal::checkpointer::DEFAULT_INTERVAL);
    let journaled = inner.meta().journal.is_on();
    if journaled && !read_only && !interval.is_zero() {
        let weak: std::sync::Weak<Inner> = Arc::downgrade(&inner);
        *super::lock(&inner.checkpointer) = journal::checkpointer::start(weak, interval);
    }
    Ok(Volume { inner })
}

/// The IO layer's share of the protocol mutant in `options`.
fn mutants(options: &VolumeOptions) -> Mutants {
    Mutants {
        unflushed_before_write: options.mutation() == Some(CommitMutation::UnflushedBeforeWrite),
        whole_page_writeback: options.mutation() == Some(CommitMutation::WholePageWriteback),
        ignore_poison: options.mutation() == Some(CommitMutation::SyncIgnoresWritebackError),
    }
}

/// Opens the volume on `carrier`.
pub(crate) fn open(carrier: Box<dyn Carrier>, options: VolumeOptions) -> Result<Volume> {
    open_members(vec![MemberCarrier::new(carrier)], None, options)
}

/// Opens the volume whose members are `given` (any order), opening by the paths member 0's
/// table records those that were not given (`opener`).
pub(crate) fn open_members(
    given: Vec<MemberCarrier>,
    opener: Option<members::Opener<'_>>,
    options: VolumeOptions,
) -> Result<Volume> {
    let (carriers, first_path) = members::gather(given, opener)?;
    let io = Io::with_members(carriers, mutants(&options));
    options.cache_bytes_for(io.medium)?;
    let mut adopted = {
        let session = io.session()?;
        adopt(&Probe::over(session.carriers()))?
    };
    // The adopted commit places the members (an older one than the carriers' newest may name
    // fewer: the rest are not members of what opened).
    io.set_geometry(&adopted.sb.geometry());
    check_alignment(&io, adopted.sb.layout.block_size)?;
    let replayed = replay(&io.session()?, &mut adopted, options.mutation())?;
    let sb = &adopted.sb;
    let layout = sb.layout;
    let carrier_len = io.geometry.len_bytes;
    if sb.layout_flags & LAYOUT_THIN == 0 && carrier_len < layout.capacity_bytes() {
        return Err(Error::Invalid(Invalid::CarrierTooSmall {
            carrier_bytes: carrier_len,
            volume_bytes: layout.capacity_bytes(),
        }));
    }
    let refill = replayed.as_ref().is_some_and(|r| r.refill);
    let mut report = OpenReport {
        adopted_slot: adopted.slot,
        generation: sb.generation,
        fell_back_from: adopted.fell_back_from,
        was_dirty: sb.state == VolumeState::Dirty,
        ro_compat_read_only: sb.requires_read_only(),
        commit_id: replayed.as_ref().map_or(adopted.image.generation, |r| r.commit_id),
        journal: replayed.as_ref().map(|r| r.report),
        ..OpenReport::default()
    };
    let alloc = reconcile(&io, &adopted, &mut report)?;
    let read_only = options.read_only || io.options.read_only || sb.requires_read_only();
    if report.fell_back_from.is_some() || report.leaked_blocks > 0 {
        tracing::info!(?report, "volume recovered at open");
    }
    if report.journal.is_some_and(|j| j.destroyed) {
        tracing::error!(
            "the journal region is destroyed: the volume opens at its checkpoint (generation \
             {}), and commits after it are lost; `vellum journal ack` once this is understood",
            sb.generation
        );
    }
    let Adopted { sb, image, .. } = adopted;
    let journal = replayed.map_or(Journal::Off, |r| Journal::On(r.ring));
    let state = State { ns: image.namespace, alloc, journal, image_generation: image.generation };
    let volume = build(io, &sb, state, options, read_only, report, first_path)?;
    if !read_only {
        recover(&volume.inner, &sb, refill)?;
    }
    Ok(volume)
}

/// The writes of a writable open, after replay decided what they are (`journal::replay`),
/// in the order that makes a power cut between any two of them reopen to the same decision:
/// 1. a newly found loss of the journal region becomes durable (a checkpoint with the loss
///    flag; the ring is left as it is, still failing to verify);
/// 2. the ring is filled again (when a loss is recorded and no batch was replayed, but some
///    block does not verify: the region was destroyed, or an earlier fill was cut short);
/// 3. the checkpoint that moves the tail past the replayed batches and makes the next
///    sequence durable (past a torn batch's), with the volume marked dirty.
fn recover(inner: &Inner, adopted: &superblock::Superblock, refill: bool) -> Result<()> {
    let mut meta = inner.meta();
    let mutation = inner.options.mutation();
    let lost = meta.journal.ring().is_some_and(|r| r.lost_from.is_some());
    let recorded = adopted.journal.flags & superblock::JOURNAL_LOSS != 0;
    if refill {
        if lost && !recorded && mutation != Some(CommitMutation::FillBeforeLossFlag) {
            checkpoint::checkpoint(inner, &mut meta, VolumeState::Dirty)?;
        }
        let ring = meta.journal.ring().expect("a refill has a ring").clone();
        let session = inner.io.session()?;
        journal::writer::write_fillers(&session, &ring, &inner.layout, &meta.sb.uuid)?;
    }
    checkpoint::checkpoint(inner, &mut meta, VolumeState::Dirty)
}

/// Formats `carrier` with `format`.
pub(crate) fn format(
    carrier: Box<dyn Carrier>,
    format: &FormatOptions<'_>,
    options: VolumeOptions,
) -> Result<Volume> {
    format_members(MemberCarrier::new(carrier), Vec::new(), format, options)
}

/// Formats a volume of member 0 `first` (laid out by `format`) and the members `others`, each
/// taking its whole carrier (FORMAT.md, "Members").
pub(crate) fn format_members(
    first: MemberCarrier,
    others: Vec<MemberCarrier>,
    format: &FormatOptions<'_>,
    options: VolumeOptions,
) -> Result<Volume> {
    let read_only = |m: &MemberCarrier| m.carrier.options().read_only;
    if read_only(&first) || others.iter().any(read_only) || options.read_only {
        return Err(Error::ReadOnly);
    }
    let first_path = first.path;
    let other_paths: Vec<Option<PathBuf>> = others.iter().map(|m| m.path.clone()).collect();
    let mut carriers = vec![first.carrier];
    carriers.extend(others.into_iter().map(|m| m.carrier));
    let io = Io::with_members(carriers, mutants(&options));
    options.cache_bytes_for(io.medium)?;
    let medium = io.medium;
    let carrier_len = io.geometry.len_bytes;
    let capacity = match format.capacity_bytes {
        Some(c) => c,
        None if carrier_len > 0 => carrier_len,
        None => return Err(Error::Invalid(Invalid::Capacity { bytes: 0 })),
    };
    // Growth stops at the size of a carrier that cannot grow (a device, memory).
    let grow_max = match format.grow_max_bytes {
        Some(max) if medium != CarrierKind::File && carrier_len > 0 => Some(max.min(carrier_len)),
        other => other,
    };
    let layout = Layout::for_growing_format(
        capacity,
        grow_max,
        format.block_size,
        format.journal_bytes,
        format.image_blocks,
    )?;
    check_alignment(&io, layout.block_size)?;
    if format.journal && layout.journal.len < MIN_JOURNAL_BLOCKS {
        return Err(Error::Invalid(Invalid::JournalRegion {
            blocks: layout.journal.len,
            min: MIN_JOURNAL_BLOCKS,
        }));
    }
    // Thin and sparse describe a file carrier; devices and memory are inherently
    // preallocated and fully backed.
    let thin = medium == CarrierKind::File && !format.preallocate;
    let sparse = medium == CarrierKind::File && format.sparse;
    if !thin && carrier_len < layout.capacity_bytes() {
        return Err(Error::Invalid(Invalid::CarrierTooSmall {
            carrier_bytes: carrier_len,
            volume_bytes: layout.capacity_bytes(),
        }));
    }
    let grow_to = layout.offset_of(layout.image.start);
    {
        let session = io.session()?;
        session.grow(0, grow_to, sparse)?;
        // Wipe both slots first: a format that crashes half-way never looks like the
        // carrier's previous volume.
        let zeros = Io::buffer(SUPERBLOCKS_LEN as usize);
        session.write(Area::Superblocks, 0, zeros.as_slice())?;
        session.barrier()?;
    }
    let uuid_error = |source| Error::Open { path: "/dev/urandom".into(), source };
    let uuid = Uuid::random().map_err(uuid_error)?;
    let member = Uuid::random().map_err(uuid_error)?;
    let mut layout_flags = 0;
    if thin {
        layout_flags |= LAYOUT_THIN;
    }
    if sparse {
        layout_flags |= LAYOUT_SPARSE;
    }
    let now = now_ns();
    // Generation 0 is "nothing committed yet"; the first commit below writes generation 1.
    let (mut incompat, journal) = if format.journal {
        (INCOMPAT_JOURNAL, JournalFields { tail: 0, sequence: 1, lost_from: 0, flags: 0 })
    } else {
        (0, JournalFields::default())
    };
    if format.grow_max_bytes.is_some() {
        incompat |= INCOMPAT_GROW;
    }
    let mut sb = Superblock {
        version: FORMAT_VERSION,
        state: VolumeState::Dirty,
        incompat,
        ro_compat: 0,
        compat: 0,
        generation: 0,
        layout,
        layout_flags,
        uuid,
        carrier_index: 0,
        carrier_count: 1,
        members: vec![Member { uuid: member, capacity_blocks: layout.total_blocks }],
        root: BlockRef::default(),
        bitmap_checksum: 0,
        created_unix_ns: now,
        journal,
        member_paths: Vec::new(),
    };
    if !other_paths.is_empty() {
        if format.grow_max_bytes.is_some() {
            return Err(Error::Invalid(Invalid::MaxSize {
                max_bytes: format.grow_max_bytes.unwrap_or(0),
                capacity_bytes: capacity,
            }));
        }
        let session = io.session()?;
        let table = session.table();
        let others: Vec<(&dyn Carrier, Option<&Path>)> = (1..table.members.len())
            .map(|k| (table.carrier(k), other_paths[k - 1].as_deref()))
            .collect();
        members::format_members(&mut sb, first_path.as_deref(), &others)?;
        // Every later member's identity is durable before member 0's first commit.
        for (k, (carrier, _)) in others.iter().enumerate() {
            members::write_identity(*carrier, &members::member_superblock(&sb, k + 1), true)?;
        }
    }
    let mut ns = Namespace::new(layout.block_size, now);
    let journal = if format.journal {
        ns.journal = Some(Vec::new());
        Journal::On(Ring::at_checkpoint(&sb))
    } else {
        Journal::Off
    };
    let geometry = sb.geometry();
    let mut alloc = Allocator::new(geometry.layout(), Allocator::fixed_regions(&geometry));
    alloc.mark_all_bitmap_dirty();
    let state = State { ns, alloc, journal, image_generation: 0 };
    let volume = build(io, &sb, state, options, false, OpenReport::default(), first_path)?;
    {
        let inner = &volume.inner;
        let mut meta = inner.meta();
        if let Some(ring) = meta.journal.ring() {
            let session = inner.io.session()?;
            journal::writer::write_fillers(&session, ring, &inner.layout, &meta.sb.uuid)?;
        }
        checkpoint::checkpoint(inner, &mut meta, VolumeState::Dirty)?;
    }
    Ok(volume)
}

/// Creates the carrier at `path` and formats it.
pub(crate) fn create_path(
    path: &Path,
    fmt: &FormatOptions<'_>,
    options: CarrierOptions,
    vopts: VolumeOptions,
) -> Result<Volume> {
    if crate::carrier::is_block_device(path) {
        let device = DeviceCarrier::open(path, options)?;
        if !fmt.force && !device.looks_empty()? {
            return Err(Error::NotEmpty { path: path.to_owned() });
        }
        let first = MemberCarrier { carrier: Box::new(device), path: Some(path.to_owned()) };
        return format_members(first, Vec::new(), fmt, vopts);
    }
    let Some(capacity_bytes) = fmt.capacity_bytes else {
        return Err(Error::Invalid(Invalid::Capacity { bytes: 0 }));
    };
    let create = CreateOptions {
        capacity_bytes,
        preallocate: fmt.preallocate,
        sparse: fmt.sparse,
        force: fmt.force,
        progress: fmt.progress,
    };
    // Refuse a bad geometry before creating (and zero-filling) anything.
    let layout = Layout::for_growing_format(
        capacity_bytes,
        fmt.grow_max_bytes,
        fmt.block_size,
        fmt.journal_bytes,
        fmt.image_blocks,
    )?;
    if fmt.journal && layout.journal.len < MIN_JOURNAL_BLOCKS {
        return Err(Error::Invalid(Invalid::JournalRegion {
            blocks: layout.journal.len,
            min: MIN_JOURNAL_BLOCKS,
        }));
    }
    let carrier = FileCarrier::create(path, &create, options)?;
    let first = MemberCarrier { carrier: Box::new(carrier), path: Some(path.to_owned()) };
    format_members(first, Vec::new(), fmt, vopts)
}

/// Switches the journal on, offline: opens the volume on `carrier` (its lock keeps every other
/// opener out), checks that its reserved region can hold a ring, and closes it with a
/// checkpoint that claims the journal feature bit. Nothing is reformatted; the image, the
/// files and the generation go on.
pub(crate) fn enable_journal(carrier: Box<dyn Carrier>, options: VolumeOptions) -> Result<()> {
    let volume = open(carrier, options)?;
    {
        let inner = &volume.inner;
        inner.writable()?;
        let mut meta = inner.meta();
        if meta.journal.is_on() {
            return Err(Error::Invalid(Invalid::JournalEnabled));
        }
        let blocks = inner.layout.journal.len;
        if blocks < MIN_JOURNAL_BLOCKS {
            return Err(Error::Invalid(Invalid::JournalRegion { blocks, min: MIN_JOURNAL_BLOCKS }));
        }
        meta.sb.incompat |= INCOMPAT_JOURNAL;
        meta.sb.journal = JournalFields { tail: 0, sequence: 1, lost_from: 0, flags: 0 };
        let ring = Ring::at_checkpoint(&meta.sb);
        // The fillers are durable before any superblock claims the journal.
        let session = inner.io.session()?;
        journal::writer::write_fillers(&session, &ring, &inner.layout, &meta.sb.uuid)?;
        drop(session);
        meta.journal = Journal::On(ring);
        meta.ns.journal = Some(Vec::new());
    }
    volume.close()
}
