//! The openraft 0.9 adapter (feature `openraft-v09`; openraft `0.9.25` with `storage-v2`).
//!
//! Same log core, same state machine, same on-disk formats as the 0.10 adapter in
//! [`v010`](crate::v010): only the trait mappings differ. Its items are also at the crate
//! root (`vellum_raft_store::LogStore`, `TypeConfig`, `open_store`, ...), where they were
//! before the 0.10 adapter existed.

mod log_store;
mod state_machine;

pub use openraft;

pub use self::log_store::LogStore;
pub use self::state_machine::V09;
use crate::error::Result;
use crate::log::{LogConfig, LogCore};
pub use crate::types::{KvNode, KvOp, KvRequest, KvResponse, LogId, NodeId, TypeConfig, Vote};

/// The state machine of the 0.9 adapter.
pub type KvStateMachine = crate::state_machine::KvMachine<V09>;
/// Read access to its applied map.
pub type KvReader = crate::state_machine::KvReaderOf<V09>;
/// The KV store's batcher on openraft 0.9.
pub type KvBatcher = crate::batcher::Batcher<TypeConfig, crate::batcher::KvBatching>;
/// An open 0.9 store ([`open_store_at`]).
pub type Store = crate::store::Store<LogStore<TypeConfig>, V09>;

/// The log storage and state machine of one node, on `volume`, for openraft 0.9.
///
/// ```
/// use vellum_raft_store::v09::open_store;
/// use vellum_raft_store::{LogConfig, MIN_VOLUME_BYTES, VolumeOptions, open_volume};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let volume = open_volume(dir.path().join("node.vlm"), MIN_VOLUME_BYTES, VolumeOptions::default())?;
/// let (log_store, state_machine) = open_store(&volume, LogConfig::default())?;
/// assert_eq!(log_store.max_entry_bytes(), (1 << 20) - 4096 - 40);
/// # drop(state_machine);
/// # Ok(())
/// # }
/// ```
pub fn open_store(
    volume: &vellum_engine::Volume,
    log: LogConfig,
) -> Result<(LogStore<TypeConfig>, KvStateMachine)> {
    let dir = log.dir.clone();
    let core = LogCore::open(volume.clone(), log)?;
    let sm = KvStateMachine::open(volume.clone(), &dir)?;
    Ok((LogStore::new(core), sm))
}

/// Opens (or creates) the volume at `location` and the store in it, for openraft 0.9: the
/// one-call open. Blocking (a new volume is zero-filled): call it before starting the
/// runtime's work, or from `spawn_blocking`.
///
/// ```
/// use vellum_raft_store::{MIN_VOLUME_BYTES, StoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = vellum_raft_store::v09::open_store_at(
///     dir.path().join("node.vlm"),
///     StoreConfig::with_volume_bytes(MIN_VOLUME_BYTES),
/// )?;
/// assert!(store.reader.is_empty());
/// # Ok(())
/// # }
/// ```
pub fn open_store_at(location: impl AsRef<std::ffi::OsStr>, config: StoreConfig) -> Result<Store> {
    let volume = config.open_volume(location)?;
    let (log_store, state_machine) = open_store(&volume, config.log)?;
    let reader = state_machine.reader();
    let max_entry_bytes = log_store.max_entry_bytes();
    Ok(Store { log_store, state_machine, reader, volume, max_entry_bytes })
}

use crate::store::StoreConfig;
