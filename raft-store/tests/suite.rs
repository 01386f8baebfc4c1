//! openraft's own storage conformance suite, on a memory carrier and on a file carrier, and
//! on one group's handle of a log whose other groups append all the while.

mod common;

use common::busy::Busy;
use openraft::testing::{StoreBuilder, Suite};
use vellum_engine::carrier::{CarrierOptions, MemoryCarrier};
use vellum_engine::{FormatOptions, Volume, VolumeOptions};
use vellum_raft_store::LogConfig;
use vellum_raft_store::log::LogCore;
use vellum_raft_store::v09::{
    KvStateMachine, LogStore, StorageError, TypeConfig, open_store, storage_error,
};

fn small_log() -> LogConfig {
    LogConfig { segment_bytes: 1 << 20, ..LogConfig::default() }
}

fn to_storage(e: &vellum_raft_store::Error) -> StorageError {
    storage_error(openraft::ErrorSubject::Store, openraft::ErrorVerb::Write, e)
}

struct MemoryBuilder;

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, KvStateMachine, ()> for MemoryBuilder {
    async fn build(&self) -> Result<((), LogStore<TypeConfig>, KvStateMachine), StorageError> {
        let fmt = FormatOptions::default();
        let volume =
            Volume::format(Box::new(MemoryCarrier::new(64 << 20)), &fmt, VolumeOptions::default())
                .map_err(|e| to_storage(&e.into()))?;
        let (log, sm) = open_store(&volume, small_log()).map_err(|e| to_storage(&e))?;
        Ok(((), log, sm))
    }
}

/// Group 7 of a log whose groups 1 to 3 append without pause while the suite runs; its state
/// machine under a directory of its own.
struct GroupBuilder;

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, KvStateMachine, Busy> for GroupBuilder {
    async fn build(&self) -> Result<(Busy, LogStore<TypeConfig>, KvStateMachine), StorageError> {
        let fmt = FormatOptions::default();
        let volume =
            Volume::format(Box::new(MemoryCarrier::new(64 << 20)), &fmt, VolumeOptions::default())
                .map_err(|e| to_storage(&e.into()))?;
        let log = LogCore::open(volume.clone(), small_log()).map_err(|e| to_storage(&e))?;
        let busy: Vec<LogCore> = (1..=3)
            .map(|g| log.create_group(g))
            .collect::<Result<_, _>>()
            .map_err(|e| to_storage(&e))?;
        let mine = log.create_group(7).map_err(|e| to_storage(&e))?;
        let sm = KvStateMachine::open(volume, "/raft/group-7").map_err(|e| to_storage(&e))?;
        Ok((common::busy::start(busy), LogStore::new(mine), sm))
    }
}

struct FileBuilder;

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, KvStateMachine, tempfile::TempDir>
    for FileBuilder
{
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<TypeConfig>, KvStateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let fmt = FormatOptions { capacity_bytes: Some(32 << 20), ..FormatOptions::default() };
        let volume = Volume::create_path(
            &dir.path().join("node.vlm"),
            &fmt,
            CarrierOptions::PRODUCTION,
            VolumeOptions::default(),
        )
        .map_err(|e| to_storage(&e.into()))?;
        let (log, sm) = open_store(&volume, small_log()).map_err(|e| to_storage(&e))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_suite_on_the_memory_carrier() {
    Suite::test_all(MemoryBuilder).expect("openraft storage suite (memory carrier)");
}

#[test]
fn openraft_suite_on_a_group_of_a_busy_log() {
    Suite::test_all(GroupBuilder).expect("openraft storage suite (a group of a busy log)");
    let rounds = common::busy::ROUNDS.load(std::sync::atomic::Ordering::SeqCst);
    assert!(rounds > 0, "the other groups appended nothing while the suite ran");
}

#[test]
fn openraft_suite_on_a_file_carrier() {
    Suite::test_all(FileBuilder).expect("openraft storage suite (file carrier)");
}
