//! The engine's one error type.
//!
//! Every variant says what the caller can do about it: retry elsewhere (`Locked`), reopen
//! (`Poisoned`), free space (`NoSpace`), upgrade the build (`Unsupported`), restore from a copy
//! (`Corrupt`), or fix the request (`NotFound`, `InvalidName`, ...). Variants carry structured
//! context; nothing here is matched by text.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::format::consts::Uuid;

/// `Result` with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the engine was doing when a carrier call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// A read.
    Read,
    /// A write that is not durable on return.
    Write,
    /// A write-through write: durable when it returns.
    DurableWrite,
    /// A barrier: a cache flush of everything written before it.
    Barrier,
    /// Extending the carrier (auto-grow, thin allocation).
    Grow,
    /// Asking the carrier for its geometry.
    Probe,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::DurableWrite => "durable write",
            IoOp::Barrier => "barrier",
            IoOp::Grow => "grow",
            IoOp::Probe => "probe",
        })
    }
}

/// The on-disk region an error refers to (FORMAT.md section names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// Superblock slot 0 (A) or 1 (B).
    Superblock(u8),
    /// The allocation bitmap.
    Bitmap,
    /// The journal ring.
    Journal,
    /// A metadata block of the checkpoint image (root, spine or record block).
    Image,
    /// The data region: file contents.
    Data,
    /// The carrier as a whole (size, geometry).
    Carrier,
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Region::Superblock(0) => f.write_str("superblock A"),
            Region::Superblock(_) => f.write_str("superblock B"),
            Region::Bitmap => f.write_str("bitmap"),
            Region::Journal => f.write_str("journal"),
            Region::Image => f.write_str("metadata image"),
            Region::Data => f.write_str("data region"),
            Region::Carrier => f.write_str("carrier"),
        }
    }
}

/// Why bytes read from the carrier were rejected as damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// The magic number is wrong: this is not (or no longer) a Vellum structure.
    BadMagic,
    /// The stored checksum does not match the bytes.
    Checksum {
        /// The checksum the structure carries.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// A field holds a value that the format does not allow there.
    BadValue {
        /// The field, as FORMAT.md names it.
        field: &'static str,
        /// The value found there.
        value: u64,
    },
    /// A structure ends before its declared length.
    Truncated {
        /// Bytes the structure declares.
        needed: u64,
        /// Bytes there are.
        available: u64,
    },
    /// The image references something that does not exist or is out of place.
    Dangling {
        /// The kind of thing referenced (inode, extent, block, ...).
        what: &'static str,
        /// Its number.
        id: u64,
    },
    /// One block is claimed by two owners.
    DoubleUse {
        /// The block claimed twice.
        block: u64,
    },
    /// Two records claim the same identity (inode, name, extent range).
    Duplicate {
        /// The kind of record (inode, name, extent, ...).
        what: &'static str,
        /// Its identity (inode number, or the directory of the name).
        id: u64,
    },
    /// The namespace graph is not a tree rooted at the root directory.
    NotATree {
        /// An inode not reachable from the root.
        ino: u64,
    },
    /// A block the image needs lies outside the regions that may hold it.
    OutOfRange {
        /// The misplaced block.
        block: u64,
    },
    /// The two superblocks belong to different volumes.
    UuidMismatch,
    /// The newest superblock's image is damaged and no older complete commit may be adopted.
    ImageDamaged {
        /// The generation of the superblock whose image is damaged.
        generation: u64,
    },
    /// A clean volume's bitmap marks a block free that its image uses.
    BitmapMissesBlock {
        /// The block the image uses.
        block: u64,
    },
    /// Journal batch `missing` does not verify, but batch `found`, written only after
    /// `missing` was durable, does: damage, not a torn tail (nothing after the damage is
    /// replayed, and open refuses rather than drop acknowledged commits).
    JournalGap {
        /// The sequence of the batch that does not verify.
        missing: u64,
        /// The sequence of a later batch that does.
        found: u64,
    },
    /// A verified journal record cannot be applied to the namespace it follows.
    JournalRecord {
        /// The sequence of the batch holding the record.
        sequence: u64,
        /// Why the record does not apply.
        what: &'static str,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::BadMagic => f.write_str("bad magic number"),
            Corruption::Checksum { stored, computed } => {
                write!(f, "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")
            }
            Corruption::BadValue { field, value } => write!(f, "field {field} holds {value}"),
            Corruption::Truncated { needed, available } => {
                write!(f, "truncated: needs {needed} bytes, {available} available")
            }
            Corruption::Dangling { what, id } => write!(f, "{what} {id} references nothing"),
            Corruption::DoubleUse { block } => write!(f, "block {block} is used twice"),
            Corruption::Duplicate { what, id } => write!(f, "{what} {id} appears twice"),
            Corruption::NotATree { ino } => write!(f, "inode {ino} is not reachable from the root"),
            Corruption::OutOfRange { block } => write!(f, "block {block} is outside its region"),
            Corruption::UuidMismatch => f.write_str("the superblocks belong to different volumes"),
            Corruption::ImageDamaged { generation } => {
                write!(f, "the image of generation {generation} is damaged")
            }
            Corruption::BitmapMissesBlock { block } => {
                write!(f, "the bitmap marks used block {block} free")
            }
            Corruption::JournalGap { missing, found } => write!(
                f,
                "journal batch {missing} is damaged but the later batch {found} is intact \
                 (acknowledged commits would be lost; restore from a copy)"
            ),
            Corruption::JournalRecord { sequence, what } => {
                write!(f, "journal batch {sequence} does not apply: {what}")
            }
        }
    }
}

