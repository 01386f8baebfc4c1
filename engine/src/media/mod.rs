//! Media: one facade over every place bytes can live (design brief, "One logical layout, two
//! carriers"; docs/MEDIA.md).
//!
//! Four media are peers behind one API, substitutable and never stacked:
//!
//! | URL                                   | medium            | what it is                          |
//! |---------------------------------------|-------------------|-------------------------------------|
//! | `local:///abs/path`                   | [`Medium::Local`]  | the host file system (interop)      |
//! | `memory:` / `memory:/path`            | [`Medium::Memory`] | one in-memory namespace per process |
//! | `virtual:///vol.vlm[:/path]`          | [`Medium::Virtual`]| a Vellum volume (the main form)     |
//! | `s3://bucket/prefix?endpoint=&region=`| [`Medium::Object`] | object storage (remote, archive)    |
//!
//! A bare path (no scheme) is not a URL: callers say what it means ([`Bare`]): the volume
//! commands and `vellum serve` take it as a volume (a file or a block device, as before the
//! facade), `vellum cp` as a host file.
//!
//! Invariants every medium keeps (the conformance suite in `engine/tests/media/` checks
//! them on all four):
//! - read-your-writes: what a [`MediaFile`] wrote reads back through the same handle, and
//!   through a new handle once `sync` or `close` returned;
//! - `sync`/`close` is the durability point: on `local://` an fdatasync (or write-through), on
//!   `virtual://` a volume commit, on `s3://` the completed upload; `memory:` keeps nothing
//!   past the process and says so ([`Medium::is_durable`]);
//! - a knob that is physically meaningless on a medium is an error when asked for
//!   ([`MediaOptions`], [`Medium::knob_support`]), never silently ignored;
//! - [`Media::put`] with [`PutMode::Create`] or [`PutMode::Update`] is a conditional write:
//!   a stale writer gets [`Error::PreconditionFailed`](crate::Error::PreconditionFailed), never a silent overwrite;
//! - rename is atomic where [`Media::rename_is_atomic`] says so (not on object storage:
//!   copy then delete); nothing in Vellum relies on it where it is not.

mod local;
mod location;
mod memory;
#[cfg(feature = "s3")]
mod s3;
#[cfg(feature = "test-util")]
pub mod testing;
mod url;
mod vol;

pub use location::{
    Location, create_carrier, is_block_device, looks_empty, open_carrier, open_or_create_volume,
    open_production_carrier, open_volume,
};
pub use url::{Bare, MediaUrl, S3Url};

/// The carrier types a user of volumes names (knobs, kinds, the carrier trait for offline
/// tools), re-exported so that crates above the engine never import the carrier module.
pub use crate::carrier::{Carrier, CarrierKind, CarrierOptions};
/// The carriers' metric names (writes, bytes, flushes, their durations: docs/METRICS.md).
pub use crate::metric_names::carrier as carrier_metric_names;

use std::fmt;
use std::sync::Arc;

use crate::error::{Knob, Result};

/// Which medium a facade speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Medium {
    /// The host file system (`local://`).
    Local,
    /// One in-memory namespace per process (`memory:`).
    Memory,
    /// A Vellum volume (`virtual://`, or a bare path where a volume is meant).
    Virtual,
    /// Object storage (`s3://`).
    Object,
}

impl Medium {
    /// The URL scheme, as users write it.
    pub fn scheme(self) -> &'static str {
        match self {
            Medium::Local => "local://",
            Medium::Memory => "memory:",
            Medium::Virtual => "virtual://",
            Medium::Object => "s3://",
        }
    }

    /// The medium's name in messages (`local`, `memory`, `virtual`, `s3`).
    pub fn name(self) -> &'static str {
        match self {
            Medium::Local => "local",
            Medium::Memory => "memory",
            Medium::Virtual => "virtual",
            Medium::Object => "s3",
        }
    }

    /// Rejects the knobs of `options` that are physically meaningless here
    /// ([`Error::KnobMeaningless`](crate::Error::KnobMeaningless)); an inherent knob asked
    /// for is fine (it is on anyway), and so is a knob explicitly turned off.
    pub fn check_knobs(self, options: &MediaOptions) -> Result<()> {
        for (knob, asked) in
            [(Knob::DirectIo, options.direct_io), (Knob::WriteThrough, options.write_through)]
        {
            if asked == Some(true) && self.knob_support(knob) == KnobSupport::Meaningless {
                return Err(crate::Error::KnobMeaningless { knob, medium: self.name() });
            }
        }
        Ok(())
    }

    /// True when what is written outlives the process.
    pub fn is_durable(self) -> bool {
        self != Medium::Memory
    }
}

impl fmt::Display for Medium {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.scheme())
    }
}

/// Open-time knobs of a medium: `None` takes the medium's default; `Some(true)` on a knob
/// the medium cannot honour is [`Error::KnobMeaningless`](crate::Error::KnobMeaningless).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaOptions {
    /// Open for reading only.
    pub read_only: bool,
    /// Bypass the host page cache (O_DIRECT).
    pub direct_io: Option<bool>,
    /// Writes durable when they return.
    pub write_through: Option<bool>,
}

/// What a file or directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A file (an object, on object storage).
    File,
    /// A directory (a common prefix, on object storage).
    Directory,
}

/// An opaque version of a file, for conditional writes: an ETag on object storage, a
/// content-and-time stamp elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub String);

/// What [`Media::stat`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// File or directory.
    pub kind: EntryKind,
    /// Bytes (0 for a directory).
    pub len: u64,
    /// The version a conditional write compares with (files only).
    pub version: Option<Version>,
    /// Last modification, nanoseconds after the Unix epoch, where the medium keeps it.
    pub modified_unix_ns: Option<u64>,
}

