//! # vellum-raft-store: openraft storage on a write-through Vellum volume
//!
//! A durable append is one write-through carrier write returning: no `fsync`, no
//! `fdatasync`, no metadata commit. The log lives in preallocated segment files inside a
//! volume opened preallocated, non-sparse, with direct IO and write-through.
//!
//! - [`log`]: the openraft-agnostic log core (entries as index, term, bytes; group commit;
//!   torn-tail recovery; vote / committed / purged records).
//! - [`LogStore`]: openraft 0.9 `RaftLogStorage` + `RaftLogReader` on the core.
//! - [`v010`] (feature `openraft-v010`): the same for openraft 0.10 (`=0.10.0-alpha.37`).
//! - [`KvStateMachine`]: the KV state machine with snapshots written into the volume.
//! - [`batcher`]: proposal batching for openraft 0.9 (one entry in flight, everything that
//!   arrives meanwhile in the next), generic over the application's types.
//! - [`member`]: the store's identity (node id, incarnation) and the peer book a member uses
//!   to refuse a peer that lost its state.
//!
//! See `raft-store/examples/embed.rs` for a one-node openraft cluster on it, and
//! `docs/RAFT-LOG.md` for the on-disk log format and the torn-write design.

mod adapter;
pub mod batcher;
/// The store's encoding (bincode 2 over serde), decoded with a limit bound to the input.
pub mod codec;
pub mod error;
pub mod log;
pub mod member;
pub mod metrics;
mod snapshot;
mod state_machine;
mod store;
mod sync;
pub mod types;
#[cfg(feature = "openraft-v010")]
pub mod v010;
#[cfg(feature = "openraft-v09")]
pub mod v09;

pub use batcher::{BatchLimits, Batcher, Batching, KvBatching, ProposeError, Proposed};
pub use error::{Error, Result};
pub use log::{LogConfig, LogCore, LogEntry, MIN_VOLUME_BYTES};
pub use state_machine::{Flavor, KvMachine, KvReaderOf};
pub use store::{Store, StoreConfig, StoreOptions, open_volume, open_volume_with};
pub use types::{KvNode, KvOp, KvRequest, KvResponse, NodeId};
/// The volume types a caller of [`open_volume`] needs (from `vellum-engine`).
pub use vellum_engine::{FormatOptions, Volume, VolumeOptions};
// The 0.9 adapter at the crate root, where it was before `v010` existed.
#[cfg(feature = "openraft-v09")]
pub use types::TypeConfig;
#[cfg(feature = "openraft-v09")]
pub use v09::{KvBatcher, KvReader, KvStateMachine, LogStore, V09, open_store};
