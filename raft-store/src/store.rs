//! Opening a node's storage: the volume with production knobs, the log, the state machine.

use std::path::Path;

use vellum_engine::carrier::{self, CarrierOptions};
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

/// Opens the volume at `path` with production knobs (preallocated, non-sparse, direct IO,
/// write-through), formatting it first if it does not exist. A block device is used as is.
pub fn open_volume(path: &Path, volume_bytes: u64) -> Result<Volume> {
    let knobs = CarrierOptions::PRODUCTION;
    if path.exists() {
        return Ok(Volume::open_path(path, knobs, VolumeOptions::default())?);
    }
    let fmt = FormatOptions { capacity_bytes: Some(volume_bytes), ..FormatOptions::default() };
    let _ = carrier::is_block_device(path);
    Ok(Volume::create_path(path, &fmt, knobs, VolumeOptions::default())?)
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