/// One entry of [`Media::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's full path on the medium (starting with `/`).
    pub path: String,
    /// File or directory.
    pub kind: EntryKind,
    /// Bytes (0 for a directory).
    pub len: u64,
}

/// How [`Media::put`] writes a whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// Replace whatever is there.
    Overwrite,
    /// Only if nothing is there (`If-None-Match: *`).
    Create,
    /// Only if the file is still at this version (`If-Match: ETAG`).
    Update(Version),
}

/// One open file of a medium. Offsets are bytes; a read past the end returns what there is
/// (0 at the end).
pub trait MediaFile: Send + Sync + fmt::Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize>;
    /// Writes all of `buf` at `offset` (object storage: only at the end, sequentially).
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Writes `buf` at the end; returns the offset it was written at.
    fn append(&self, buf: &[u8]) -> Result<u64>;
    /// Truncates or extends (with zeros) to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;
    /// The file's length in bytes, as this handle sees it.
    fn len(&self) -> Result<u64>;
    /// Whether the file holds no bytes.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Makes what was written durable (object storage: completes the upload).
    fn sync(&self) -> Result<()>;
    /// Syncs and releases the handle.
    fn close(self: Box<Self>) -> Result<()>;
}

/// One medium: a namespace of files and directories addressed by absolute paths (`/a/b`).
pub trait Media: Send + Sync + fmt::Debug {
    /// Which medium this is.
    fn medium(&self) -> Medium;
    /// What `knob` means here (the table in docs/MEDIA.md).
    fn knob_support(&self, knob: Knob) -> KnobSupport {
        self.medium().knob_support(knob)
    }
    /// Whether [`Media::rename`] is atomic (false on object storage: copy, then delete).
    fn rename_is_atomic(&self) -> bool {
        self.medium() != Medium::Object
    }
    /// Opens an existing file.
    fn open(&self, path: &str) -> Result<Box<dyn MediaFile>>;
    /// Creates a file, replacing one that is there (empty until written).
    fn create(&self, path: &str) -> Result<Box<dyn MediaFile>>;
    /// Creates a directory (object storage: nothing to do, prefixes need no creation).
    fn mkdir(&self, path: &str) -> Result<()>;
    /// Renames a file.
    fn rename(&self, from: &str, to: &str) -> Result<()>;
    /// Removes a file or an empty directory.
    fn remove(&self, path: &str) -> Result<()>;
    /// The entries under `dir` (one level; object storage: one delimiter level of the prefix).
    fn list(&self, dir: &str) -> Result<Vec<Entry>>;
    /// What is at `path`.
    fn stat(&self, path: &str) -> Result<Stat>;
    /// The file's attributes (extended attributes, volume attributes, object user metadata).
    fn attributes(&self, path: &str) -> Result<Vec<(String, Vec<u8>)>>;
    /// Writes a whole file in one step, conditionally; returns its new version.
    fn put(&self, path: &str, bytes: &[u8], mode: PutMode) -> Result<Version>;
    /// Reads a whole file with its version.
    fn get(&self, path: &str) -> Result<(Vec<u8>, Version)>;
}

pub use crate::carrier::KnobSupport;

impl Medium {
    /// What `knob` means on this medium: the table of docs/MEDIA.md, in code (a test holds
    /// the two together). The table's rows are the knobs of [`MediaOptions`] (direct IO,
    /// write-through); the volume knobs (preallocation, sparseness, page cache) are answered
    /// too: a volume has them all, memory is inherently preallocated, object storage has none.
    pub fn knob_support(self, knob: Knob) -> KnobSupport {
        use KnobSupport::{Implemented, Inherent, Meaningless};
        match (self, knob) {
            (Medium::Local | Medium::Virtual, _) => Implemented,
            (Medium::Memory, Knob::Preallocation) => Inherent,
            (Medium::Memory, _) => Meaningless,
            (Medium::Object, Knob::WriteThrough) => Inherent,
            (Medium::Object, _) => Meaningless,
        }
    }
}

/// A medium and a path on it: what a URL names.
#[derive(Debug, Clone)]
pub struct Target {
    /// The medium (shared: a `Target` clones cheaply).
    pub media: Arc<dyn Media>,
    /// The absolute path on it (`/` for the root; on `s3://`, `/` + the key).
    pub path: String,
}

/// Opens the medium `url` names.
pub fn open(url: &MediaUrl, options: MediaOptions) -> Result<Target> {
    match url {
        MediaUrl::Local(path) => {
            let path = std::path::absolute(path).map_err(|e| crate::Error::BadUrl {
                url: path.display().to_string(),
                reason: format!("cannot make the path absolute: {e}"),
            })?;
            Ok(Target { media: local::open(options)?, path: path.to_string_lossy().into_owned() })
        }
        MediaUrl::Memory(path) => Ok(Target { media: memory::open(options)?, path: path.clone() }),
        MediaUrl::Virtual { volume, path } => {
            Ok(Target { media: vol::open(volume, options)?, path: path.clone() })
        }
        #[cfg(feature = "s3")]
        MediaUrl::S3(s3) => {
            Ok(Target { media: s3::open(s3, options)?, path: format!("/{}", s3.key) })
        }
        #[cfg(not(feature = "s3"))]
        MediaUrl::S3(_) => Err(crate::Error::NotSupported {
            medium: "s3://",
            op: "open",
            why: "this build has no object storage (build vellum-engine with feature s3)",
        }),
    }
}

/// Parses `url` (a bare path means what `bare` says) and opens its medium.
pub fn open_str(url: &str, bare: Bare, options: MediaOptions) -> Result<Target> {
    open(&MediaUrl::parse(url, bare)?, options)
}
