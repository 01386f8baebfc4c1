//! What an embedder on openraft 0.10 gets with the defaults (issue 28): the one-call open on
//! the smallest volume the docs allow commits and rolls segments; a request too large for
//! one entry fails alone through the batcher and the Raft instance goes on; the log store's
//! `max_entry_bytes()` is exact. Run with
//! `cargo test -p vellum-raft-store --features openraft-v010 --test embed_v010`.

#![cfg(feature = "openraft-v010")]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use vellum_raft_store::log::LogEntry;
use vellum_raft_store::v010::openraft::error::{
    RPCError, ReplicationClosed, StreamingError, Unreachable,
};
use vellum_raft_store::v010::openraft::network::{RPCOption, RaftNetworkFactory};
use vellum_raft_store::v010::openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use vellum_raft_store::v010::openraft::type_config::alias::SnapshotOf;
use vellum_raft_store::v010::openraft::{Config, Raft, RaftNetworkV2};
use vellum_raft_store::v010::{
    KvBatcher, KvStateMachine, SnapshotData, Store, TypeConfig, Vote, open_store_at,
};
use vellum_raft_store::{
    BatchLimits, Error, KvBatching, KvNode, KvOp, KvRequest, MIN_VOLUME_BYTES, ProposeError,
    StoreConfig,
};

#[derive(Clone)]
struct NoPeers;

fn no_peer() -> Unreachable<TypeConfig> {
    Unreachable::from_string("a one-node cluster has no peers")
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;
    async fn new_client(&mut self, _target: u64, _node: &KvNode) -> NoPeers {
        NoPeers
    }
}

impl RaftNetworkV2<TypeConfig> for NoPeers {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(no_peer().into())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(no_peer().into())
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(no_peer().into())
    }
}

/// A one-node cluster on `store`, initialized, with node 1 leading.
async fn one_node(store: &Store) -> Raft<TypeConfig, KvStateMachine> {
    let config = Config {
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        enable_leader_restore: Some(false),
        ..Config::default()
    };
    let raft = Raft::new(
        1,
        Arc::new(config.validate().unwrap()),
        NoPeers,
        store.log_store.clone(),
        store.state_machine.clone(),
    )
    .await
    .unwrap();
    let node = KvNode { raft_addr: "127.0.0.1:0".into(), api_addr: "127.0.0.1:0".into() };
    raft.initialize(BTreeMap::from([(1, node)])).await.unwrap();
    raft.wait(Some(Duration::from_secs(10))).leader_with_quorum_acked(None, "leads").await.unwrap();
    raft
}

fn put(key: &str, len: usize) -> KvRequest {
    KvRequest { ops: vec![KvOp::Put { key: key.into(), value: vec![7; len] }] }
}

fn segments(store: &Store) -> usize {
    store.volume.list("/raft/log").unwrap().len()
}

/// Defaults on the smallest volume the docs allow: open, initialize, commit enough to roll
/// several segments, read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_settings_on_the_smallest_volume_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.vlm");
    let store = open_store_at(&path, StoreConfig::with_volume_bytes(MIN_VOLUME_BYTES)).unwrap();
    assert_eq!(store.log_store.core().segment_bytes(), 1 << 20);
    let raft = one_node(&store).await;
    // 48 entries of 100 KiB: about five 1 MiB segments.
    for i in 0..48 {
        raft.client_write(put(&format!("key-{i}"), 100 << 10)).await.unwrap();
    }
    assert_eq!(store.reader.get("key-47").map(|v| v.len()), Some(100 << 10));
    assert!(store.log_store.core().segment_bytes() == 1 << 20);
    let (first, last) = store.log_store.core().bounds();
    assert!(last.unwrap() - first >= 48, "{first}..{last:?}");
    raft.shutdown().await.unwrap();
    let seen = segments(&store);
    assert!(seen >= 4, "{seen} segment files");
}

/// Below the minimum, the default settings are refused at open, with one line naming it.
#[test]
fn a_volume_below_the_minimum_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let err = open_store_at(dir.path().join("tiny.vlm"), StoreConfig::with_volume_bytes(8 << 20))
        .unwrap_err();
    assert!(matches!(err, Error::VolumeTooSmall { min: MIN_VOLUME_BYTES, .. }), "{err}");
    assert!(!err.to_string().contains('\n'));
    // Explicit segments that do not fit twice: refused too.
    let config = StoreConfig {
        log: vellum_raft_store::LogConfig { segment_bytes: 64 << 20, ..Default::default() },
        ..StoreConfig::with_volume_bytes(64 << 20)
    };
    let err = open_store_at(dir.path().join("small.vlm"), config).unwrap_err();
    assert!(matches!(err, Error::VolumeTooSmall { min, .. } if min == 128 << 20), "{err}");
}

