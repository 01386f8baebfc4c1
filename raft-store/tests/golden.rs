//! Golden raft volumes: small volumes holding a node's raft store (log segments with a
//! truncation and a purge, a vote, a committed id, a snapshot; from v2 on also the member
//! record and a peer book), written by the build of each raft-log format version and committed
//! under `tests/golden/vN/`. This and every later build must open them and read the same
//! entries, vote, committed id, snapshot and identity.
//!
//! v1: segment format 1 (frames sealed by salt). v2: segment format 2 (frames sealed by salt
//! and offset), `member` and `peers`. v3: segment format 3; the committed id was saved
//! lazily and the store not closed, so it is recovered from the log's `Commit` frame alone
//! (the meta file never held it). v4: segment format 4 (header flags; the `Commit` frame
//! carries the committed id's term, 2, which recovery checks against entry 66). v5: segment
//! format 5 (files may be recycled; each header records where the previous segment's frames
//! end, which recovery checks). v6: segment format 6 (every frame carries its group id); a
//! second group, 3, with entries 1 to 14 interleaved with group 0's and a vote of its own.
//! v7: segment format 7; as v6, and group 3's entries rewritten forward (`Rewrite` frames
//! after the originals, which recovery moves the entries to). v8: segment format 8; as v7,
//! and every vote is a `Vote` frame in the segments (none reached a meta file but through a
//! later save); group 5 voted, was dropped (a drop tombstone, which voids its vote frame) and
//! created again with a new vote. v9: segment format 9; as v8, and the purge point (25) is a
//! `Purge` frame only (no meta save followed it), which recovery adopts, along with the
//! `Commit` frame of 66.
//!
//! Every golden volume also takes a new group after it is opened: a log of a format without
//! group ids rolls to a segment of format 6 for the new group's first frame.
//!
//! Regenerate only for a new format version, into a new directory:
//! `VELLUM_BLESS_GOLDEN=<version> cargo test -p vellum-raft-store --test golden`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder};
use vellum_engine::carrier::MemoryCarrier;
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::log::{self, LogConfig, LogEntry};
use vellum_raft_store::member::{Identity, Incarnation, PeerBook};
use vellum_raft_store::v09::{TypeConfig, Vote, open_store};
use vellum_raft_store::{KvOp, KvRequest};

/// Bytes of every golden raft volume.
const VOLUME_BYTES: usize = 1 << 20;
/// The segment size the golden volumes were written with (smaller than any default, so a
/// build that does not take the size from the log itself would misread them).
const SEGMENT_BYTES: u64 = 64 << 10;

fn golden_path(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/v{version}/raft.vlm"))
}

fn value(index: u64, term: u64) -> Vec<u8> {
    (0..3000u64).map(|i| (i.wrapping_mul(7) ^ index.wrapping_mul(131) ^ term) as u8).collect()
}

fn entry(index: u64, term: u64) -> Entry<TypeConfig> {
    let op = KvOp::Put { key: format!("k{index}"), value: value(index, term) };
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(KvRequest { ops: vec![op] }),
    }
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// The term of each entry the golden log holds after its truncation (index 55 on came from a
/// new leader in term 2).
fn term_of(index: u64) -> u64 {
    if index >= 55 { 2 } else { 1 }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: SEGMENT_BYTES,
        background_spares: false,
        // No idle save of the committed id: it must come from the log (see v3).
        commit_lag: std::time::Duration::from_secs(3600),
        ..LogConfig::default()
    }
}

/// The incarnation of the golden store's peer 2.
const PEER_2: Incarnation = Incarnation([0x22; 16]);

/// Group 3's entries in the v6 golden volume: 1 to 14, term 5, 200 bytes each.
fn group_3_entry(index: u64) -> LogEntry {
    LogEntry { index, term: 5, payload: Arc::from(vec![index as u8 ^ 0x33; 200]) }
}

