//! Volumes of several members: which carriers make up a volume at open, the superblocks of
//! members after the first, adding a member online and replacing one by copy (FORMAT.md,
//! "Members").
//!
//! Members are concatenated, not mirrored: the volume's block space is member 0's blocks,
//! then member 1's, and so on (`layout::VolumeGeometry`); losing any member loses the volume.
//! Member 0 holds the journal and the **commit point**: its superblock pair carries the
//! generation, the image root, the journal position and the member table (each member's UUID
//! and capacity, and the path its carrier was last seen at). A later member's superblock pair
//! holds only its identity (volume UUID, its index, its member UUID) and its geometry, which
//! is a pure function of its capacity; it is written once, when the member joins or is copied
//! to a new carrier, and is never part of a commit.
//!
//! Adding member `k` (online, [`add_member`]):
//! 1. member 0 grows to its cap first, if it may grow (a volume of several members has no
//!    hole in its block space);
//! 2. the new carrier is zero-filled (unless it was created zero-filled) and gets its
//!    superblock pair; **barrier on the new carrier**: its zeros and identity are durable;
//! 3. member 0's superblock of generation G+1, with the member in its table and nothing
//!    else changed (the same image, the same journal position), is flipped as in a growth
//!    step: slot `(G+1) mod 2`, barrier, the other slot, barrier.
//!
//! A power cut before step 3's first barrier leaves the old volume (the new carrier is
//! ignored: no durable superblock of member 0 names it); after it, the grown one, whose new
//! member is durable in full. Nothing moves: journal records and extents keep their blocks.
//!
//! Replacing member `k` by copy ([`replace_member`], online: every carrier call of the
//! volume waits while it runs): commit, then under the IO layer's exclusive hold copy the
//! member's bytes to the new carrier (all but its superblock slots: until it gets its own
//! identity the copy is nobody's member), barrier, read both back and compare, give the copy
//! a new member UUID (its superblock pair, barrier), and flip member 0's superblock with the
//! new UUID and path in the table. A cut before the flip's first barrier leaves the old
//! carrier in use, untouched; after it, the copy. The old carrier's UUID no longer matches
//! the table, so it opens as nothing but a stale member (`MemberProblem::Stale`).
//!
//! Invariants (asserted): members join at the end of the block space; a member's superblock
//! is durable on its carrier before any superblock of member 0 names it; the generation moves
//! by exactly one per add or replace.

use std::path::{Path, PathBuf};

use super::checkpoint::{self, Barriers};
use super::{CommitMutation, Inner, grow};
use crate::carrier::Carrier;
use crate::error::{Error, IoOp, MemberProblem, Result};
use crate::format::consts::{MAX_MEMBERS, SUPERBLOCK_LEN, SUPERBLOCKS_LEN, Uuid};
use crate::io::{IO_ALIGN, Io};
use crate::layout::{BlockRange, Layout};
use crate::superblock::{
    self, BlockRef, INCOMPAT_GROW, INCOMPAT_JOURNAL, JournalFields, Member, PATHS_MAX, Superblock,
    VolumeState,
};

/// A carrier given for a member, with the path it was opened from (recorded in member 0's
/// path table so that the volume opens by member 0's path alone).
#[derive(Debug)]
pub struct MemberCarrier {
    /// The carrier.
    pub carrier: Box<dyn Carrier>,
    /// Where it was opened from (`None`: memory, or a carrier the caller always passes).
    pub path: Option<PathBuf>,
}

impl MemberCarrier {
    /// A carrier without a path.
    pub fn new(carrier: Box<dyn Carrier>) -> MemberCarrier {
        MemberCarrier { carrier, path: None }
    }
}

/// One member of an open volume (`Volume::members`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// Its index: 0 holds the journal and the commit point.
    pub index: usize,
    /// Its member UUID (a copy made by `replace_member` gets a new one).
    pub uuid: Uuid,
    /// Where its carrier was opened from or last recorded (`None`: not known).
    pub path: Option<PathBuf>,
    /// Its first block in the volume's block space.
    pub first_block: u64,
    /// Its capacity in blocks.
    pub blocks: u64,
    /// Its cap in blocks (above `blocks` only for member 0 of a growing volume).
    pub max_blocks: u64,
    /// The medium under it.
    pub medium: crate::carrier::CarrierKind,
    /// Its carrier's knobs in effect.
    pub carrier: crate::carrier::CarrierOptions,
}

