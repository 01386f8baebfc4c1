//! The openraft 0.9 adapter (feature `openraft-v09`; openraft `0.9.25` with `storage-v2`).
//!
//! Same log core, same state machine, same on-disk formats as the 0.10 adapter in
//! [`v010`](crate::v010): only the trait mappings differ. The two adapters are siblings of
//! one shape (`log_store.rs`, `state_machine.rs`, `proposals.rs`, the type configuration and
//! the one-call open here); what they share is in the crate's KV core.

mod log_store;
mod proposals;
mod state_machine;

pub use openraft;

pub use self::log_store::LogStore;
pub use self::state_machine::V09;
use crate::error::{Error, Result};
use crate::kv::store::StoreConfig;
pub use crate::kv::types::{KvNode, KvOp, KvRequest, KvResponse, NodeId};
use crate::log::{LogConfig, LogCore};

openraft::declare_raft_types!(
    /// The KV store's openraft 0.9 types.
    pub TypeConfig:
        D = KvRequest,
        R = KvResponse,
        NodeId = u64,
        Node = KvNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log id of the 0.9 [`TypeConfig`].
pub type LogId = openraft::LogId<NodeId>;
/// A vote of the 0.9 [`TypeConfig`].
pub type Vote = openraft::Vote<NodeId>;
/// openraft 0.9's storage error for [`TypeConfig`].
pub type StorageError = openraft::StorageError<NodeId>;

/// Maps to openraft 0.9's `StorageError` with the subject and verb of the failed operation.
pub fn storage_error<NID: openraft::NodeId>(
    subject: openraft::ErrorSubject<NID>,
    verb: openraft::ErrorVerb,
    e: &Error,
) -> openraft::StorageError<NID> {
    openraft::StorageIOError::new(subject, verb, openraft::AnyError::new(e)).into()
}

/// The state machine of the 0.9 adapter.
pub type KvStateMachine = crate::kv::KvMachine<V09>;
/// Read access to its applied map.
pub type KvReader = crate::kv::KvReaderOf<V09>;
/// The KV store's batcher on openraft 0.9.
pub type KvBatcher = crate::kv::batcher::Batcher<TypeConfig, crate::kv::batcher::KvBatching>;
/// An open 0.9 store ([`open_store_at`]).
pub type Store = crate::kv::store::Store<LogStore<TypeConfig>, V09>;

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
/// assert_eq!(log_store.max_entry_bytes(), (1 << 20) - 4096 - 48);
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
