//! Exporting a store's current snapshot and restoring one into a new store: the raft-store
//! side of archives (`vellum serve --snapshot-archive`, `vellum backup`, `vellum restore`).
//!
//! An exported snapshot is the snapshot file's two parts as they are stored: the encoded
//! openraft `SnapshotMeta` (attribute `meta` of `DIR/snapshot/current`) and the encoded state
//! machine (the file's bytes). Both are plain byte strings, so an archive can carry them
//! unchanged and a reader can check them by checksum before decoding anything.
//!
//! A restore builds a store that openraft starts from the snapshot, as if this node had
//! installed it from a leader and purged its log: the state machine at the snapshot's last
//! log id `L`, the log purged up to `L` (empty, next index `L + 1`), no vote, no committed
//! id. The snapshot's membership is replaced by the new cluster's members (same log id, so
//! it stays at or before `L`): every restored node is then an initialized voter of the new
//! cluster (openraft's `is_initialized` is true once the log has a last id, here the purged
//! one), which starts elections on its election timeout like any follower that lost its
//! leader; `initialize` is refused as "already initialized", which the node treats as done.
//!
//! Invariant: a restore never writes into a store that holds any raft state (vote, log
//! entries, a purge record, a committed id, applied state or a snapshot):
//! [`Error::HasRaftState`].

use std::collections::{BTreeMap, BTreeSet};

use openraft010::type_config::alias::SnapshotMetaOf;
use openraft010::{Membership, SnapshotMeta, StoredMembership};
use vellum_engine::Volume;

use super::{KvNode, LogId, TypeConfig, V010};
use crate::error::{Error, Result};
use crate::kv::codec::{decode, encode};
use crate::kv::machine::SnapshotData as Machine;
use crate::kv::snapshot;
use crate::log::{LogConfig, LogCore};

/// The openraft 0.10 meta of a snapshot.
pub type Meta = SnapshotMetaOf<TypeConfig>;

/// A snapshot as the store keeps it: encoded meta and data, with the meta decoded.
#[derive(Debug, Clone)]
pub struct ExportedSnapshot {
    /// The decoded meta (last log id, membership).
    pub meta: Meta,
    /// The meta as stored (the `meta` attribute of the snapshot file).
    pub meta_bytes: Vec<u8>,
    /// The state machine as stored (the snapshot file's bytes).
    pub data: Vec<u8>,
}

impl ExportedSnapshot {
    /// Decodes `meta_bytes` and checks that `data` decodes as a state machine at the same
    /// log id: what a restore would use, checked before anything is written.
    pub fn decode(meta_bytes: Vec<u8>, data: Vec<u8>) -> Result<ExportedSnapshot> {
        let meta: Meta =
            decode(&meta_bytes).map_err(|e| Error::BadSnapshot(format!("meta: {e}")))?;
        let machine: Machine<V010> =
            decode(&data).map_err(|e| Error::BadSnapshot(format!("data: {e}")))?;
        if machine.last_applied != meta.last_log_id {
            return Err(Error::BadSnapshot(format!(
                "the meta says log id {:?}, the data is at {:?}",
                meta.last_log_id, machine.last_applied
            )));
        }
        Ok(ExportedSnapshot { meta, meta_bytes, data })
    }

    /// A snapshot of `data` at log id `(term, index)` (proposed by `leader`) with `members`
    /// as voters, encoded as the store encodes its own: for tools and tests that need a
    /// snapshot without running a cluster.
    pub fn build(
        term: u64,
        leader: u64,
        index: u64,
        members: BTreeMap<u64, KvNode>,
        data: BTreeMap<String, Vec<u8>>,
    ) -> Result<ExportedSnapshot> {
        let leader_id = openraft010::vote::leader_id_adv::LeaderId { term, node_id: leader };
        let last: LogId = openraft010::LogId::new(leader_id, index);
        let voters: BTreeSet<u64> = members.keys().copied().collect();
        let membership = Membership::new(vec![voters], members)
            .map_err(|e| Error::BadSnapshot(format!("the membership: {e}")))?;
        let stored = StoredMembership::new(Some(last), membership);
        let machine =
            Machine::<V010> { last_applied: Some(last), membership: stored.clone(), data };
        let meta: Meta = SnapshotMeta { last_log_id: Some(last), last_membership: stored };
        let (meta_bytes, data) = (encode(&meta)?, encode(&machine)?);
        Ok(ExportedSnapshot { meta, meta_bytes, data })
    }

