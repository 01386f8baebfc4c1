//! Opening a node's storage: the volume with production knobs, the log, the state machine.
//!
//! [`StoreConfig`] is everything a one-call open needs ([`v010::open_store_at`](crate::v010)
//! or `v09::open_store_at`); [`open_volume`] and the adapters' `open_store` are its two steps,
//! for a caller that shares the volume with other data or opens it its own way.

use vellum_engine::media::{CarrierOptions, Location, open_or_create_volume};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};

use crate::error::Result;
use crate::kv::machine::{Flavor, KvMachine, KvReaderOf};
use crate::log::LogConfig;

/// How to open the store in one call: the volume to create when none exists, how to open
/// it, and the log's tuning. The default creates a journaled 1 GiB volume with segments
/// derived from its size (64 MiB); [`StoreConfig::with_volume_bytes`] picks another size.
///
/// ```
/// use vellum_raft_store::{LogConfig, MIN_VOLUME_BYTES, StoreConfig, VolumeOptions};
///
/// let small = StoreConfig::with_volume_bytes(MIN_VOLUME_BYTES);
/// assert_eq!(small.volume_bytes, 16 << 20);
/// let tuned = StoreConfig {
///     volume: VolumeOptions { cache_bytes: Some(8 << 20), ..VolumeOptions::default() },
///     log: LogConfig { segment_bytes: 8 << 20, ..LogConfig::default() },
///     ..StoreConfig::default()
/// };
/// # let _ = tuned;
/// ```
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Capacity of a volume this open creates (a missing file); an existing volume keeps its
    /// own. At least [`MIN_VOLUME_BYTES`](crate::MIN_VOLUME_BYTES) with the default log
    /// settings. A new volume is preallocated and zero-filled: creating it takes a while.
    pub volume_bytes: u64,
    /// Give a new volume a metadata journal (segment creation, purge and snapshot
    /// publication then commit with one journal write instead of a checkpoint's two
    /// barriers). On by default.
    pub journal: bool,
    /// How the volume is opened (cache budget, IO tiers).
    pub volume: VolumeOptions,
    /// The log's tuning (directory in the volume, segment size, hot window).
    pub log: LogConfig,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            volume_bytes: 1 << 30,
            journal: true,
            volume: VolumeOptions::default(),
            log: LogConfig::default(),
        }
    }
}

impl StoreConfig {
    /// The default configuration, creating volumes of `volume_bytes`.
    pub fn with_volume_bytes(volume_bytes: u64) -> StoreConfig {
        StoreConfig { volume_bytes, ..StoreConfig::default() }
    }

    /// Opens (or creates) the volume at `location` as this configuration says.
    pub(crate) fn open_volume(&self, location: impl AsRef<std::ffi::OsStr>) -> Result<Volume> {
        let format =
            FormatOptions { journal: self.journal, ..FormatOptions::journaled(self.volume_bytes) };
        open_volume_with(location, &format, self.volume)
    }
}

/// The former name of [`StoreConfig`].
pub type StoreOptions = StoreConfig;

/// An open store: the log storage and the state machine to hand to `Raft::new`, a reader of
/// the applied map, and the volume they live in. What the adapters' `open_store_at` return
/// (`v010::Store`, `v09::Store`).
///
/// Drop order at shutdown: `raft.shutdown().await` first (it drops openraft's copies of
/// the log store and the state machine), then this (the log's IO thread stops when its last
/// handle goes), then nothing: the volume closes when its last clone is dropped.
#[derive(Debug)]
pub struct Store<L, F: Flavor> {
    /// The log storage (`RaftLogStorage`), for `Raft::new`.
    pub log_store: L,
    /// The state machine (`RaftStateMachine`), for `Raft::new`.
    pub state_machine: KvMachine<F>,
    /// Reads of the applied map (cheap to clone; reads what this member applied).
    pub reader: KvReaderOf<F>,
    /// The volume the store lives in (cheap to clone), for carrier statistics or other files.
    pub volume: Volume,
    pub(crate) max_entry_bytes: usize,
}

impl<L, F: Flavor> Store<L, F> {
    /// The largest encoded entry the log accepts (the log store's `max_entry_bytes`): check
    /// a request before a direct `client_write`, as a log store that refuses an append stops
    /// openraft's core.
    pub fn max_entry_bytes(&self) -> usize {
        self.max_entry_bytes
    }
}

/// Opens the volume at `location` (a path, or `memory:`) with production knobs
/// (preallocated, non-sparse, direct IO, write-through, where the medium gives them meaning),
/// formatting a new one of `volume_bytes` with a journal first if none exists (segment
/// creation, purge and snapshot publication then commit with one journal write instead of a
/// checkpoint's two barriers). A block device is used as is. `options` carries the cache
/// budget and the default IO tiers.
///
/// ```
/// use vellum_raft_store::{MIN_VOLUME_BYTES, VolumeOptions, open_volume};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let volume = open_volume(dir.path().join("node.vlm"), MIN_VOLUME_BYTES, VolumeOptions::default())?;
/// assert_eq!(volume.info().layout.capacity_bytes(), MIN_VOLUME_BYTES);
/// # Ok(())
/// # }
/// ```
pub fn open_volume(
    location: impl AsRef<std::ffi::OsStr>,
    volume_bytes: u64,
    options: VolumeOptions,
) -> Result<Volume> {
    open_volume_with(location, &FormatOptions::journaled(volume_bytes), options)
}

/// [`open_volume`], formatting a missing volume with `format` (for instance without a
/// journal: `vellum serve --no-journal`). An existing volume keeps its own layout.
///
/// ```
/// use vellum_raft_store::{FormatOptions, VolumeOptions, open_volume_with};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let format = FormatOptions { journal: false, ..FormatOptions::journaled(16 << 20) };
/// let volume = open_volume_with(dir.path().join("node.vlm"), &format, VolumeOptions::default())?;
/// assert!(volume.info().journal.is_none());
/// # Ok(())
/// # }
/// ```
pub fn open_volume_with(
    location: impl AsRef<std::ffi::OsStr>,
    format: &FormatOptions<'_>,
    options: VolumeOptions,
) -> Result<Volume> {
    let location = Location::parse(location);
    let (volume, _) =
        open_or_create_volume(&location, format, CarrierOptions::PRODUCTION, options)?;
    Ok(volume)
}
