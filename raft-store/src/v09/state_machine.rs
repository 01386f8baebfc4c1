//! openraft 0.9 `RaftStateMachine` and `RaftSnapshotBuilder` on [`KvMachine`]: apply entries to
//! the map, build and install snapshots through the machine's publisher, map errors to
//! `StorageError`.

use std::io::Cursor;
use std::time::Instant;

use openraft::storage::RaftStateMachine;
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StoredMembership,
};

use super::storage_error;
use super::{KvNode, KvResponse, NodeId, TypeConfig};
use crate::error::Error;
use crate::kv::machine::{Flavor, KvMachine};
use crate::metrics as m;

/// openraft 0.9's types, as the state machine stores them.
#[derive(Debug)]
pub enum V09 {}

impl Flavor for V09 {
    type LogId = LogId<NodeId>;
    type Membership = StoredMembership<NodeId, KvNode>;
    type SnapshotMeta = SnapshotMeta<NodeId, KvNode>;
    fn meta_position(meta: &Self::SnapshotMeta) -> (Option<Self::LogId>, Self::Membership) {
        (meta.last_log_id, meta.last_membership.clone())
    }
}

fn snap_error(
    meta: Option<&SnapshotMeta<NodeId, KvNode>>,
    verb: ErrorVerb,
    e: &Error,
) -> StorageError<NodeId> {
    storage_error(ErrorSubject::Snapshot(meta.map(SnapshotMeta::signature)), verb, e)
}

impl RaftSnapshotBuilder<TypeConfig> for KvMachine<V09> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (snap, id) = self.snapshot_data();
        let snapshot_id = match snap.last_applied {
            Some(l) => format!("{}-{}-{}-{id}", l.leader_id.term, l.leader_id.node_id, l.index),
            None => format!("none-{id}"),
        };
        let meta = SnapshotMeta {
            last_log_id: snap.last_applied,
            last_membership: snap.membership.clone(),
            snapshot_id,
        };
        let bytes = self
            .build(&meta, &snap)
            .await
            .map_err(|e| snap_error(Some(&meta), ErrorVerb::Write, &e))?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<TypeConfig> for KvMachine<V09> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, KvNode>), StorageError<NodeId>>
    {
        let s = self.read_state();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<KvResponse>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = Instant::now();
        let mut s = self.write_state();
        let mut out = Vec::new();
        for entry in entries {
            s.last_applied = Some(entry.log_id);
            let applied = match entry.payload {
                EntryPayload::Blank => 0,
                EntryPayload::Normal(req) => s.apply_ops(req.ops),
                EntryPayload::Membership(mem) => {
                    s.membership = StoredMembership::new(Some(entry.log_id), mem);
                    0
                }
            };
            out.push(KvResponse { applied });
        }
        drop(s);
        metrics::histogram!(m::APPLY_DURATION).record(started.elapsed().as_secs_f64());
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, KvNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        self.install(meta, bytes).await.map_err(|e| {
            let verb =
                if matches!(e, Error::Decode(_)) { ErrorVerb::Read } else { ErrorVerb::Write };
            snap_error(Some(meta), verb, &e)
        })
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let current = self.current_snapshot().map_err(|e| snap_error(None, ErrorVerb::Read, &e))?;
        Ok(current.map(|(meta, data)| Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use std::sync::Mutex;

    use openraft::{CommittedLeaderId, Entry, Membership};
    use vellum_engine::testing::{FaultRng, FaultyCarrier, MemoryCarrier};
    use vellum_engine::{FormatOptions, VolumeOptions};

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use vellum_engine::Volume;

    use super::super::{KvOp, KvRequest, KvStateMachine, NodeId, TypeConfig};
    use super::*;
    use crate::kv::codec::{decode, encode};
    use crate::kv::machine::SnapshotData;
    use openraft::storage::RaftStateMachine;
    use openraft::{EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StoredMembership};
    use std::io::Cursor;

    fn log_id(index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn put(index: u64) -> Entry<TypeConfig> {
        let op = KvOp::Put { key: format!("k{index}"), value: vec![index as u8; 100] };
        Entry { log_id: log_id(index), payload: EntryPayload::Normal(KvRequest { ops: vec![op] }) }
    }

    /// openraft builds snapshots on a task of their own while the leader's snapshot is being
    /// installed. A build that cloned its state before an install and publishes after it
    /// must not replace the installed (newer) snapshot; then a power cut and a reopen find
    /// the newest one, whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn raced_build_and_install_publish_the_newest_and_survive_a_crash() {
        let carrier = Arc::new(FaultyCarrier::new(16 << 20, true));
        let volume = Volume::format(
            Box::new(Arc::clone(&carrier)),
            &FormatOptions::default(),
            VolumeOptions::default(),
        )
        .unwrap();
        let mut sm = KvStateMachine::open(volume, "/raft").unwrap();
        let membership = StoredMembership::new(Some(log_id(0)), Membership::new(vec![], ()));
        let mut index = 0;
        let mut last_installed = String::new();
        for round in 0..12 {
            sm.apply((index + 1..=index + 5).map(put)).await.unwrap();
            index += 5;
            let (reached_tx, reached_rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let go_rx = Mutex::new(go_rx);
            let mut builder = sm.get_snapshot_builder().await;
            builder.hook = Some(Arc::new(move |stage| {
                let _ = reached_tx.send(stage);
                let _ = go_rx.lock().unwrap().recv();
            }));
            let build = tokio::spawn(async move { builder.build_snapshot().await });
            let stage = tokio::task::spawn_blocking(move || reached_rx.recv().unwrap());
            assert_eq!(stage.await.unwrap(), "built");
            // Meanwhile the leader's newer snapshot arrives and is installed.
            index += 100;
            let data = SnapshotData::<V09> {
                last_applied: Some(log_id(index)),
                membership: membership.clone(),
                data: BTreeMap::from([(format!("installed{round}"), vec![round as u8])]),
            };
            let meta = SnapshotMeta {
                last_log_id: Some(log_id(index)),
                last_membership: membership.clone(),
                snapshot_id: format!("installed-{round}"),
            };
            let bytes = encode(&data).unwrap();
            sm.install_snapshot(&meta, Box::new(Cursor::new(bytes))).await.unwrap();
            go_tx.send(()).unwrap();
            let built = build.await.unwrap().unwrap();
            assert!(built.meta.last_log_id < meta.last_log_id);
            let current = sm.get_current_snapshot().await.unwrap().unwrap();
            assert_eq!(current.meta.snapshot_id, meta.snapshot_id, "round {round}: newest wins");
            last_installed = meta.snapshot_id;
        }
        carrier.cut_power();
        for seed in 0..4 {
            let image = carrier.crash_image(&mut FaultRng::new(seed));
            let volume =
                Volume::open(Box::new(MemoryCarrier::from_bytes(&image)), VolumeOptions::default())
                    .unwrap();
            let mut sm = KvStateMachine::open(volume.clone(), "/raft").unwrap();
            let current = sm.get_current_snapshot().await.unwrap().unwrap();
            assert_eq!(current.meta.snapshot_id, last_installed);
            let data: SnapshotData<V09> = decode(&current.snapshot.into_inner()).unwrap();
            assert_eq!(data.last_applied, Some(log_id(index)));
            assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(index)));
            let names: Vec<_> = volume.list("/raft/snapshot").unwrap();
            assert_eq!(names.len(), 1, "only `current` is left: {names:?}");
        }
    }
}