/// Something on the carrier that this build refuses to interpret (unknown means refuse).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsupported {
    /// The format version is above the one this build supports.
    Version {
        /// The version on the carrier.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// Incompatible feature bits this build does not know.
    IncompatFeatures(u64),
    /// A state value the format does not define.
    UndefinedState(u32),
    /// A reserved field or reserved flag bits are non-zero.
    ReservedNonZero {
        /// The reserved field or flag word, as FORMAT.md names it.
        field: &'static str,
    },
    /// The journal fields are set while the journal feature bit is not.
    JournalInUse,
    /// A block address with bits 48..63 set (FORMAT.md, "Conventions": addresses are the
    /// members' concatenated block space, below 2^48).
    MultiCarrier {
        /// This carrier's index in the volume.
        index: u32,
        /// The volume's number of carriers.
        count: u32,
    },
    /// A block size outside 4096..=65536 or not a power of two.
    BlockSize(u32),
    /// An unknown record tag or flag bits in a metadata record.
    RecordKind {
        /// The kind of record table (inode, name, extent, ...).
        table: &'static str,
        /// The tag or flag bits found.
        tag: u64,
    },
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsupported::Version { found, supported } => {
                write!(f, "format version {found} (this build supports up to {supported})")
            }
            Unsupported::IncompatFeatures(bits) => write!(f, "incompatible features {bits:#x}"),
            Unsupported::UndefinedState(s) => write!(f, "undefined volume state {s}"),
            Unsupported::ReservedNonZero { field } => write!(f, "non-zero reserved field {field}"),
            Unsupported::JournalInUse => {
                f.write_str("journal fields set without the journal feature bit")
            }
            Unsupported::MultiCarrier { index, count } => {
                write!(f, "a block address in member {index} of {count} (addresses are below 2^48)")
            }
            Unsupported::BlockSize(b) => write!(f, "block size {b}"),
            Unsupported::RecordKind { table, tag } => write!(f, "{table} record kind {tag:#x}"),
        }
    }
}

/// What is wrong with a member carrier (see [`Error::Member`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemberProblem {
    /// The member table names member `index`, but its carrier cannot be opened (`path`
    /// shown), or the table records no path and none was given.
    Missing {
        /// The member's index.
        index: u32,
        /// Why it could not be opened.
        why: String,
    },
    /// The carrier holds a member of another volume.
    OtherVolume {
        /// The volume it belongs to.
        volume: Uuid,
    },
    /// The carrier is already member `index` of this volume (given twice, or the volume
    /// itself).
    AlreadyMember {
        /// The member it is.
        index: u32,
    },
    /// The carrier says it is member `found` where member `expected` belongs.
    IndexMismatch {
        /// The index the member table puts here.
        expected: u32,
        /// The index its superblock records.
        found: u32,
    },
    /// The carrier's member UUID is not the one the member table records (the old carrier
    /// of a replaced member, or another copy).
    Stale {
        /// The member's index.
        index: u32,
    },
    /// The carrier holds no superblock of this volume.
    NotAMember,
    /// The carrier is member `index` (not member 0) of a volume: open the volume by its first
    /// member.
    NotFirst {
        /// The member it is.
        index: u32,
        /// Member 0's carrier path, when this member's superblock records it.
        first: Option<String>,
    },
    /// The carrier is smaller than a member may be.
    TooSmall {
        /// The carrier's usable bytes.
        bytes: u64,
        /// The smallest member, in bytes.
        min_bytes: u64,
    },
    /// The volume has the most members the format allows.
    TooMany {
        /// The limit.
        max: usize,
    },
    /// The members' paths do not fit the superblock's path table.
    PathTable {
        /// Bytes the paths need.
        bytes: usize,
        /// Bytes the table holds.
        max: usize,
    },
    /// Members are added to preallocated volumes only (not thin or sparse).
    NotPreallocated,
    /// The carrier's direct-IO alignment does not divide the volume's block size.
    Alignment {
        /// The volume's block size.
        block_size: u32,
    },
    /// A copied member does not read back as written (`vellum carrier replace`).
    CopyMismatch {
        /// The first byte that differs.
        offset: u64,
    },
}