async fn build(volume: &Volume, version: u32) {
    let (mut store, mut sm) = open_store(volume, config()).unwrap();
    Identity::create(volume, "/raft", 1).unwrap();
    PeerBook::open(volume, "/raft").unwrap().admit(2, PEER_2).unwrap();
    let core = store.core().clone();
    let encode = |e: &Entry<TypeConfig>| -> LogEntry {
        let bytes = bincode::serde::encode_to_vec(e, bincode::config::standard()).unwrap();
        LogEntry { index: e.log_id.index, term: e.log_id.leader_id.term, payload: Arc::from(bytes) }
    };
    let append = |entries: Vec<Entry<TypeConfig>>| {
        let batch: Vec<LogEntry> = entries.iter().map(encode).collect();
        log::wait(|done| core.append(batch, done)).unwrap();
    };
    store.save_vote(&Vote::new(1, 1)).await.unwrap();
    let group_3 = (version >= 6).then(|| core.create_group(3).unwrap());
    let mut next_3 = 1;
    for first in (1..=60).step_by(5) {
        append((first..first + 5).map(|i| entry(i, 1)).collect());
        if let Some(g) = group_3.as_ref().filter(|_| next_3 < 14) {
            let two = vec![group_3_entry(next_3), group_3_entry(next_3 + 1)];
            log::wait(|done| g.append(two, done)).unwrap();
            next_3 += 2;
        }
    }
    if let Some(g) = &group_3 {
        log::wait(|done| g.save_vote(b"group 3 vote".to_vec(), done)).unwrap();
        if version >= 7 {
            // Group 3's entries copied forward as `Rewrite` frames: they are read from there.
            assert_eq!(g.rewrite().unwrap(), 14);
        }
    }
    if version >= 8 {
        let g = core.create_group(5).unwrap();
        log::wait(|done| g.save_vote(b"group 5 old vote".to_vec(), done)).unwrap();
        core.drop_group(5).unwrap();
        let g = core.create_group(5).unwrap();
        log::wait(|done| g.save_vote(b"group 5 new vote".to_vec(), done)).unwrap();
    }
    store.truncate(log_id(1, 55)).await.unwrap();
    store.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
    for first in (55..=70).step_by(4) {
        append((first..first + 4).map(|i| entry(i, 2)).collect());
    }
    sm.apply((1..=30).map(|i| entry(i, term_of(i)))).await.unwrap();
    let snap = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    assert_eq!(snap.meta.last_log_id, Some(log_id(1, 30)));
    store.purge(log_id(1, 25)).await.unwrap();
    store.save_committed(Some(log_id(2, 66))).await.unwrap();
    // The committed id rides on the next log write (a truncation that drops nothing); the
    // store is not closed, so only that write's `Commit` frame holds it.
    store.truncate(log_id(2, 71)).await.unwrap();
    assert_eq!(core.durable_committed_index(), Some(66));
}

/// Opens `bytes` as a node's store and checks everything the golden volume of `version`
/// holds.
async fn verify(version: u32, bytes: &[u8], log: LogConfig) {
    let carrier = Arc::new(MemoryCarrier::from_bytes(bytes));
    let volume = Volume::open(Box::new(Arc::clone(&carrier)), VolumeOptions::default()).unwrap();
    let (mut store, mut sm) = open_store(&volume, log).unwrap();
    if version >= 2 {
        assert_eq!(Identity::load(&volume, "/raft").unwrap().map(|i| i.node_id), Some(1));
        assert_eq!(PeerBook::open(&volume, "/raft").unwrap().get(2), Some(PEER_2));
    }
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 25)));
    assert_eq!(state.last_log_id, Some(log_id(2, 70)));
    let entries = store.try_get_log_entries(0..1000).await.unwrap();
    let want: Vec<Entry<TypeConfig>> = (26..=70).map(|i| entry(i, term_of(i))).collect();
    assert_eq!(entries.len(), want.len());
    for (got, want) in entries.iter().zip(&want) {
        assert_eq!(got.log_id, want.log_id);
        assert_eq!(got.payload, want.payload, "entry {}", want.log_id.index);
    }
    assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new_committed(2, 1)));
    assert_eq!(store.read_committed().await.unwrap(), Some(log_id(2, 66)));
    let snap = sm.get_current_snapshot().await.unwrap().expect("a snapshot");
    assert_eq!(snap.meta.last_log_id, Some(log_id(1, 30)));
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 30)));
    let kv = sm.reader();
    assert_eq!(kv.len(), 30);
    assert_eq!(kv.get("k7"), Some(value(7, 1)));
    // The store takes appends after the golden content.
    let next = entry(71, 2);
    let bytes = bincode::serde::encode_to_vec(&next, bincode::config::standard()).unwrap();
    let le = LogEntry { index: 71, term: 2, payload: Arc::from(bytes) };
    log::wait(|done| store.core().append(vec![le], done)).unwrap();
    assert_eq!(store.get_log_state().await.unwrap().last_log_id, Some(log_id(2, 71)));
    if version >= 6 {
        let g = store.core().group(3).unwrap();
        let want: Vec<LogEntry> = (1..=14).map(group_3_entry).collect();
        assert_eq!(g.read(0, 100).unwrap(), want, "group 3 of the golden volume");
        assert_eq!(g.meta().vote.as_deref(), Some(b"group 3 vote".as_slice()));
    }
    if version >= 8 {
        let g = store.core().group(5).unwrap();
        assert_eq!(g.meta().vote.as_deref(), Some(b"group 5 new vote".as_slice()));
        assert_eq!(g.bounds(), (0, None));
    }
    // A new group on the golden log: its frames go into a segment with group ids.
    let g9 = store.core().create_group(9).unwrap();
    log::wait(|done| g9.append(vec![group_3_entry(1), group_3_entry(2)], done)).unwrap();
    store.core().close();
    drop((store, sm, g9));
    volume.close().unwrap();
    let bytes = carrier.to_bytes();
    let volume =
        Volume::open(Box::new(MemoryCarrier::from_bytes(&bytes)), VolumeOptions::default())
            .unwrap();
    let core = log::LogCore::open(volume, config()).unwrap();
    assert_eq!(core.bounds(), (26, Some(71)), "group 0 after a new group joined the log");
    let g9 = core.group(9).unwrap();
    assert_eq!(g9.read(0, 10).unwrap(), vec![group_3_entry(1), group_3_entry(2)]);
}

