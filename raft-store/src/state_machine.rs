//! The KV state machine: a `String -> bytes` map, applied from the log, snapshotted into the
//! volume.
//!
//! The map lives in memory; its durable form is the latest snapshot. After a restart the
//! machine resumes from that snapshot, and openraft re-applies the committed entries after it
//! from the log.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use openraft::storage::RaftStateMachine;
use openraft::{
    EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use vellum_engine::Volume;

use crate::codec::{decode, encode};
use crate::error::{Error, Result, storage_error};
use crate::metrics as m;
use crate::snapshot;
use crate::types::{KvNode, KvOp, KvResponse, NodeId, TypeConfig};

type Membership = StoredMembership<NodeId, KvNode>;

/// What a snapshot holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SnapshotData {
    last_applied: Option<LogId<NodeId>>,
    membership: Membership,
    data: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug, Default)]
struct State {
    last_applied: Option<LogId<NodeId>>,
    membership: Membership,
    data: BTreeMap<String, Vec<u8>>,
    snapshots_built: u64,
}

/// Read access to the applied KV map (the node serves reads from it).
#[derive(Debug, Clone)]
pub struct KvReader(Arc<RwLock<State>>);

impl KvReader {
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).data.get(key).cloned()
    }

    pub fn len(&self) -> usize {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last log id applied.
    pub fn last_applied(&self) -> Option<LogId<NodeId>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).last_applied
    }
}

/// The state machine of one node.
#[derive(Debug, Clone)]
pub struct KvStateMachine {
    state: Arc<RwLock<State>>,
    volume: Volume,
    dir: String,
}

fn snap_error(
    meta: Option<&SnapshotMeta<NodeId, KvNode>>,
    verb: ErrorVerb,
    e: &Error,
) -> StorageError<NodeId> {
    storage_error(ErrorSubject::Snapshot(meta.map(SnapshotMeta::signature)), verb, e)
}

impl KvStateMachine {
    /// Opens the machine under `dir` of `volume`, resuming from the current snapshot.
    pub fn open(volume: Volume, dir: &str) -> Result<KvStateMachine> {
        let mut state = State::default();
        if let Some((_, bytes)) = snapshot::read(&volume, dir)? {
            let snap: SnapshotData = decode(&bytes)?;
            state.last_applied = snap.last_applied;
            state.membership = snap.membership;
            state.data = snap.data;
        }
        Ok(KvStateMachine { state: Arc::new(RwLock::new(state)), volume, dir: dir.into() })
    }

    pub fn reader(&self) -> KvReader {
        KvReader(Arc::clone(&self.state))
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn current_snapshot(&self) -> Result<Option<Snapshot<TypeConfig>>> {
        let Some((meta, data)) = snapshot::read(&self.volume, &self.dir)? else { return Ok(None) };
        let meta: SnapshotMeta<NodeId, KvNode> = decode(&meta)?;
        Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
    }

    /// Writes `data` as the current snapshot off the async runtime.
    async fn publish(&self, meta: &SnapshotMeta<NodeId, KvNode>, data: Vec<u8>) -> Result<()> {
        let meta_bytes = encode(meta)?;
        let (volume, dir) = (self.volume.clone(), self.dir.clone());
        metrics::gauge!(m::SNAPSHOT_BYTES).set(data.len() as f64);
        tokio::task::spawn_blocking(move || snapshot::write(&volume, &dir, &meta_bytes, &data))
            .await
            .map_err(|_| Error::Closed)?
    }
}

impl RaftSnapshotBuilder<TypeConfig> for KvStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let started = Instant::now();
        let (snap, id) = {
            let mut s = self.write_state();
            s.snapshots_built += 1;
            let snap = SnapshotData {
                last_applied: s.last_applied,
                membership: s.membership.clone(),
                data: s.data.clone(),
            };
            (snap, s.snapshots_built)
        };
        let snapshot_id = match snap.last_applied {
            Some(l) => format!("{}-{}-{}-{id}", l.leader_id.term, l.leader_id.node_id, l.index),
            None => format!("none-{id}"),
        };
        let meta = SnapshotMeta {
            last_log_id: snap.last_applied,
            last_membership: snap.membership.clone(),
            snapshot_id,
        };
        let bytes = encode(&snap).map_err(|e| snap_error(Some(&meta), ErrorVerb::Write, &e))?;
        self.publish(&meta, bytes.clone())
            .await
            .map_err(|e| snap_error(Some(&meta), ErrorVerb::Write, &e))?;
        metrics::histogram!(m::SNAPSHOT_BUILD_DURATION).record(started.elapsed().as_secs_f64());
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<TypeConfig> for KvStateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
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
                EntryPayload::Normal(req) => {
                    let n = req.ops.len();
                    for op in req.ops {
                        match op {
                            KvOp::Put { key, value } => {
                                s.data.insert(key, value);
                            }
                            KvOp::Delete { key } => {
                                s.data.remove(&key);
                            }
                        }
                    }
                    n
                }
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
        let snap: SnapshotData =
            decode(&bytes).map_err(|e| snap_error(Some(meta), ErrorVerb::Read, &e))?;
        self.publish(meta, bytes)
            .await
            .map_err(|e| snap_error(Some(meta), ErrorVerb::Write, &e))?;
        let mut s = self.write_state();
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.data = snap.data;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        self.current_snapshot().map_err(|e| snap_error(None, ErrorVerb::Read, &e))
    }
}
