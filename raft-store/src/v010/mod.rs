//! The openraft 0.10 adapter (feature `openraft-v010`; openraft `=0.10.0-alpha.37`, an alpha
//! upstream, used here under the crate name `openraft010`).
//!
//! Same log core, same state machine, same on-disk formats as the 0.9 adapter: only the
//! trait mappings differ. What 0.10 changes for the store:
//! - `append` is submitted with an `IOFlushed` callback and the raft core goes on: several
//!   appends are in flight at once, and the core's combining queue turns those that arrive
//!   while a write is in flight into one durable write (group commit on the leader too).
//! - storage errors are `io::Error`; `truncate(log_id)` became `truncate_after(last_kept)`;
//!   `read_vote` moved to the log reader.
//! - the state machine receives a stream of entries with a responder each, and owns its
//!   snapshot data type (`Cursor<Vec<u8>>` here); snapshot metas lost their id.
//!
//! The serialized forms of log ids, votes, entries and snapshot metas are those of 0.9 for
//! the default leader id, so a store written by one adapter opens with the other (tested
//! with the golden volumes).

mod log_store;
mod proposals;
mod restore;
mod state_machine;

use std::io::Cursor;

pub use openraft010 as openraft;

pub use self::log_store::{CommittedTerm, LogStore};
pub use self::proposals::{KvBatcher, Proposals010};
pub use self::restore::{
    ExportedSnapshot, Meta, export_snapshot, has_raft_state, restore_snapshot,
};
pub use self::state_machine::V010;
use crate::error::Result;
pub use crate::kv::types::{KvNode, KvOp, KvRequest, KvResponse, NodeId};
use crate::log::{LogConfig, LogCore};

openraft010::declare_raft_types!(
    /// The KV store's openraft 0.10 types.
    pub TypeConfig:
        D = KvRequest,
        R = KvResponse,
        NodeId = u64,
        Node = KvNode,
        AsyncRuntime = openraft010::TokioRuntime,
);

/// The snapshot data the state machine hands openraft.
pub type SnapshotData = Cursor<Vec<u8>>;
/// A log id of [`TypeConfig`].
pub type LogId = openraft010::type_config::alias::LogIdOf<TypeConfig>;
/// A vote of [`TypeConfig`].
pub type Vote = openraft010::type_config::alias::VoteOf<TypeConfig>;
/// A log entry of [`TypeConfig`].
pub type Entry = openraft010::type_config::alias::EntryOf<TypeConfig>;
/// The state machine of the 0.10 adapter.
pub type KvStateMachine = crate::kv::machine::KvMachine<V010>;
/// Read access to its applied map.
pub type KvReader = crate::kv::machine::KvReaderOf<V010>;

/// The KV store's batcher on openraft 0.10 is [`KvBatcher`]; an open store is a [`Store`].
pub type Store = crate::kv::store::Store<LogStore<TypeConfig>, V010>;

/// The log storage and state machine of one node, on `volume`, for openraft 0.10: the
/// second step of [`open_store_at`], for a volume opened with
/// [`open_volume`](crate::open_volume).
///
/// ```
/// use vellum_raft_store::v010::open_store;
/// use vellum_raft_store::{LogConfig, MIN_VOLUME_BYTES, VolumeOptions, open_volume};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let volume = open_volume(dir.path().join("node.vlm"), MIN_VOLUME_BYTES, VolumeOptions::default())?;
/// let (log_store, state_machine) = open_store(&volume, LogConfig::default())?;
/// // Segments of 1 MiB on a 16 MiB volume: an entry of up to 1 MiB less 4144 bytes.
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

/// The directory (in the volume) of group `group`'s state machine and snapshots, for a log
/// under `dir`: `dir` itself for group 0 (where [`open_store`] keeps it), `dir/machines/ID`
/// for another.
pub fn group_machine_dir(dir: &str, group: u64) -> String {
    if group == 0 {
        dir.to_string()
    } else {
        format!("{}/machines/{group}", dir.trim_end_matches('/'))
    }
}

/// The log storage and state machine of group `group` of the log `log` (one open log,
/// under `dir` of `volume`), creating the group when the log does not host it yet: one
/// openraft instance per group, every group's appends in the log's shared durable writes,
/// each group's snapshots under [`group_machine_dir`] (published with one journal commit
/// each, as group 0's). Blocking.
///
/// ```
/// use vellum_raft_store::log::{LogConfig, LogCore};
/// use vellum_raft_store::v010::open_group;
/// use vellum_raft_store::{MIN_VOLUME_BYTES, VolumeOptions, open_volume};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let volume = open_volume(dir.path().join("node.vlm"), MIN_VOLUME_BYTES, VolumeOptions::default())?;
/// let log = LogCore::open(volume.clone(), LogConfig::default())?;
/// let (store, machine) = open_group(&volume, &log, "/raft", 5)?;
/// assert_eq!(store.core().group_id(), 5);
/// assert_eq!(log.groups(), vec![0, 5]);
/// # drop((store, machine));
/// # Ok(())
/// # }
/// ```
pub fn open_group(
    volume: &vellum_engine::Volume,
    log: &LogCore,
    dir: &str,
    group: u64,
) -> Result<(LogStore<TypeConfig>, KvStateMachine)> {
    let core = match log.group(group) {
        Ok(core) => core,
        Err(crate::Error::UnknownGroup(_)) => log.create_group(group)?,
        Err(e) => return Err(e),
    };
    let sm = KvStateMachine::open(volume.clone(), &group_machine_dir(dir, group))?;
    Ok((LogStore::new(core), sm))
}

/// Opens (or creates) the volume at `location` and the store in it, for openraft 0.10: the
/// one-call open. Blocking (a new volume is preallocated and zero-filled): call it before
/// the runtime's work starts, or from `spawn_blocking`. Refused with one line
/// ([`Error::VolumeTooSmall`](crate::Error::VolumeTooSmall)) on a volume below
/// [`MIN_VOLUME_BYTES`](crate::MIN_VOLUME_BYTES) with the default log settings.
///
/// ```
/// use vellum_raft_store::{MIN_VOLUME_BYTES, StoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = vellum_raft_store::v010::open_store_at(
///     dir.path().join("node.vlm"),
///     StoreConfig::with_volume_bytes(MIN_VOLUME_BYTES),
/// )?;
/// assert!(store.reader.is_empty());
/// assert_eq!(store.max_entry_bytes(), (1 << 20) - 4096 - 48);
///
/// // Too small for the default settings: refused at open, naming the minimum.
/// let err = vellum_raft_store::v010::open_store_at(
///     dir.path().join("tiny.vlm"),
///     StoreConfig::with_volume_bytes(8 << 20),
/// )
/// .unwrap_err();
/// assert!(err.to_string().contains("at least 16777216 bytes"), "{err}");
/// # Ok(())
/// # }
/// ```
pub fn open_store_at(
    location: impl AsRef<std::ffi::OsStr>,
    config: crate::kv::store::StoreConfig,
) -> Result<Store> {
    let volume = config.open_volume(location)?;
    let (log_store, state_machine) = open_store(&volume, config.log)?;
    let reader = state_machine.reader();
    let max_entry_bytes = log_store.max_entry_bytes();
    Ok(Store { log_store, state_machine, reader, volume, max_entry_bytes })
}
