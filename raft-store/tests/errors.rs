//! A failing carrier surfaces as openraft `StorageError`s with the right subject and verb,
//! and poisons the store: never a panic, never a silent success.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use openraft::storage::RaftLogStorage;
use openraft::{ErrorSubject, ErrorVerb, Vote};
use vellum_engine::carrier::{FaultyCarrier, InjectedError};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::LogConfig;
use vellum_raft_store::v09::open_store;

/// The subject and verb of an IO storage error (read through its serde form: openraft 0.9
/// exposes no accessors).
fn subject_and_verb(e: &openraft::StorageError<u64>) -> (ErrorSubject<u64>, ErrorVerb) {
    let io = e.clone().into_io().expect("an IO storage error");
    let v = serde_json::to_value(&io).unwrap();
    (
        serde_json::from_value(v["subject"].clone()).unwrap(),
        serde_json::from_value(v["verb"].clone()).unwrap(),
    )
}

#[tokio::test]
async fn a_failed_write_is_a_storage_error_and_poisons_the_store() {
    let carrier = Arc::new(FaultyCarrier::new(16 << 20, true));
    let volume = Volume::format(
        Box::new(Arc::clone(&carrier)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .unwrap();
    let (mut log, _sm) = open_store(
        &volume,
        LogConfig { segment_bytes: 1 << 20, background_spares: false, ..LogConfig::default() },
    )
    .unwrap();
    log.save_vote(&Vote::new(1, 1)).await.unwrap();
    carrier.inject_error(InjectedError { at_op: carrier.ops(), errno: libc::EIO });
    let e = log.save_vote(&Vote::new(2, 1)).await.unwrap_err();
    assert_eq!(subject_and_verb(&e), (ErrorSubject::Vote, ErrorVerb::Write));
    // The store stays failed: the next write is refused too, as a storage error.
    let e = log.save_vote(&Vote::new(3, 1)).await.unwrap_err();
    assert_eq!(subject_and_verb(&e), (ErrorSubject::Vote, ErrorVerb::Write));
    let e = log
        .truncate(openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), 0))
        .await
        .unwrap_err();
    assert_eq!(subject_and_verb(&e), (ErrorSubject::Logs, ErrorVerb::Delete));
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(Vote::new(2, 1)),
        "reads still answer (the queued state)"
    );
}

/// The same through the openraft 0.10 adapter, whose storage errors are `io::Error`s: the
/// failure says what failed, and the store stays failed.
#[cfg(feature = "openraft-v010")]
#[tokio::test]
async fn a_failed_write_is_an_io_error_through_the_010_adapter() {
    use vellum_raft_store::v010::openraft::storage::RaftLogStorage as _;
    use vellum_raft_store::v010::{LogId, Vote as Vote010};

    let carrier = Arc::new(FaultyCarrier::new(16 << 20, true));
    let volume = Volume::format(
        Box::new(Arc::clone(&carrier)),
        &FormatOptions::default(),
        VolumeOptions::default(),
    )
    .unwrap();
    let (mut log, _sm) = vellum_raft_store::v010::open_store(
        &volume,
        LogConfig { segment_bytes: 1 << 20, background_spares: false, ..LogConfig::default() },
    )
    .unwrap();
    log.save_vote(&Vote010::new(1, 1)).await.unwrap();
    carrier.inject_error(InjectedError { at_op: carrier.ops(), errno: libc::EIO });
    let e = log.save_vote(&Vote010::new(2, 1)).await.unwrap_err();
    assert!(e.to_string().contains("Input/output error"), "the carrier's EIO: {e}");
    let e2 = log.save_vote(&Vote010::new(3, 1)).await.unwrap_err();
    assert!(e2.to_string().contains("reopen the store"), "the store stays failed: {e2}");
    let leader =
        vellum_raft_store::v010::openraft::impls::leader_id_adv::LeaderId { term: 1, node_id: 1 };
    let e3 = log.truncate_after(Some(LogId::new(leader, 0))).await.unwrap_err();
    assert!(e3.to_string().contains("reopen the store"), "{e3}");
}
