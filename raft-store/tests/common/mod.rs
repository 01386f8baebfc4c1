//! Helpers the log tests share: entries with a recognisable payload, a blocking append, a
//! full read, volumes on the memory and the fault-injecting carrier, an in-process openraft
//! network (`router`), and busy groups beside the one under test (`busy`).

#![allow(dead_code)] // each test binary uses its own part of these

pub mod busy;
pub mod router;

use std::sync::Arc;

use vellum_engine::carrier::{Carrier, FaultyCarrier, MemoryCarrier};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::log::{self, LogCore, LogEntry};

/// Entry `index` of `term` with `len` bytes of payload derived from both.
pub fn entry(index: u64, term: u64, len: usize) -> LogEntry {
    let payload: Vec<u8> =
        (0..len).map(|i| (i as u64 ^ index.wrapping_mul(31) ^ term) as u8).collect();
    LogEntry { index, term, payload: Arc::from(payload) }
}

/// Appends and waits until the entries are durable.
pub fn append(core: &LogCore, entries: Vec<LogEntry>) {
    log::wait(|done| core.append(entries, done)).expect("append");
}

/// Every entry the log holds.
pub fn all(core: &LogCore) -> Vec<LogEntry> {
    match core.bounds() {
        (first, Some(last)) => core.read(first, last + 1).expect("read"),
        _ => Vec::new(),
    }
}

/// A formatted volume on `carrier`, which the caller keeps a handle of.
pub fn format_on<C: Carrier + 'static>(carrier: Arc<C>) -> (Arc<C>, Volume) {
    let v = Volume::format(
        Box::new(Arc::clone(&carrier)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .expect("format");
    (carrier, v)
}

/// A formatted volume on a shared memory carrier of `bytes`.
pub fn memory_volume(bytes: u64) -> (Arc<MemoryCarrier>, Volume) {
    format_on(Arc::new(MemoryCarrier::new(bytes)))
}

/// A formatted volume on a shared write-through fault-injecting carrier of `bytes`.
pub fn faulty_volume(bytes: u64) -> (Arc<FaultyCarrier>, Volume) {
    format_on(Arc::new(FaultyCarrier::new(bytes, true)))
}