/// The minimum is for new logs: a log made with explicit segments on a volume below it
/// reopens with the default settings (it keeps its own segment size).
#[test]
fn an_existing_log_below_the_minimum_reopens_with_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.vlm");
    let explicit = StoreConfig {
        log: vellum_raft_store::LogConfig { segment_bytes: 1 << 20, ..Default::default() },
        ..StoreConfig::with_volume_bytes(8 << 20)
    };
    let store = open_store_at(&path, explicit).unwrap();
    let (done, durable) = std::sync::mpsc::channel();
    let entry = LogEntry { index: 1, term: 1, payload: Arc::from(vec![7u8; 100]) };
    let core = store.log_store.core();
    core.append(vec![entry], Box::new(move |r| done.send(r.is_ok()).unwrap())).unwrap();
    assert!(durable.recv().unwrap(), "the append is durable");
    assert!(segments(&store) >= 1, "the log has a segment");
    drop(store);
    let store = open_store_at(&path, StoreConfig::default()).unwrap();
    assert_eq!(store.max_entry_bytes(), (1 << 20) - 4096 - 48);
    assert_eq!(store.log_store.core().bounds().1, Some(1));
}

/// Through the batcher, a request too large for one entry fails alone: earlier and later
/// writes commit on the same Raft instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_fails_alone_through_the_batcher() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        open_store_at(dir.path().join("node.vlm"), StoreConfig::with_volume_bytes(32 << 20))
            .unwrap();
    let raft = one_node(&store).await;
    let limits = BatchLimits { max_entry_bytes: store.max_entry_bytes(), ..BatchLimits::default() };
    let batcher = KvBatcher::start(raft.clone(), KvBatching, limits);
    let small = |k: &str| KvOp::Put { key: k.into(), value: b"v".to_vec() };
    batcher.propose(small("before")).await.unwrap();
    let huge = KvOp::Put { key: "huge".into(), value: vec![0; 80 << 20] };
    let err = batcher.propose(huge).await.unwrap_err();
    assert!(matches!(err, ProposeError::TooLarge { .. }), "{err}");
    // The largest request the batcher lets through commits.
    let room = store.max_entry_bytes() - vellum_raft_store::types::ENTRY_ENVELOPE_BYTES - 16;
    let largest = KvOp::Put { key: "k".into(), value: vec![1; room - 1] };
    batcher.propose(largest).await.unwrap();
    let largest = KvOp::Put { key: "k".into(), value: vec![1; room] };
    assert!(matches!(batcher.propose(largest).await, Err(ProposeError::TooLarge { .. })));
    batcher.propose(small("after")).await.unwrap();
    raft.client_write(put("direct", 10)).await.unwrap();
    assert_eq!(store.reader.get("after"), Some(b"v".to_vec()));
    assert_eq!(store.reader.get("direct").map(|v| v.len()), Some(10));
    raft.shutdown().await.unwrap();
}

/// `max_entry_bytes()` is exact: an entry of exactly that size commits, and the log refuses
/// one byte more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_entry_bytes_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        open_store_at(dir.path().join("node.vlm"), StoreConfig::with_volume_bytes(32 << 20))
            .unwrap();
    let max = store.log_store.max_entry_bytes();
    assert_eq!(max, store.max_entry_bytes());
    let raft = one_node(&store).await;
    let core = store.log_store.core();
    // Probe the entry's overhead, then fill the entry to exactly `max` bytes.
    let probe = raft.client_write(put("k", max - 100)).await.unwrap().log_id.index;
    let overhead = core.read(probe, probe + 1).unwrap()[0].payload.len() - (max - 100);
    let exact = raft.client_write(put("k", max - overhead)).await.unwrap().log_id.index;
    assert_eq!(core.read(exact, exact + 1).unwrap()[0].payload.len(), max);
    assert!(put("k", max - overhead).entry_bytes() >= max);
    // One byte more: the log refuses it (nothing queued; the running instance unaffected).
    let next = core.bounds().1.unwrap() + 1;
    let entry = LogEntry { index: next, term: 1, payload: Arc::from(vec![0u8; max + 1]) };
    let refused = core.append(vec![entry], Box::new(|_| {})).unwrap_err();
    assert!(matches!(refused, Error::EntryTooLarge { .. }), "{refused}");
    raft.client_write(put("after", 1)).await.unwrap();
    raft.shutdown().await.unwrap();
}

