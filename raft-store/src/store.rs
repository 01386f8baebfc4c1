//! Opening a node's storage: the volume with production knobs, the log, the state machine.

use vellum_engine::carrier::{CarrierOptions, Location};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};

use crate::error::Result;
use crate::log::{LogConfig, LogCore};
use crate::log_store::LogStore;
use crate::state_machine::KvStateMachine;
use crate::types::TypeConfig;

/// How to open the store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Capacity when the volume has to be created (a missing file carrier).
    pub volume_bytes: u64,
    /// The log's tuning (directory, segment size, hot window).
    pub log: LogConfig,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { volume_bytes: 1 << 30, log: LogConfig::default() }
    }
}

/// Opens the volume at `location` (a path, or `memory:`) with production knobs
/// (preallocated, non-sparse, direct IO, write-through, where the medium gives them meaning),
/// formatting a new one of `volume_bytes` with a journal first if none exists (segment
/// creation, purge and snapshot publication then commit with one journal write instead of a
/// checkpoint's two barriers). A block device is used as is. `options` carries the cache
/// budget and the default IO tiers.
pub fn open_volume(
    location: impl AsRef<std::ffi::OsStr>,
    volume_bytes: u64,
    options: VolumeOptions,
) -> Result<Volume> {
    open_volume_with(location, &FormatOptions::journaled(volume_bytes), options)
}

/// [`open_volume`], formatting a missing volume with `format` (for instance without a
/// journal: `vellum serve --no-journal`). An existing volume keeps its own layout.
pub fn open_volume_with(
    location: impl AsRef<std::ffi::OsStr>,
    format: &FormatOptions<'_>,
    options: VolumeOptions,
) -> Result<Volume> {
    let location = Location::parse(location);
    let (volume, _) =
        Volume::open_or_create(&location, format, CarrierOptions::PRODUCTION, options)?;
    Ok(volume)
}

/// The log storage and state machine of one node, on `volume`.
pub fn open_store(
    volume: &Volume,
    log: LogConfig,
) -> Result<(LogStore<TypeConfig>, KvStateMachine)> {
    let dir = log.dir.clone();
    let core = LogCore::open(volume.clone(), log)?;
    let sm = KvStateMachine::open(volume.clone(), &dir)?;
    Ok((LogStore::new(core), sm))
}