/// A log of segment format 8 whose group 5 appended 1 to 3, purged to 10 (past its last
/// entry, as a snapshot install does; the purge point then lived in its meta file only),
/// appended 11 and 12, and was dropped: its meta file is gone, so its frames jump from 3 to
/// 11. The drop's tombstone voids them (docs/RAFT-LOG.md, "Groups"), and the log opens with
/// group 0 alone; the `DropKeepsDamage` mutant refuses it. Written by the build of 0128d34
/// (format 8). A format 9 log cannot take this shape (a `Purge` frame purges the frames
/// before it, in log order), so the crash campaign no longer reaches the rule: this volume
/// keeps it tested.
#[test]
fn a_dropped_group_whose_entries_jumped_in_format_8_reopens() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/v8/dropped-jump.vlm");
    let bytes = std::fs::read(path).unwrap();
    for mutation in [None, Some(log::LogMutation::DropKeepsDamage)] {
        let volume =
            Volume::open(Box::new(MemoryCarrier::from_bytes(&bytes)), VolumeOptions::default())
                .unwrap();
        let opened = log::LogCore::open(volume, LogConfig { mutation, ..config() });
        match mutation {
            None => {
                let core = opened.unwrap();
                assert_eq!(core.groups(), vec![0]);
                assert_eq!(core.bounds(), (1, Some(6)));
            }
            Some(_) => assert!(
                matches!(opened, Err(vellum_raft_store::Error::Corrupt { .. })),
                "the mutant that keeps a dropped group's damage opened the log"
            ),
        }
    }
}

fn bless(version: u32) {
    let path = golden_path(version);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let carrier = Arc::new(MemoryCarrier::new(VOLUME_BYTES as u64));
    let fmt = FormatOptions::default();
    let volume =
        Volume::format(Box::new(Arc::clone(&carrier)), &fmt, VolumeOptions::default()).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(build(&volume, version));
    volume.close().unwrap();
    std::fs::write(&path, carrier.to_bytes()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_raft_volumes_open_and_read_identically() {
    if let Some(v) = std::env::var("VELLUM_BLESS_GOLDEN").ok().and_then(|v| v.parse().ok()) {
        tokio::task::spawn_blocking(move || bless(v)).await.unwrap();
    }
    let mut versions = 0;
    for version in 1..=9 {
        let Ok(bytes) = std::fs::read(golden_path(version)) else { continue };
        assert_eq!(bytes.len(), VOLUME_BYTES, "golden v{version}");
        verify(version, &bytes, config()).await;
        // A build configured with another segment size reads the log all the same.
        let other = LogConfig { segment_bytes: 1 << 20, ..config() };
        verify(version, &bytes, other).await;
        versions += 1;
    }
    assert!(versions >= 9, "the golden raft volumes of formats 1 to 9 are under tests/golden/");
}
