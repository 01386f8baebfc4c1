//! The raft store's one error type (the adapters map it to their openraft version's storage
//! errors: `v09::storage_error`, `io::Error` for 0.10).

use std::sync::Arc;

/// What went wrong in the raft store. Variants say what the caller can do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The volume refused or failed (see the engine's error for the action).
    #[error(transparent)]
    Volume(#[from] vellum_engine::Error),
    /// The log is damaged where no crash can have left it (mid-log, or in a sealed segment):
    /// the store refuses to open rather than silently drop acknowledged entries.
    #[error("raft log file {file} is corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        file: String,
        /// Where in it.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// An earlier durable write failed; reopen the store.
    #[error("an earlier log write failed; reopen the store: {0}")]
    Poisoned(Arc<Error>),
    /// The store was closed.
    #[error("the raft store is closed")]
    Closed,
    /// The log hosts no group of this id (never created, or dropped): create it first.
    #[error("the raft log hosts no group {0}")]
    UnknownGroup(u64),
    /// A group of this id exists already: open it with `LogCore::group` instead.
    #[error("the raft log hosts group {0} already")]
    GroupExists(u64),
    /// One entry does not fit into a segment: that append alone is refused (nothing was
    /// queued or written, the log keeps working). Propose smaller entries.
    #[error("an entry of {len} bytes is larger than the {max} bytes one log segment holds")]
    EntryTooLarge {
        /// The entry's encoded size.
        len: usize,
        /// The largest the log holds (`max_entry_bytes`).
        max: u64,
    },
    /// The log's files use a format newer than this build reads: upgrade, do not rewrite.
    #[error("raft log file {file} uses {what} ({found}); this build cannot read it")]
    Unsupported {
        /// The file.
        file: String,
        /// What is too new (a format version, flags).
        what: &'static str,
        /// The value found.
        found: u64,
    },
    /// The carrier's physical sector is larger than the log's write alignment, so a torn
    /// write could damage an acknowledged frame: use a carrier with sectors of at most 4 KiB.
    #[error(
        "the carrier writes {sector}-byte physical sectors; the raft log needs {align} bytes \
         or less"
    )]
    SectorTooLarge {
        /// The carrier's physical sector size.
        sector: u32,
        /// The log's write alignment.
        align: usize,
    },
    /// No spare segment could be prepared (the maker keeps retrying; the metric
    /// `vellum_log_spare_failures_total` counts its attempts): usually the volume is full.
    #[error("no spare log segment is ready: {0}")]
    NoSpare(SharedError),
    /// The store belongs to another node: start it with that node's id (a store never
    /// changes owner).
    #[error("this raft store belongs to node {volume_node}, not to node {asked}")]
    WrongMember {
        /// The node the store belongs to.
        volume_node: u64,
        /// The node id it was opened as.
        asked: u64,
    },
    /// A peer presented another incarnation than the one this member recorded for it: one of
    /// the two lost its state (or two processes share an id). Its messages are refused.
    #[error(
        "node {peer} presented incarnation {presented}, but this member knows it as \
         {known}: that member lost its state"
    )]
    PeerConflict {
        /// The peer's node id.
        peer: u64,
        /// The incarnation this member recorded for it.
        known: crate::member::Incarnation,
        /// The one it presented.
        presented: crate::member::Incarnation,
    },
    /// The log writer panicked (a bug, reported with the panic message on stderr): every
    /// write after it fails; reopen the store.
    #[error("the raft log writer panicked (a bug); reopen the store")]
    WriterPanicked,
    /// An append that would leave a hole or reach before the log's first entry, entries that
    /// are not consecutive, or an index outside the log: refused, the log unchanged.
    #[error("log index {index} is outside the log ({first}..={last})")]
    OutOfRange {
        /// The index asked for.
        index: u64,
        /// The log's first index.
        first: u64,
        /// Its last index.
        last: u64,
    },
    /// A value could not be encoded.
    #[error("encoding failed: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    /// Stored bytes could not be decoded.
    #[error("decoding failed: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// The volume is too small for the log: use a volume of at least `min` bytes (with
    /// segments derived from the volume, [`MIN_VOLUME_BYTES`](crate::MIN_VOLUME_BYTES)), or
    /// smaller segments (`LogConfig::segment_bytes`).
    #[error(
        "the volume holds {capacity} bytes; the raft store needs a volume of at least {min} \
         bytes (or smaller log segments)"
    )]
    VolumeTooSmall {
        /// The volume's capacity.
        capacity: u64,
        /// The smallest capacity that works with this log's segment size.
        min: u64,
    },
    /// A configuration value is unusable.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
    /// The volume's metadata journal was found destroyed (the engine opened the volume at
    /// its last checkpoint, and its loss flag is set): segments created or removed since then
    /// may be gone with acknowledged entries in them, so the log may be rolled back. A member
    /// must never serve such a log as the member it was: remove it from the cluster and
    /// rejoin the machine as a new member on a fresh volume (docs/OPERATIONS.md, "A member
    /// whose volume rolled back").
    #[error(
        "the volume's metadata journal was destroyed (records from journal sequence \
         {lost_from} on may be lost), so this raft log may have lost acknowledged entries: \
         treat this member as lost: remove it from the cluster (vellum cluster remove ID) \
         and rejoin the machine as a new member, with a new id, on a fresh volume"
    )]
    VolumeRolledBack {
        /// The first journal sequence that may be lost.
        lost_from: u64,
    },
    /// A snapshot is restored only into a store with no raft state (no vote, no log, no
    /// applied state, no snapshot): restoring over state could roll back a live member.
    #[error(
        "the volume already holds raft state ({what}): a snapshot is restored only into a new volume"
    )]
    HasRaftState {
        /// What state was found.
        what: &'static str,
    },
    /// The snapshot to restore is not one: it does not decode, or its meta and data disagree.
    #[error("not a restorable snapshot: {0}")]
    BadSnapshot(String),
}

/// `Result` with the raft store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A shareable error (one failed write fails many queued callers).
pub type SharedError = Arc<Error>;

impl Error {
    /// Wraps a shared error for one more caller.
    pub fn shared(e: &SharedError) -> Error {
        match &**e {
            Error::Poisoned(inner) => Error::Poisoned(Arc::clone(inner)),
            _ => Error::Poisoned(Arc::clone(e)),
        }
    }
}

/// The error a `LogFlushed` callback carries (openraft wants an `io::Error`).
#[derive(Debug)]
pub struct LogIoError(pub SharedError);

impl std::fmt::Display for LogIoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for LogIoError {}