impl fmt::Display for MemberProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberProblem::Missing { index, why } => {
                write!(f, "member {index} of the volume is missing ({why})")
            }
            MemberProblem::OtherVolume { volume } => {
                write!(f, "belongs to another volume ({volume}); nothing was changed")
            }
            MemberProblem::AlreadyMember { index } => {
                write!(f, "is already member {index} of this volume; nothing was changed")
            }
            MemberProblem::IndexMismatch { expected, found } => {
                write!(f, "is member {found} where the member table puts member {expected}")
            }
            MemberProblem::Stale { index } => write!(
                f,
                "is not the carrier the member table records for member {index} (a replaced \
                 member's old carrier?)"
            ),
            MemberProblem::NotAMember => f.write_str("holds no member of this volume"),
            MemberProblem::NotFirst { index, first: Some(first) } => {
                write!(f, "is member {index} of a volume; open it by its member 0 ({first})")
            }
            MemberProblem::NotFirst { index, first: None } => {
                write!(f, "is member {index} of a volume; open it by its member 0")
            }
            MemberProblem::TooSmall { bytes, min_bytes } => {
                write!(f, "{bytes} bytes is smaller than a member may be ({min_bytes} bytes)")
            }
            MemberProblem::TooMany { max } => write!(f, "the volume has {max} members already"),
            MemberProblem::PathTable { bytes, max } => write!(
                f,
                "the members' paths take {bytes} bytes; the superblock holds {max} (use \
                 shorter paths)"
            ),
            MemberProblem::NotPreallocated => {
                f.write_str("a thin or sparse volume takes no members (format it preallocated)")
            }
            MemberProblem::Alignment { block_size } => {
                write!(f, "its direct-IO alignment does not divide the block size {block_size}")
            }
            MemberProblem::CopyMismatch { offset } => {
                write!(f, "the copy differs from the member at byte {offset}; nothing switched")
            }
        }
    }
}

/// A volume knob as named in the design (the orthogonal knobs table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    /// Blocks reserved on the carrier when they are allocated (not thin).
    Preallocation,
    /// Unwritten ranges left as holes instead of written zeros.
    Sparseness,
    /// Reads and writes that bypass the host's page cache (`O_DIRECT`).
    DirectIo,
    /// Writes durable when they return (`RWF_DSYNC`, or a device's flush).
    WriteThrough,
    /// The volume's own page cache (`cache_bytes`).
    Cache,
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Knob::Preallocation => "preallocation",
            Knob::Sparseness => "sparseness",
            Knob::DirectIo => "direct IO",
            Knob::WriteThrough => "write-through",
            Knob::Cache => "page cache",
        })
    }
}

