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
mod state_machine;

use std::io::Cursor;

pub use openraft010 as openraft;

pub use self::log_store::{CommittedTerm, LogStore};
pub use self::proposals::{KvBatcher, Proposals010};
pub use self::state_machine::V010;
use crate::error::Result;
use crate::log::{LogConfig, LogCore};
pub use crate::types::{KvNode, KvOp, KvRequest, KvResponse, NodeId};

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
pub type LogId = openraft010::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft010::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = openraft010::type_config::alias::EntryOf<TypeConfig>;
/// The state machine of the 0.10 adapter.
pub type KvStateMachine = crate::state_machine::KvMachine<V010>;
/// Read access to its applied map.
pub type KvReader = crate::state_machine::KvReaderOf<V010>;

/// The log storage and state machine of one node, on `volume`, for openraft 0.10.
pub fn open_store(
    volume: &vellum_engine::Volume,
    log: LogConfig,
) -> Result<(LogStore<TypeConfig>, KvStateMachine)> {
    let dir = log.dir.clone();
    let core = LogCore::open(volume.clone(), log)?;
    let sm = KvStateMachine::open(volume.clone(), &dir)?;
    Ok((LogStore::new(core), sm))
}
