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

use crate::error::{Error, storage_error};
use crate::metrics as m;
use crate::state_machine::{Flavor, KvMachine};
use crate::types::{KvNode, KvResponse, NodeId, TypeConfig};

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