/// A request the caller can fix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Invalid {
    /// A path that is not absolute or has an empty, `.` or `..` component.
    Path,
    /// A name with a `/` or NUL byte, or empty.
    Name,
    /// A name longer than the format's limit.
    NameTooLong {
        /// The name's length in bytes.
        len: usize,
        /// The longest name the format allows, in bytes.
        max: usize,
    },
    /// An attribute key that is empty or longer than the format's limit.
    AttributeKey {
        /// The key's length in bytes.
        len: usize,
        /// The longest key the format allows, in bytes.
        max: usize,
    },
    /// A capacity too small for the layout, or too large for the format.
    Capacity {
        /// The capacity asked for, in bytes.
        bytes: u64,
    },
    /// A block size outside 4096..=65536, not a power of two, or not a multiple of the
    /// carrier's direct-IO alignment.
    BlockSize {
        /// The block size asked for, in bytes.
        bytes: u32,
    },
    /// An offset or length past the largest file size the format can describe.
    FileTooLarge {
        /// The offset or end asked for, in bytes.
        bytes: u64,
    },
    /// A rename that would move a directory into its own subtree, or onto a non-empty one.
    Rename,
    /// The carrier is smaller than the volume's recorded capacity.
    CarrierTooSmall {
        /// The carrier's size in bytes.
        carrier_bytes: u64,
        /// The capacity the superblock records, in bytes.
        volume_bytes: u64,
    },
    /// A journal needs a reserved region of at least `min` blocks; the volume has `blocks`
    /// (the region is chosen at format time and cannot grow).
    JournalRegion {
        /// Blocks of the volume's reserved journal region.
        blocks: u64,
        /// Blocks a journal needs at least.
        min: u64,
    },
    /// The journal is already on.
    JournalEnabled,
    /// Files of more than one volume in a call that reads the files of one
    /// (`File::read_many`).
    ForeignFile,
    /// A growth cap below the initial capacity.
    MaxSize {
        /// The cap asked for, in bytes.
        max_bytes: u64,
        /// The initial capacity, in bytes.
        capacity_bytes: u64,
    },
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::Path => f.write_str("paths are absolute, without empty, '.' or '..' parts"),
            Invalid::Name => f.write_str("names are non-empty and contain no '/' or NUL"),
            Invalid::NameTooLong { len, max } => write!(f, "name of {len} bytes (max {max})"),
            Invalid::AttributeKey { len, max } => {
                write!(f, "attribute key of {len} bytes (1 to {max} allowed)")
            }
            Invalid::Capacity { bytes } => write!(f, "capacity of {bytes} bytes"),
            Invalid::BlockSize { bytes } => write!(f, "block size of {bytes} bytes"),
            Invalid::FileTooLarge { bytes } => write!(f, "file offset {bytes} is too large"),
            Invalid::Rename => {
                f.write_str("a directory cannot move into itself or onto a non-empty one")
            }
            Invalid::CarrierTooSmall { carrier_bytes, volume_bytes } => write!(
                f,
                "the carrier holds {carrier_bytes} bytes but the volume needs {volume_bytes}"
            ),
            Invalid::JournalRegion { blocks, min } => write!(
                f,
                "a journal needs a reserved region of at least {min} blocks and this volume \
                 reserves {blocks} (the region is chosen at format time: `--journal SIZE`)"
            ),
            Invalid::JournalEnabled => f.write_str("the journal is already enabled"),
            Invalid::ForeignFile => f.write_str("the files belong to more than one volume"),
            Invalid::MaxSize { max_bytes, capacity_bytes } => write!(
                f,
                "a maximum size of {max_bytes} bytes is below the initial capacity of \
                 {capacity_bytes} bytes"
            ),
        }
    }
}