/// Every member of the volume whose metadata `meta` is (locked by the caller).
pub(crate) fn infos_locked(inner: &Inner, meta: &super::Meta) -> Vec<MemberInfo> {
    let geometry = meta.sb.geometry();
    let knobs = inner.io.member_knobs();
    geometry
        .spans
        .iter()
        .enumerate()
        .map(|(k, span)| {
            let recorded = meta.sb.member_paths.get(k).and_then(|p| bytes_path(p));
            let path = if k == 0 { meta.first_path.clone().or(recorded) } else { recorded };
            let (medium, carrier) =
                knobs.get(k).copied().unwrap_or((inner.io.medium, inner.io.options));
            MemberInfo {
                index: k,
                uuid: meta.sb.members[k].uuid,
                path,
                first_block: span.base,
                blocks: span.layout.total_blocks,
                max_blocks: span.layout.max_blocks,
                medium,
                carrier,
            }
        })
        .collect()
}

/// Every member of `volume`.
pub(crate) fn infos(volume: &super::Volume) -> Vec<MemberInfo> {
    let meta = volume.inner.meta();
    infos_locked(&volume.inner, &meta)
}

/// The member of `volume` whose carrier is at `path` (compared as absolute paths, then as
/// the same file).
pub(crate) fn index_of(volume: &super::Volume, path: &Path) -> Option<usize> {
    let wanted = std::path::absolute(path).ok()?;
    let same_file = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(p), std::fs::metadata(&wanted)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    };
    let infos = infos(volume);
    infos
        .iter()
        .find(|m| {
            m.path.as_deref().and_then(|p| std::path::absolute(p).ok()).as_deref() == Some(&wanted)
        })
        .or_else(|| infos.iter().find(|m| m.path.as_deref().is_some_and(same_file)))
        .map(|m| m.index)
}

/// Opens or creates the carrier of a new member at `path`: a block device as it is (it will
/// be zero-filled), an absent file created preallocated and zero-filled at `size_bytes`.
/// Refuses a path that holds a volume or member (`OtherVolume`, `AlreadyMember`), a path
/// that is already a member of `volume`, and an existing file that is not empty. Returns the
/// carrier, whether it is zero-filled and durable already, and whether this call created the
/// file (only such a file may be removed again when the change is refused: an existing empty
/// file is the caller's).
pub(crate) fn create_member(
    volume: &super::Volume,
    path: &Path,
    size_bytes: Option<u64>,
    knobs: crate::carrier::CarrierOptions,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<(Box<dyn Carrier>, bool, bool)> {
    use crate::carrier::{CreateOptions, DeviceCarrier, FileCarrier};
    let k = volume.members().len();
    if let Some(index) = index_of(volume, path) {
        return Err(member_error(
            Some(path),
            k,
            MemberProblem::AlreadyMember { index: index as u32 },
        ));
    }
    if volume.inner.meta().sb.layout_flags != 0 {
        // Refused before anything is created or zero-filled (`add_member` says it again).
        return Err(member_error(Some(path), k, MemberProblem::NotPreallocated));
    }
    if crate::carrier::is_block_device(path) {
        let device = DeviceCarrier::open(path, knobs)?;
        check_unused_existing(&device, volume, path, k)?;
        if !device.looks_empty()? {
            return Err(Error::NotEmpty { path: path.to_owned() });
        }
        return Ok((Box::new(device), false, false));
    }
    let existed = path.exists();
    if existed {
        // Read what is there before anything is written: a volume or member is refused by
        // name, anything else that is not empty as `NotEmpty`.
        let ro = crate::carrier::CarrierOptions {
            direct_io: false,
            write_through: false,
            read_only: true,
        };
        let existing = FileCarrier::open(path, ro)?;
        check_unused_existing(&existing, volume, path, k)?;
    }
    let Some(capacity_bytes) = size_bytes else {
        return Err(Error::Invalid(crate::error::Invalid::Capacity { bytes: 0 }));
    };
    let min = Layout::min_member_blocks(volume.inner.layout.block_size)
        * u64::from(volume.inner.layout.block_size);
    if capacity_bytes < min {
        return Err(member_error(
            Some(path),
            k,
            MemberProblem::TooSmall { bytes: capacity_bytes, min_bytes: min },
        ));
    }
    let create =
        CreateOptions { capacity_bytes, preallocate: true, sparse: false, force: false, progress };
    match FileCarrier::create(path, &create, knobs) {
        Ok(file) => Ok((Box::new(file), true, !existed)),
        Err(e) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Err(e)
        }
    }
}

