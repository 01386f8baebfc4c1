//! The engine's one error type.
//!
//! Every variant says what the caller can do about it: retry elsewhere (`Locked`), reopen
//! (`Poisoned`), free space (`NoSpace`), upgrade the build (`Unsupported`), restore from a copy
//! (`Corrupt`), or fix the request (`NotFound`, `InvalidName`, ...). Variants carry structured
//! context; nothing here is matched by text.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// `Result` with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the engine was doing when a carrier call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    Read,
    Write,
    DurableWrite,
    Barrier,
    Grow,
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
    Bitmap,
    Journal,
    /// A metadata block of the checkpoint image (root, spine or record block).
    Image,
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
    Checksum { stored: u32, computed: u32 },
    /// A field holds a value that the format does not allow there.
    BadValue { field: &'static str, value: u64 },
    /// A structure ends before its declared length.
    Truncated { needed: u64, available: u64 },
    /// The image references something that does not exist or is out of place.
    Dangling { what: &'static str, id: u64 },
    /// One block is claimed by two owners.
    DoubleUse { block: u64 },
    /// Two records claim the same identity (inode, name, extent range).
    Duplicate { what: &'static str, id: u64 },
    /// The namespace graph is not a tree rooted at the root directory.
    NotATree { ino: u64 },
    /// A block the image needs lies outside the regions that may hold it.
    OutOfRange { block: u64 },
    /// The two superblocks belong to different volumes.
    UuidMismatch,
    /// The newest superblock's image is damaged and no older complete commit may be adopted.
    ImageDamaged { generation: u64 },
    /// A clean volume's bitmap marks a block free that its image uses.
    BitmapMissesBlock { block: u64 },
    /// Journal batch `missing` does not verify, but batch `found`, written only after
    /// `missing` was durable, does: damage, not a torn tail (nothing after the damage is
    /// replayed, and open refuses rather than drop acknowledged commits).
    JournalGap { missing: u64, found: u64 },
    /// A verified journal record cannot be applied to the namespace it follows.
    JournalRecord { sequence: u64, what: &'static str },
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
    Version { found: u32, supported: u32 },
    /// Incompatible feature bits this build does not know.
    IncompatFeatures(u64),
    /// A state value the format does not define.
    UndefinedState(u32),
    /// A reserved field or reserved flag bits are non-zero.
    ReservedNonZero { field: &'static str },
    /// The journal fields are set while the journal feature bit is not.
    JournalInUse,
    /// More than one carrier, or a carrier index other than 0.
    MultiCarrier { index: u32, count: u32 },
    /// A block size outside 4096..=65536 or not a power of two.
    BlockSize(u32),
    /// An unknown record tag or flag bits in a metadata record.
    RecordKind { table: &'static str, tag: u64 },
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
                write!(f, "carrier {index} of {count} (this build supports one carrier)")
            }
            Unsupported::BlockSize(b) => write!(f, "block size {b}"),
            Unsupported::RecordKind { table, tag } => write!(f, "{table} record kind {tag:#x}"),
        }
    }
}

/// A volume knob as named in the design (the orthogonal knobs table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    Preallocation,
    Sparseness,
    DirectIo,
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
    NameTooLong { len: usize, max: usize },
    /// An attribute key that is empty or longer than the format's limit.
    AttributeKey { len: usize, max: usize },
    /// A capacity too small for the layout, or too large for the format.
    Capacity { bytes: u64 },
    /// A block size outside 4096..=65536, not a power of two, or not a multiple of the
    /// carrier's direct-IO alignment.
    BlockSize { bytes: u32 },
    /// An offset or length past the largest file size the format can describe.
    FileTooLarge { bytes: u64 },
    /// A rename that would move a directory into its own subtree, or onto a non-empty one.
    Rename,
    /// The carrier is smaller than the volume's recorded capacity.
    CarrierTooSmall { carrier_bytes: u64, volume_bytes: u64 },
    /// A journal needs a reserved region of at least `min` blocks; the volume has `blocks`
    /// (the region is chosen at format time and cannot grow).
    JournalRegion { blocks: u64, min: u64 },
    /// The journal is already on.
    JournalEnabled,
    /// A growth cap below the initial capacity.
    MaxSize { max_bytes: u64, capacity_bytes: u64 },
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
        op: IoOp,
        offset: u64,
        len: u64,
        #[source]
        source: io::Error,
    },
    /// The carrier could not be opened or created.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Another opener (this or another process) holds the volume's lock.
    #[error("{} is locked by another opener", path.display())]
    Locked { path: PathBuf },
    /// The block device is in use by the kernel (mounted, or opened exclusively).
    #[error("{} is busy (mounted or opened exclusively elsewhere)", path.display())]
    DeviceBusy { path: PathBuf },
    /// Formatting would overwrite a device or file that does not look empty.
    #[error("{} does not look empty; pass force to format it anyway", path.display())]
    NotEmpty { path: PathBuf },
    /// Neither superblock carries the Vellum magic: this is not a volume.
    #[error("not a Vellum volume (no valid superblock magic)")]
    NotAVolume,
    /// Bytes on the carrier are damaged.
    #[error("{region} is corrupt at byte {offset}: {reason}")]
    Corrupt { region: Region, offset: u64, reason: Corruption },
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
    KnobMeaningless { knob: Knob, medium: &'static str },
    #[error("{} not found", String::from_utf8_lossy(path))]
    NotFound { path: Vec<u8> },
    #[error("{} already exists", String::from_utf8_lossy(path))]
    AlreadyExists { path: Vec<u8> },
    #[error("{} is not a directory", String::from_utf8_lossy(path))]
    NotADirectory { path: Vec<u8> },
    #[error("{} is a directory", String::from_utf8_lossy(path))]
    IsADirectory { path: Vec<u8> },
    #[error("{} is not empty", String::from_utf8_lossy(path))]
    DirectoryNotEmpty { path: Vec<u8> },
    /// The request itself is malformed.
    #[error("invalid request: {0}")]
    Invalid(Invalid),
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