/// Issue 24: the current snapshot of a running store, exported and restored into a new
/// volume with a new membership, starts a Raft node that elects itself without
/// `initialize` (refused as already initialized), serves the snapshot's state and appends
/// after the snapshot's index; a second restore into the same volume is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_snapshot_restores_into_a_new_store_that_elects_itself() {
    use vellum_raft_store::v010::{ExportedSnapshot, export_snapshot, restore_snapshot};
    let dir = tempfile::tempdir().unwrap();
    let store = open_store_at(dir.path().join("old.vlm"), StoreConfig::with_volume_bytes(32 << 20))
        .unwrap();
    let raft = one_node(&store).await;
    for i in 0..20 {
        raft.client_write(put(&format!("key-{i}"), 10)).await.unwrap();
    }
    raft.trigger().snapshot().await.unwrap();
    let log = vellum_raft_store::LogConfig::default();
    let mut exported = None;
    for _ in 0..100 {
        exported = export_snapshot(&store.volume, &log).unwrap();
        if exported.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let exported = exported.expect("a snapshot was built");
    raft.shutdown().await.unwrap();
    let (_, at) = exported.position().unwrap();
    assert!(at >= 21, "the snapshot covers the writes: {at}");
    // The exported bytes check and decode as they are.
    let snap =
        ExportedSnapshot::decode(exported.meta_bytes.clone(), exported.data.clone()).unwrap();
    let mut bad = exported.data.clone();
    bad.truncate(bad.len() / 2);
    assert!(ExportedSnapshot::decode(exported.meta_bytes.clone(), bad).is_err());

    let path = dir.path().join("new.vlm");
    // A volume with no store open on it (restore opens the log itself).
    let fresh = vellum_raft_store::open_volume(
        &path,
        32 << 20,
        vellum_raft_store::VolumeOptions::default(),
    )
    .unwrap();
    let node = KvNode { raft_addr: "127.0.0.1:1".into(), api_addr: "127.0.0.1:2".into() };
    let restored =
        restore_snapshot(&fresh, log.clone(), &snap, BTreeMap::from([(1, node.clone())]));
    fresh.close().unwrap();
    assert_eq!(restored.unwrap().index, at);
    let store = open_store_at(&path, StoreConfig::with_volume_bytes(32 << 20)).unwrap();
    assert_eq!(store.reader.get("key-19"), Some(vec![7; 10]));
    let raft = Raft::new(
        1,
        Arc::new(
            Config {
                heartbeat_interval: 50,
                election_timeout_min: 150,
                election_timeout_max: 300,
                ..Config::default()
            }
            .validate()
            .unwrap(),
        ),
        NoPeers,
        store.log_store.clone(),
        store.state_machine.clone(),
    )
    .await
    .unwrap();
    assert!(raft.is_initialized().await.unwrap());
    raft.wait(Some(Duration::from_secs(10))).leader_with_quorum_acked(None, "leads").await.unwrap();
    let written = raft.client_write(put("after", 3)).await.unwrap();
    assert!(written.log_id.index > at, "{:?} after {at}", written.log_id);
    assert_eq!(store.reader.get("key-0"), Some(vec![7; 10]));
    assert_eq!(store.reader.get("after"), Some(vec![7; 3]));
    let members = export_snapshot(&store.volume, &log).unwrap().unwrap().members();
    assert_eq!(members.get(&1).map(|n| n.raft_addr.as_str()), Some("127.0.0.1:1"));
    raft.shutdown().await.unwrap();
    drop((raft, store));
    // Restoring again over the restored state is refused.
    let volume = vellum_raft_store::open_volume(
        &path,
        32 << 20,
        vellum_raft_store::VolumeOptions::default(),
    )
    .unwrap();
    let again = restore_snapshot(&volume, log, &snap, BTreeMap::from([(1, node)]));
    assert!(matches!(again, Err(Error::HasRaftState { .. })), "{again:?}");
}