fn check_unused_existing(
    carrier: &dyn Carrier,
    volume: &super::Volume,
    path: &Path,
    k: usize,
) -> Result<()> {
    let sb = volume.inner.meta().sb.clone();
    check_unused(carrier, &sb, Some(path), k)
}

/// Orders `given` as the members of one volume, member 0 first, opening with `opener` the
/// members that member 0's table names by path and that were not given (`vellum info` and
/// `vellum check` open them read-only this way).
pub fn gather_members(
    given: Vec<MemberCarrier>,
    opener: Option<Opener<'_>>,
) -> Result<Vec<Box<dyn Carrier>>> {
    gather(given, opener).map(|(carriers, _)| carriers)
}

/// Opens a member's carrier by the path member 0's table records.
pub type Opener<'a> = &'a dyn Fn(&Path) -> Result<Box<dyn Carrier>>;

/// The carriers of every member in member order, and member 0's path when it was given.
pub(crate) type Gathered = (Vec<Box<dyn Carrier>>, Option<PathBuf>);

/// How a member is named in errors: its path, or `member N`.
pub(crate) fn name(path: Option<&Path>, index: usize) -> String {
    path.map_or_else(|| format!("member {index}"), |p| p.display().to_string())
}

fn member_error(path: Option<&Path>, index: usize, problem: MemberProblem) -> Error {
    Error::Member { member: name(path, index), problem }
}

fn bytes_path(bytes: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    (!bytes.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

fn path_bytes(path: Option<&Path>) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    path.map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_owned()))
        .map_or_else(Vec::new, |p| p.as_os_str().as_bytes().to_vec())
}

/// The newest superblock of `carrier` that verifies, `None` when neither slot does (not a
/// volume, or wiped). An unsupported slot is an error, as at open.
pub(crate) fn identity(carrier: &dyn Carrier) -> Result<Option<Superblock>> {
    if carrier.geometry().len_bytes < 2 * SUPERBLOCK_LEN as u64 {
        return Ok(None);
    }
    match superblock::adoption_order(super::open::read_slots(carrier)?) {
        Ok(order) => Ok(order.into_iter().next().map(|(_, sb)| sb)),
        Err(e @ (Error::Unsupported(_) | Error::Io { .. })) => Err(e),
        Err(_) => Ok(None),
    }
}

