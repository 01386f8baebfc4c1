#![doc = include_str!("../README.md")]
//!
//! ## Modules
//!
//! - [`log`]: the openraft-agnostic log core (entries as index, term, bytes; group commit;
//!   torn-tail recovery; vote / committed / purged records).
//! - [`v010`] (feature `openraft-v010`, default): openraft 0.10 `RaftLogStorage`,
//!   `RaftStateMachine`, the one-call open, the KV batcher.
//! - `v09` (feature `openraft-v09`): the same for openraft 0.9, in the same shape.
//! - the KV core both adapters share (`src/kv/`): [`KvMachine`], the KV state machine with
//!   snapshots written into the volume; [`batcher`], proposal batching for openraft 0.9 and
//!   0.10 (a bounded number of entries in flight, everything that arrives meanwhile in the
//!   next), generic over the application's types; [`types`] and [`codec`].
//! - [`member`]: the store's identity (node id, incarnation) and the peer book a member uses
//!   to refuse a peer that lost its state.
//!
//! `raft-store/examples/embed_v010.rs` is the one-node program above with timings;
//! `docs/RAFT-LOG.md` describes the on-disk log format and the torn-write design.

#![warn(missing_docs)]
// `internals` exposes the log's decoders to the fuzz targets, field by field: not an API.
#![cfg_attr(feature = "internals", allow(missing_docs))]
// Without an adapter, what only the adapters call (snapshot publication, applying) is unused:
// the log core alone (`--no-default-features`) is still a valid build.
#![cfg_attr(not(any(feature = "openraft-v09", feature = "openraft-v010")), allow(dead_code))]

pub mod error;
mod kv;
pub mod log;
pub mod member;
pub mod metrics;
mod sync;
#[cfg(feature = "openraft-v010")]
pub mod v010;
#[cfg(feature = "openraft-v09")]
pub mod v09;

pub use kv::{batcher, codec, types};

pub use batcher::{BatchLimits, Batcher, Batching, KvBatching, ProposeError, Proposed};
pub use error::{Error, Result};
pub use kv::store::{Store, StoreConfig, StoreOptions, open_volume, open_volume_with};
pub use kv::{Flavor, KvMachine, KvReaderOf};
pub use log::{DiskLatency, LogConfig, LogCore, LogEntry, MIN_VOLUME_BYTES};
pub use types::{KvNode, KvOp, KvRequest, KvResponse, NodeId};
/// The volume types a caller of [`open_volume`] needs (from `vellum-engine`).
pub use vellum_engine::{FormatOptions, Volume, VolumeOptions};