    /// The last log id the snapshot covers.
    pub fn last_log_id(&self) -> Option<LogId> {
        self.meta.last_log_id
    }

    /// `(term, index)` of the last log id, if any.
    pub fn position(&self) -> Option<(u64, u64)> {
        self.meta.last_log_id.map(|l| (l.leader_id.term, l.index))
    }

    /// The members (voters and learners) of the snapshot's membership, with their addresses.
    pub fn members(&self) -> BTreeMap<u64, KvNode> {
        self.meta
            .last_membership
            .membership()
            .nodes()
            .map(|(id, node)| (*id, node.clone()))
            .collect()
    }
}

/// The current snapshot of the store under `log.dir` of `volume`, if there is one. Blocking
/// (reads the snapshot file): call it from `spawn_blocking`. Safe while the store runs: the
/// file read is the one published last (publications replace it by rename).
pub fn export_snapshot(volume: &Volume, log: &LogConfig) -> Result<Option<ExportedSnapshot>> {
    let Some((meta_bytes, data)) = snapshot::read(volume, &log.dir)? else { return Ok(None) };
    let meta: Meta = decode(&meta_bytes)?;
    Ok(Some(ExportedSnapshot { meta, meta_bytes, data }))
}

/// Restores `snap` into the store under `log.dir` of `volume`, which must hold no raft state,
/// with `members` (all voters) as the membership; returns the restored last log id. Blocking:
/// call it before the runtime's work starts or from `spawn_blocking`. The log core it opens
/// is closed again; open the store as usual afterwards.
pub fn restore_snapshot(
    volume: &Volume,
    log: LogConfig,
    snap: &ExportedSnapshot,
    members: BTreeMap<u64, KvNode>,
) -> Result<LogId> {
    if members.is_empty() {
        return Err(Error::Config("a restore needs the new cluster's members"));
    }
    let Some(last) = snap.meta.last_log_id else {
        return Err(Error::BadSnapshot("the snapshot covers no log entry".into()));
    };
    let mut machine: Machine<V010> =
        decode(&snap.data).map_err(|e| Error::BadSnapshot(format!("data: {e}")))?;
    if machine.last_applied != Some(last) {
        return Err(Error::BadSnapshot("meta and data disagree on the log id".into()));
    }
    let dir = log.dir.clone();
    let core = LogCore::open(volume.clone(), log)?;
    let result = (|| {
        refuse_state(volume, &core, &dir)?;
        let voters: BTreeSet<u64> = members.keys().copied().collect();
        let membership = Membership::new(vec![voters], members)
            .map_err(|e| Error::BadSnapshot(format!("the new membership: {e}")))?;
        let stored =
            StoredMembership::new(snap.meta.last_membership.log_id().to_owned(), membership);
        machine.membership = stored.clone();
        let meta: Meta = SnapshotMeta { last_log_id: Some(last), last_membership: stored };
        let (meta_bytes, data) = (encode(&meta)?, encode(&machine)?);
        snapshot::Publisher::default().write(volume, &dir, &meta_bytes, &data, |_| false)?;
        core.purge(last.index, encode(&last)?)?;
        Ok(last)
    })();
    core.close();
    result
}

/// Whether the store under `log.dir` of `volume` (no store open on it) holds any raft state
/// (what [`restore_snapshot`] refuses). Blocking.
pub fn has_raft_state(volume: &Volume, log: &LogConfig) -> Result<bool> {
    let dir = log.dir.clone();
    let core = LogCore::open(volume.clone(), log.clone())?;
    let state = refuse_state(volume, &core, &dir);
    core.close();
    match state {
        Ok(()) => Ok(false),
        Err(Error::HasRaftState { .. }) => Ok(true),
        Err(e) => Err(e),
    }
}

fn refuse_state(volume: &Volume, core: &LogCore, dir: &str) -> Result<()> {
    let meta = core.meta();
    let what = if meta.vote.is_some() {
        Some("a vote")
    } else if meta.purged_index.is_some() || meta.purged.is_some() {
        Some("a purged log")
    } else if core.bounds().1.is_some() {
        Some("log entries")
    } else if meta.committed.is_some() {
        Some("a committed id")
    } else if snapshot::read(volume, dir)?.is_some() {
        Some("a snapshot")
    } else {
        None
    };
    // The state machine's applied state lives in its snapshot: checked above.
    match what {
        Some(what) => Err(Error::HasRaftState { what }),
        None => Ok(()),
    }
}