/// The carriers of every member of the volume among `given` (member 0 first once ordered),
/// opening by path those that member 0's table names and that were not given. One carrier
/// that is member 0 of a volume of one member comes back as it went in; its superblocks are
/// adopted (and refused) by open as always.
pub(crate) fn gather(given: Vec<MemberCarrier>, opener: Option<Opener<'_>>) -> Result<Gathered> {
    let mut given = given;
    if given.is_empty() {
        return Err(Error::NotAVolume);
    }
    // Identify every carrier given; member 0 leads.
    let mut ids = Vec::new();
    for (i, g) in given.iter().enumerate() {
        let id = match identity(g.carrier.as_ref()) {
            Ok(id) => id,
            // The first carrier's damage is open's to report, with adoption's own errors.
            Err(_) if i == 0 => None,
            Err(e) => return Err(e),
        };
        ids.push(id);
    }
    let first = match ids.iter().position(|id| id.as_ref().is_some_and(|sb| sb.carrier_index == 0))
    {
        Some(i) => i,
        None => match ids.iter().enumerate().find_map(|(i, id)| id.as_ref().map(|sb| (i, sb))) {
            Some((i, sb)) => {
                let first = sb.member_paths.first().and_then(|p| bytes_path(p));
                return Err(member_error(
                    given[i].path.as_deref(),
                    i,
                    MemberProblem::NotFirst {
                        index: sb.carrier_index,
                        first: first.map(|p| p.display().to_string()),
                    },
                ));
            }
            // Nothing verifies: open of the first carrier says why.
            None => 0,
        },
    };
    let first_given = given.remove(first);
    let first_id = ids.remove(first);
    let first_path = first_given.path.clone();
    let Some(sb) = first_id.as_ref().filter(|sb| sb.carrier_count > 1).cloned() else {
        // One member: any other carrier given is not one of it.
        if let Some((extra, id)) = given.iter().zip(&ids).next() {
            let volume = first_id.as_ref().map(|sb| sb.uuid);
            let problem = match id {
                Some(other) if Some(other.uuid) != volume => {
                    MemberProblem::OtherVolume { volume: other.uuid }
                }
                Some(other) => MemberProblem::AlreadyMember { index: other.carrier_index },
                None => MemberProblem::NotAMember,
            };
            return Err(member_error(extra.path.as_deref(), 1, problem));
        }
        return Ok((vec![first_given.carrier], first_path));
    };
    let count = sb.carrier_count as usize;
    let mut slots: Vec<Option<Box<dyn Carrier>>> = (0..count).map(|_| None).collect();
    slots[0] = Some(first_given.carrier);
    for (g, id) in given.into_iter().zip(ids) {
        let k = check_member(&sb, id.as_ref(), g.path.as_deref(), None)?;
        if slots[k].is_some() {
            return Err(member_error(
                g.path.as_deref(),
                k,
                MemberProblem::AlreadyMember { index: k as u32 },
            ));
        }
        slots[k] = Some(g.carrier);
    }
    let mut carriers = Vec::with_capacity(count);
    for (k, slot) in slots.into_iter().enumerate() {
        let carrier = if let Some(c) = slot {
            c
        } else {
            let path = sb.member_paths.get(k).and_then(|p| bytes_path(p));
            let (Some(path), Some(opener)) = (path.as_deref(), opener) else {
                let why = match path {
                    Some(_) => "give its carrier, or open the volume by path",
                    None => "no path recorded; give its carrier",
                }
                .to_owned();
                return Err(member_error(
                    path.as_deref(),
                    k,
                    MemberProblem::Missing { index: k as u32, why },
                ));
            };
            let carrier = opener(path).map_err(|e| {
                member_error(
                    Some(path),
                    k,
                    MemberProblem::Missing { index: k as u32, why: e.to_string() },
                )
            })?;
            let id = identity(carrier.as_ref())?;
            check_member(&sb, id.as_ref(), Some(path), Some(k))?;
            carrier
        };
        if k > 0 {
            fits(&sb, k, carrier.as_ref())?;
        }
        carriers.push(carrier);
    }
    Ok((carriers, first_path))
}

/// Checks that later member `k`'s carrier holds the capacity member 0's table gives it:
/// nothing may size a structure by a table entry (a damaged one could ask for terabytes)
/// before its carrier is known to hold it.
pub(crate) fn fits(sb: &Superblock, k: usize, carrier: &dyn Carrier) -> Result<()> {
    let need = sb.members[k].capacity_blocks.saturating_mul(u64::from(sb.layout.block_size));
    let have = carrier.geometry().len_bytes;
    if have < need {
        return Err(Error::Invalid(crate::error::Invalid::CarrierTooSmall {
            carrier_bytes: have,
            volume_bytes: need,
        }));
    }
    Ok(())
}

