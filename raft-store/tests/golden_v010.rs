//! The golden raft volumes (written through the openraft 0.9 adapter, `tests/golden/vN/`)
//! opened through the openraft 0.10 adapter: the same entries, vote, committed id, snapshot
//! and applied state, decoded as openraft 0.10's types. A node moved from 0.9 to 0.10 keeps
//! its volume: nothing is converted.

#![cfg(feature = "openraft-v010")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::sync::Arc;

use vellum_engine::carrier::MemoryCarrier;
use vellum_engine::{Volume, VolumeOptions};
use vellum_raft_store::log::{self, LogConfig, LogEntry};
use vellum_raft_store::v010::openraft::impls::leader_id_adv::LeaderId;
use vellum_raft_store::v010::openraft::storage::{RaftLogStorage, RaftStateMachine};
use vellum_raft_store::v010::openraft::{EntryPayload, RaftLogReader};
use vellum_raft_store::v010::{Entry, LogId, Vote, open_store};
use vellum_raft_store::{KvOp, KvRequest};

fn golden_path(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/v{version}/raft.vlm"))
}

/// The golden entries' values (as `tests/golden.rs` wrote them).
fn value(index: u64, term: u64) -> Vec<u8> {
    (0..3000u64).map(|i| (i.wrapping_mul(7) ^ index.wrapping_mul(131) ^ term) as u8).collect()
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

fn entry(index: u64, term: u64) -> Entry {
    let op = KvOp::Put { key: format!("k{index}"), value: value(index, term) };
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(KvRequest { ops: vec![op] }),
    }
}

fn term_of(index: u64) -> u64 {
    if index >= 55 { 2 } else { 1 }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 10,
        background_spares: false,
        commit_lag: std::time::Duration::from_secs(3600),
        ..LogConfig::default()
    }
}

async fn verify(bytes: &[u8]) {
    let volume =
        Volume::open(Box::new(MemoryCarrier::from_bytes(bytes)), VolumeOptions::default()).unwrap();
    let (mut store, mut sm) = open_store(&volume, config()).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 25)));
    assert_eq!(state.last_log_id, Some(log_id(2, 70)));
    let entries = store.get_log_reader().await.try_get_log_entries(0..1000).await.unwrap();
    let want: Vec<Entry> = (26..=70).map(|i| entry(i, term_of(i))).collect();
    assert_eq!(entries, want);
    let vote = store.get_log_reader().await.read_vote().await.unwrap();
    assert_eq!(vote, Some(Vote::new_committed(2, 1)));
    assert_eq!(store.read_committed().await.unwrap(), Some(log_id(2, 66)));
    let snap = sm.get_current_snapshot().await.unwrap().expect("a snapshot");
    assert_eq!(snap.meta.last_log_id, Some(log_id(1, 30)));
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 30)));
    let kv = sm.reader();
    assert_eq!(kv.len(), 30);
    assert_eq!(kv.get("k7"), Some(value(7, 1)));
    // The 0.10 adapter appends after the 0.9 content.
    let next = entry(71, 2);
    let encoded = bincode::serde::encode_to_vec(&next, bincode::config::standard()).unwrap();
    let le = LogEntry { index: 71, term: 2, payload: Arc::from(encoded) };
    log::wait(|done| store.core().append(vec![le], done)).unwrap();
    assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(log_id(2, 71)));
    store.core().close();
    drop((store, sm));
    volume.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_volumes_written_by_the_09_adapter_open_with_the_010_adapter() {
    let mut versions = 0;
    for version in 1..=9 {
        let Ok(bytes) = std::fs::read(golden_path(version)) else { continue };
        verify(&bytes).await;
        versions += 1;
    }
    assert!(versions >= 5, "the golden raft volumes of formats 1 to 5 are under tests/golden/");
}