/// The engine's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A carrier call failed; the volume is poisoned from here on.
    #[error("carrier {op} of {len} bytes at byte {offset} failed: {source}")]
    Io {
        /// What the engine was doing.
        op: IoOp,
        /// Byte offset on the carrier.
        offset: u64,
        /// Bytes of the request.
        len: u64,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The carrier could not be opened or created.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The carrier's path.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Another opener (this or another process) holds the volume's lock.
    #[error("{} is locked by another opener", path.display())]
    Locked {
        /// The carrier's path.
        path: PathBuf,
    },
    /// The block device is in use by the kernel (mounted, or opened exclusively).
    #[error("{} is busy (mounted or opened exclusively elsewhere)", path.display())]
    DeviceBusy {
        /// The device's path.
        path: PathBuf,
    },
    /// Formatting would overwrite a device or file that does not look empty.
    #[error("{} does not look empty; pass force to format it anyway", path.display())]
    NotEmpty {
        /// The carrier's path.
        path: PathBuf,
    },
    /// Neither superblock carries the Vellum magic: this is not a volume.
    #[error("not a Vellum volume (no valid superblock magic)")]
    NotAVolume,
    /// Bytes on the carrier are damaged.
    #[error("{region} is corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// The region holding the damage.
        region: Region,
        /// Byte offset of the damaged structure on the carrier.
        offset: u64,
        /// What is wrong with it.
        reason: Corruption,
    },
    /// The volume uses something this build does not support.
    #[error("volume uses {0}, which this build does not support")]
    Unsupported(Unsupported),
    /// The volume has no free block left.
    #[error("volume is full")]
    NoSpace,
    /// An earlier carrier write or barrier failed; nothing more is accepted until reopen.
    #[error("an earlier durable write failed; reopen the volume")]
    Poisoned,
    /// The volume was opened read-only (by request, or for unknown ro-compat features).
    #[error("volume is open read-only")]
    ReadOnly,
    /// The volume was closed; the handle is no longer usable.
    #[error("volume is closed")]
    Closed,
    /// A knob that has no physical meaning on this medium was requested.
    #[error("{knob} is physically meaningless on a {medium} carrier")]
    KnobMeaningless {
        /// The knob asked for.
        knob: Knob,
        /// The medium's name.
        medium: &'static str,
    },
    /// Nothing exists at this path of the volume.
    #[error("{} not found", String::from_utf8_lossy(path))]
    NotFound {
        /// The path in the volume, byte for byte.
        path: Vec<u8>,
    },
    /// Something exists at this path already.
    #[error("{} already exists", String::from_utf8_lossy(path))]
    AlreadyExists {
        /// The path in the volume, byte for byte.
        path: Vec<u8>,
    },
    /// A component of the path (or the target) is a file, not a directory.
    #[error("{} is not a directory", String::from_utf8_lossy(path))]
    NotADirectory {
        /// The path in the volume, byte for byte.
        path: Vec<u8>,
    },
    /// The path names a directory where a file is needed.
    #[error("{} is a directory", String::from_utf8_lossy(path))]
    IsADirectory {
        /// The path in the volume, byte for byte.
        path: Vec<u8>,
    },
    /// The directory to remove or replace has entries.
    #[error("{} is not empty", String::from_utf8_lossy(path))]
    DirectoryNotEmpty {
        /// The path in the volume, byte for byte.
        path: Vec<u8>,
    },
    /// A member of a multi-carrier volume is missing, foreign, duplicated or out of place
    /// (FORMAT.md, "Members"); `member` names its carrier (its path, or `member N`).
    #[error("{member}: {problem}")]
    Member {
        /// The member's carrier path, or `member N` when it has none.
        member: String,
        /// What is wrong with it.
        problem: MemberProblem,
    },
    /// The request itself is malformed.
    #[error("invalid request: {0}")]
    Invalid(Invalid),
    /// A media URL that does not parse or names no known medium (`media`).
    #[error("{url}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it, and how to write it.
        reason: String,
    },
    /// A medium cannot do this (a write before the end of an object, a rename that must be
    /// atomic on object storage, ...).
    #[error("{medium} cannot {op}: {why}")]
    NotSupported {
        /// The medium's scheme (`s3://`, `memory:`, ...).
        medium: &'static str,
        /// What was asked.
        op: &'static str,
        /// Why not, and what to do instead.
        why: &'static str,
    },
    /// A conditional write lost: the file exists (create-only) or its version moved on since
    /// the writer read it (a stale writer). Nothing was written.
    #[error("{path}: precondition failed: {why}")]
    PreconditionFailed {
        /// The file's path on its medium.
        path: String,
        /// Which condition failed.
        why: String,
    },
    /// A remote medium (object storage) failed a request.
    #[error("{url}: {kind}: {message}")]
    Remote {
        /// The URL (bucket and key) of the request, without credentials.
        url: String,
        /// What kind of failure, for a caller to act on.
        kind: RemoteFailure,
        /// The server's or the client's message.
        message: String,
    },
}

/// The kinds of failure of a remote medium.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteFailure {
    /// No answer: the endpoint is down, unreachable or timed out.
    Unreachable,
    /// The credentials were refused (missing, wrong, or not allowed).
    Unauthorized,
    /// The bucket does not exist.
    NoSuchBucket,
    /// The object does not exist.
    NotFound,
    /// The object's bytes are not what its manifest or checksum says.
    Corrupt,
    /// Anything else the server answered.
    Other,
}

impl fmt::Display for RemoteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RemoteFailure::Unreachable => "unreachable",
            RemoteFailure::Unauthorized => "credentials refused",
            RemoteFailure::NoSuchBucket => "no such bucket",
            RemoteFailure::NotFound => "not found",
            RemoteFailure::Corrupt => "corrupt",
            RemoteFailure::Other => "request failed",
        })
    }
}

impl Error {
    /// A corruption error at `offset` of `region`.
    pub(crate) fn corrupt(region: Region, offset: u64, reason: Corruption) -> Error {
        Error::Corrupt { region, offset, reason }
    }

    /// True when the error means the volume must be reopened before further use.
    pub fn is_poisoning(&self) -> bool {
        matches!(self, Error::Io { .. } | Error::Poisoned)
    }
}