/// Checks that `id` (a carrier's newest superblock) is a later member of the volume whose
/// member 0 superblock is `sb` (member `expected`, when the table put it there); returns its
/// index.
fn check_member(
    sb: &Superblock,
    id: Option<&Superblock>,
    path: Option<&Path>,
    expected: Option<usize>,
) -> Result<usize> {
    let at = expected.unwrap_or(0);
    let Some(id) = id else {
        return Err(member_error(path, at, MemberProblem::NotAMember));
    };
    if id.uuid != sb.uuid {
        return Err(member_error(path, at, MemberProblem::OtherVolume { volume: id.uuid }));
    }
    let k = id.carrier_index as usize;
    if let Some(expected) = expected
        && k != expected
    {
        return Err(member_error(
            path,
            expected,
            MemberProblem::IndexMismatch { expected: expected as u32, found: k as u32 },
        ));
    }
    if k == 0 {
        return Err(member_error(path, 0, MemberProblem::AlreadyMember { index: 0 }));
    }
    let entry = sb.members.get(k);
    if entry
        .is_none_or(|m| m.uuid != id.members[k].uuid || m.capacity_blocks != id.layout.total_blocks)
    {
        return Err(member_error(path, k, MemberProblem::Stale { index: k as u32 }));
    }
    Ok(k)
}

/// The superblock pair of member `k` of the volume whose member 0 superblock is `sb` (the
/// generation that makes it a member): identity and geometry, nothing of a commit.
pub(crate) fn member_superblock(sb: &Superblock, k: usize) -> Superblock {
    assert!(k > 0 && k < sb.members.len(), "member {k} of {}", sb.members.len());
    let layout = Layout::for_member(sb.layout.block_size, sb.members[k].capacity_blocks)
        .expect("the member table places every member");
    Superblock {
        version: sb.version,
        state: VolumeState::Clean,
        incompat: sb.incompat & !(INCOMPAT_JOURNAL | INCOMPAT_GROW),
        ro_compat: sb.ro_compat,
        compat: sb.compat,
        generation: sb.generation,
        layout,
        layout_flags: 0,
        uuid: sb.uuid,
        carrier_index: k as u32,
        carrier_count: sb.carrier_count,
        members: sb.members.clone(),
        root: BlockRef::default(),
        bitmap_checksum: 0,
        created_unix_ns: super::now_ns(),
        journal: JournalFields::default(),
        member_paths: sb.member_paths.clone(),
    }
}

fn carrier_io(op: IoOp, offset: u64, len: usize) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { op, offset, len: len as u64, source }
}

/// Writes both slots of `sb` on `carrier` (a member that is not in use yet) and, unless the
/// `MemberBeforeZeros` mutant skips it, the barrier that makes them and every write before
/// them on this carrier durable.
pub(crate) fn write_identity(carrier: &dyn Carrier, sb: &Superblock, barrier: bool) -> Result<()> {
    for slot in 0..2u8 {
        let mut buf = Io::buffer(SUPERBLOCK_LEN);
        buf.as_mut_slice().copy_from_slice(&sb.encode(slot));
        let at = superblock::slot_offset(slot);
        carrier.write_all_at(buf.as_slice(), at).map_err(carrier_io(
            IoOp::Write,
            at,
            SUPERBLOCK_LEN,
        ))?;
    }
    if barrier {
        carrier.barrier().map_err(carrier_io(IoOp::Barrier, 0, 0))?;
    }
    Ok(())
}

