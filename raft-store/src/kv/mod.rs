//! The KV core both openraft adapters share: the KV machine (an applied map with snapshots
//! published into the volume), proposal batching, the application's types, the entry codec
//! and the one-call open. Nothing here names an openraft version: `v010/` and `v09/` map
//! openraft's traits onto it, each in its own folder, and each names its openraft types
//! through a [`Flavor`] (the machine) or a [`batcher::Proposals`] (the batcher).
//!
//! Invariants:
//! - A snapshot is published by one journal commit of the volume (`snapshot.rs`): after a
//!   power cut the machine opens on the newest snapshot whole, or on the one before it, never
//!   on a mix; a build that started before an install never replaces the installed one.
//! - The machine applies entries in log order and records the last applied log id with the
//!   map it belongs to (the snapshot's `last_applied`), so a reopen re-applies from there.
//! - Every batched caller gets exactly one answer (`batcher/`).
//!
//! Files: `machine.rs` (applied map, snapshots), `snapshot.rs` (publication in the volume),
//! `batcher/` (with `pace.rs`, pacing by the disk), `types.rs` (requests, responses,
//! members), `codec.rs` (bincode with a bounded decode), `store.rs` (the one-call open),
//! `adapter.rs` (what the adapters share: awaiting a log callback, index ranges).

pub(crate) mod adapter;
pub mod batcher;
pub mod codec;
pub(crate) mod machine;
pub(crate) mod snapshot;
pub(crate) mod store;
pub mod types;

pub use machine::{Flavor, KvMachine, KvReaderOf};
