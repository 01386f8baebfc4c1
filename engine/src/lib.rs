//! # Vellum engine: the virtual volume
#![warn(missing_docs)]
//!
//! A self-describing file system that Vellum lays out itself inside one or more carriers:
//! preallocated files or raw block devices (or memory). Durability, allocation and naming are
//! constructed by its own structures instead of probed from the host file system:
//!
//! ```text
//! [superblock A | superblock B] [bitmap] [journal] [image] [data]
//! ```
//!
//! A volume of several members (`Volume::format_members`, `Volume::add_member`) concatenates
//! them into one block space (not mirrored): member 0 holds the journal and the commit point,
//! each later member its own superblock pair and bitmap (FORMAT.md, "Members").
//!
//! - `media`: the one door above the engine (docs/MEDIA.md): the facade over `local://`,
//!   `memory:`, `virtual://` and `s3://`, where a volume lives (`Location`) and how one is
//!   opened or created; crates above the engine name carriers only through it.
//! - `carrier`: the byte stores a volume lives on, with direct IO, write-through
//!   (`pwritev2(RWF_DSYNC)`) and barriers; a fault-injecting carrier models power loss for
//!   tests (feature `test-util`, re-exported for other crates' tests as `testing`).
//! - `io`: the one IO layer every carrier call goes through (areas, alignment, counts,
//!   poisoning), with the member table (which carrier holds which blocks), the volume's own
//!   page cache and its writeback thread.
//! - `superblock`, `layout`, `bitmap`: the fixed regions.
//! - `chain`, `records`, `image`: metadata as fixed-length records in checksummed block chains.
//! - `journal`: the metadata journal (a ring of checksummed batches of operation records).
//! - `namespace`, `file`: directories, files, extents, attributes.
//! - `volume`: format, open (adopt -> replay -> reconcile), commits (one journal batch, or a
//!   checkpoint: the copy-on-write image and two superblock flips), the data path.
//!
//! `docs/FORMAT.md` is the normative byte-level specification; the code derives every offset
//! from it and checks sizes at compile time.
//!
//! ```
//! use vellum_engine::{FormatOptions, Volume, VolumeOptions};
//! use vellum_engine::carrier::MemoryCarrier;
//!
//! let carrier = Box::new(MemoryCarrier::new(16 << 20));
//! let volume = Volume::format(carrier, &FormatOptions::default(), VolumeOptions::default())?;
//! volume.create_dir("/logs")?;
//! let file = volume.create_file("/logs/0001")?;
//! file.preallocate(0, 1 << 20)?; // written, non-sparse blocks
//! volume.commit()?;              // two barriers, whatever changed
//! file.write_at(b"entry", 0)?;   // an in-place overwrite: no commit needed
//! assert_eq!(&file.read_to_end()?[..5], b"entry");
//! # Ok::<(), vellum_engine::Error>(())
//! ```

/// The on-disk structures: public with the `internals` feature (fuzzing, decoder tests, raw
/// inspection), crate-private otherwise.
macro_rules! internal {
    ($($name:ident),*) => {$(
        #[cfg(feature = "internals")]
        #[allow(missing_docs)] // not an API: each module's header documents its format
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unreachable_pub)]
        pub(crate) mod $name;
    )*};
}

internal!(bitmap, chain, format, image, journal, namespace, records, superblock);
mod aligned;
pub mod carrier;
pub mod error;
mod io;
pub mod layout;
pub mod media;
pub mod metric_names;
mod sync;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
mod volume;

pub use aligned::AlignedBuf;
pub use error::{Error, Result};
pub use format::consts::Uuid;
pub use io::IoCounts;
pub use io::{CacheStats, cache_metric_names};
pub use journal::ReplayReport;
#[cfg(feature = "test-util")]
pub use volume::CommitMutation;
/// Both superblock slots of a carrier, read and decoded (raw inspection, with `internals`).
#[cfg(feature = "internals")]
pub use volume::read_slots;
pub use volume::{
    CheckReport, DEFAULT_CACHE_BYTES, DirEntry, ExtentInfo, File, FileKind, Finding, FindingKind,
    FormatOptions, IoPolicy, JournalInfo, MemberCarrier, MemberInfo, Metadata, OpenReport, Opener,
    SlotStatus, Tier, Volume, VolumeInfo, VolumeOptions, WriteConcurrency, check, check_members,
    default_journal_bytes, gather_members,
};