/// Writes zeros over `[0, len)` of `carrier` (plain writes; the caller's barrier makes them
/// durable), reporting progress.
pub(crate) fn zero_fill(
    carrier: &dyn Carrier,
    len: u64,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<()> {
    const CHUNK: usize = 8 << 20;
    let zeros = Io::buffer(CHUNK);
    let mut at = 0;
    while at < len {
        let n = (len - at).min(CHUNK as u64) as usize;
        carrier.write_all_at(&zeros.as_slice()[..n], at).map_err(carrier_io(IoOp::Write, at, n))?;
        at += n as u64;
        if let Some(report) = progress {
            report(at, len);
        }
    }
    Ok(())
}

/// The capacity in blocks `carrier` gives a member of a volume of `block_size`, checked: its
/// alignment must suit the volume, and it must hold the smallest member.
fn member_blocks(
    carrier: &dyn Carrier,
    path: Option<&Path>,
    k: usize,
    block_size: u32,
) -> Result<u64> {
    let g = carrier.geometry();
    if !block_size.is_multiple_of(g.offset_align.max(1)) || g.mem_align as usize > IO_ALIGN {
        return Err(member_error(path, k, MemberProblem::Alignment { block_size }));
    }
    let bs = u64::from(block_size);
    let blocks = g.len_bytes / bs / 64 * 64;
    let min = Layout::min_member_blocks(block_size);
    if blocks < min {
        return Err(member_error(
            path,
            k,
            MemberProblem::TooSmall { bytes: g.len_bytes, min_bytes: min * bs },
        ));
    }
    Ok(blocks)
}

/// Refuses a carrier that already holds a superblock: a member of this volume
/// (`AlreadyMember`) or of another (`OtherVolume`).
fn check_unused(
    carrier: &dyn Carrier,
    sb: &Superblock,
    path: Option<&Path>,
    k: usize,
) -> Result<()> {
    match identity(carrier)? {
        Some(id) if id.uuid == sb.uuid => {
            Err(member_error(path, k, MemberProblem::AlreadyMember { index: id.carrier_index }))
        }
        Some(id) => Err(member_error(path, k, MemberProblem::OtherVolume { volume: id.uuid })),
        None => Ok(()),
    }
}

/// The checks every new carrier passes (add and replace): it holds no superblock of any
/// volume, and its alignment and size suit a member. Returns the blocks it can hold.
fn admit(carrier: &dyn Carrier, sb: &Superblock, path: Option<&Path>, k: usize) -> Result<u64> {
    check_unused(carrier, sb, path, k)?;
    member_blocks(carrier, path, k, sb.layout.block_size)
}

/// The member table and paths of `sb` with one more member of `blocks` blocks at `path`;
/// refuses a full table or paths that do not fit.
fn with_member(
    sb: &Superblock,
    blocks: u64,
    path: Option<&Path>,
    first_path: Option<&Path>,
) -> Result<Superblock> {
    let k = sb.members.len();
    if k >= MAX_MEMBERS {
        return Err(member_error(path, k, MemberProblem::TooMany { max: MAX_MEMBERS }));
    }
    let uuid =
        Uuid::random().map_err(|source| Error::Open { path: "/dev/urandom".into(), source })?;
    let mut next = sb.clone();
    next.generation += 1;
    next.carrier_count += 1;
    next.members.push(Member { uuid, capacity_blocks: blocks });
    next.member_paths.resize(k, Vec::new());
    if next.member_paths[0].is_empty() {
        next.member_paths[0] = path_bytes(first_path);
    }
    next.member_paths.push(path_bytes(path));
    next.state = VolumeState::Dirty;
    next.bitmap_checksum = 0;
    check_paths(&next, path, k)?;
    Ok(next)
}

fn check_paths(sb: &Superblock, path: Option<&Path>, k: usize) -> Result<()> {
    let bytes = superblock::encode_paths(&sb.member_paths, sb.carrier_count).len();
    let too_long = sb.member_paths.iter().any(|p| p.len() > usize::from(u16::MAX));
    if bytes > PATHS_MAX || too_long {
        return Err(member_error(path, k, MemberProblem::PathTable { bytes, max: PATHS_MAX }));
    }
    Ok(())
}

/// The members after the first of a new volume whose member 0 superblock is `sb`: their
/// table entries and paths (their superblock pairs are written by the caller, durable before
/// member 0's first commit names them).
pub(crate) fn format_members(
    sb: &mut Superblock,
    first_path: Option<&Path>,
    others: &[(&dyn Carrier, Option<&Path>)],
) -> Result<()> {
    for &(carrier, path) in others {
        let k = sb.members.len();
        let blocks = member_blocks(carrier, path, k, sb.layout.block_size)?;
        let mut next = with_member(sb, blocks, path, first_path)?;
        next.generation = sb.generation;
        next.state = sb.state;
        *sb = next;
    }
    if sb.carrier_count > 1 && sb.layout_flags != 0 {
        return Err(member_error(first_path, 0, MemberProblem::NotPreallocated));
    }
    sb.geometry_checked()?;
    Ok(())
}

/// Adds `new` as the volume's next member, online (see the module docs). `zeroed`: the
/// carrier was created zero-filled and durable (a new preallocated file), so step 2 writes
/// only its superblocks.
pub(crate) fn add_member(
    inner: &Inner,
    new: MemberCarrier,
    zeroed: bool,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<()> {
    inner.writable()?;
    let mut meta = inner.meta();
    let path = new.path.as_deref();
    let k = meta.sb.members.len();
    if meta.sb.layout_flags != 0 {
        return Err(member_error(path, k, MemberProblem::NotPreallocated));
    }
    let blocks = admit(new.carrier.as_ref(), &meta.sb, path, k)?;
    let first_path = meta.first_path.clone();
    // The table must take the member (count, path table) before the growth below changes
    // anything; it is built again after it, from the grown superblock.
    with_member(&meta.sb, blocks, path, first_path.as_deref())?;
    // 1. Member 0 reaches its cap first: the block space has no hole.
    if meta.sb.carrier_count == 1 && meta.sb.layout.can_grow() {
        let cap = meta.sb.layout.max_blocks;
        grow::grow_to(inner, &mut meta, cap).inspect_err(|e| inner.poison(e))?;
    }
    let sb = with_member(&meta.sb, blocks, path, first_path.as_deref())?;
    let geometry = sb.geometry_checked()?;
    let span = geometry.spans[k];
    // 2. Zeros and identity, durable on the new carrier before anything names it.
    let barrier = inner.options.mutation() != Some(CommitMutation::MemberBeforeZeros);
    if !zeroed {
        zero_fill(new.carrier.as_ref(), span.layout.capacity_bytes(), progress)?;
    }
    write_identity(new.carrier.as_ref(), &member_superblock(&sb, k), barrier)?;
    // 3. The member joins the IO layer, then member 0's table names it.
    inner.io.add_member(new.carrier, span)?;
    {
        let session = inner.io.session()?;
        checkpoint::flip(&session, &sb, Barriers::BOTH).inspect_err(|e| inner.poison(e))?;
    }
    tracing::info!(member = k, blocks, path = ?path, "member added");
    let fixed = BlockRange { start: span.base, len: span.layout.image.start };
    meta.alloc.add_member(geometry.layout(), fixed);
    meta.sb = sb;
    Ok(())
}

/// Replaces member `k` by a copy on `new` (see the module docs). Member 0 holds the commit
/// point and is replaced offline by copying its carrier byte for byte instead.
pub(crate) fn replace_member(
    inner: &Inner,
    k: usize,
    new: MemberCarrier,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<()> {
    inner.writable()?;
    let mut meta = inner.meta();
    let path = new.path.as_deref();
    let count = meta.sb.members.len();
    if k == 0 || k >= count {
        return Err(member_error(
            path,
            k,
            MemberProblem::Missing {
                index: k as u32,
                why: if k == 0 {
                    "member 0 is replaced offline: copy its carrier byte for byte and open the copy"
                        .to_owned()
                } else {
                    format!("the volume has {count} members")
                },
            },
        ));
    }
    let block_size = meta.sb.layout.block_size;
    let have = admit(new.carrier.as_ref(), &meta.sb, path, k)?;
    let blocks = meta.sb.members[k].capacity_blocks;
    if have < blocks {
        let bs = u64::from(block_size);
        return Err(member_error(
            path,
            k,
            MemberProblem::TooSmall { bytes: have * bs, min_bytes: blocks * bs },
        ));
    }
    // Everything so far durable, so the copy holds it.
    checkpoint::checkpoint(inner, &mut meta, VolumeState::Dirty)?;
    let mut sb = meta.sb.clone();
    sb.generation += 1;
    sb.members[k].uuid =
        Uuid::random().map_err(|source| Error::Open { path: "/dev/urandom".into(), source })?;
    sb.member_paths.resize(count, Vec::new());
    if sb.member_paths[0].is_empty() {
        sb.member_paths[0] = path_bytes(meta.first_path.as_deref());
    }
    sb.member_paths[k] = path_bytes(path);
    check_paths(&sb, path, k)?;
    let len = blocks * u64::from(block_size);
    let identity = member_superblock(&sb, k);
    let shown = path.map(Path::to_owned);
    inner.io.replace_carrier(k, new.carrier, |table, new| {
        let path = shown.as_deref();
        crate::io::flush_late(inner.io.as_ref(), table)?;
        let old = table.carrier(k);
        // The member's superblock slots are not copied: until its own identity is written,
        // the copy is nobody's member (a cut mid-copy must not leave a second carrier that
        // claims member k with half its bytes, nor one a retry refuses as in use).
        copy(old, new, SUPERBLOCKS_LEN, len, progress)?;
        verify(old, new, SUPERBLOCKS_LEN, len, path, k)?;
        write_identity(new, &identity, true)?;
        // The switch: member 0's superblock names the copy.
        flip_direct(table.carrier(0), &sb).inspect_err(|e| inner.poison(e))
    })?;
    tracing::info!(member = k, path = ?path, "member replaced");
    meta.sb = sb;
    Ok(())
}

/// Copies `[start, len)` of `from` to `to` in large chunks, then a barrier on `to`.
fn copy(
    from: &dyn Carrier,
    to: &dyn Carrier,
    start: u64,
    len: u64,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<()> {
    const CHUNK: usize = 8 << 20;
    let mut buf = Io::buffer(CHUNK);
    let mut at = start;
    while at < len {
        let n = (len - at).min(CHUNK as u64) as usize;
        let b = &mut buf.as_mut_slice()[..n];
        from.read_exact_at(b, at).map_err(carrier_io(IoOp::Read, at, n))?;
        to.write_all_at(b, at).map_err(carrier_io(IoOp::Write, at, n))?;
        at += n as u64;
        if let Some(report) = progress {
            report(at, len);
        }
    }
    to.barrier().map_err(carrier_io(IoOp::Barrier, 0, 0))
}

/// Reads `[start, len)` of both carriers back and compares them.
fn verify(
    a: &dyn Carrier,
    b: &dyn Carrier,
    start: u64,
    len: u64,
    path: Option<&Path>,
    k: usize,
) -> Result<()> {
    const CHUNK: usize = 8 << 20;
    let mut x = Io::buffer(CHUNK);
    let mut y = Io::buffer(CHUNK);
    let mut at = start;
    while at < len {
        let n = (len - at).min(CHUNK as u64) as usize;
        a.read_exact_at(&mut x.as_mut_slice()[..n], at).map_err(carrier_io(IoOp::Read, at, n))?;
        b.read_exact_at(&mut y.as_mut_slice()[..n], at).map_err(carrier_io(IoOp::Read, at, n))?;
        if let Some(i) = (0..n).find(|&i| x.as_slice()[i] != y.as_slice()[i]) {
            return Err(member_error(
                path,
                k,
                MemberProblem::CopyMismatch { offset: at + i as u64 },
            ));
        }
        at += n as u64;
    }
    Ok(())
}

/// Member 0's superblock flip written straight to its carrier (the IO layer is held
/// exclusively): slot `(G+1) mod 2`, barrier, the other slot, barrier.
fn flip_direct(carrier: &dyn Carrier, sb: &Superblock) -> Result<()> {
    let first = superblock::first_slot(sb.generation);
    for slot in [first, 1 - first] {
        let mut buf = Io::buffer(SUPERBLOCK_LEN);
        buf.as_mut_slice().copy_from_slice(&sb.encode(slot));
        let at = superblock::slot_offset(slot);
        carrier.write_all_at(buf.as_slice(), at).map_err(carrier_io(
            IoOp::Write,
            at,
            SUPERBLOCK_LEN,
        ))?;
        carrier.barrier().map_err(carrier_io(IoOp::Barrier, 0, 0))?;
    }
    Ok(())
}
