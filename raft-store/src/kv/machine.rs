//! The KV state machine: a `String -> bytes` map, applied from the log, snapshotted into the
//! volume.
//!
//! The map lives in memory; its durable form is the latest snapshot. After a restart the
//! machine resumes from that snapshot, and openraft re-applies the committed entries after it
//! from the log. Snapshots built here and snapshots installed from the leader are published
//! through one [`snapshot::Publisher`]: one at a time, newest wins.
//!
//! The machine is written once, generic over what an openraft version calls a log id, a
//! membership and a snapshot's meta ([`Flavor`]); each adapter (0.9 below, 0.10 in `v010`)
//! only maps its trait's calls onto [`KvMachine`].

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use vellum_engine::Volume;

use super::codec::{decode, encode};
use super::snapshot;
use super::types::KvOp;
use crate::error::{Error, Result};
use crate::metrics as m;

/// The openraft types the state machine stores: its log position, its membership and the
/// meta of its snapshots. One implementation per supported openraft version.
pub trait Flavor: Debug + Send + Sync + 'static {
    /// A log id.
    type LogId: Clone + PartialOrd + Debug + Serialize + DeserializeOwned + Send + Sync;
    /// A stored membership.
    type Membership: Clone + Default + Debug + Serialize + DeserializeOwned + Send + Sync;
    /// A snapshot's meta.
    type SnapshotMeta: Clone + Debug + Serialize + DeserializeOwned + Send + Sync;
    /// The last log id and membership a snapshot's meta covers.
    fn meta_position(meta: &Self::SnapshotMeta) -> (Option<Self::LogId>, Self::Membership);
}

/// What a snapshot holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct SnapshotData<F: Flavor> {
    pub(crate) last_applied: Option<F::LogId>,
    pub(crate) membership: F::Membership,
    pub(crate) data: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug)]
pub(crate) struct State<F: Flavor> {
    pub(crate) last_applied: Option<F::LogId>,
    pub(crate) membership: F::Membership,
    data: BTreeMap<String, Vec<u8>>,
    /// Bytes of the keys and values in `data`: about what the next snapshot of this state
    /// takes on the volume (the node keeps room for it, `KvReaderOf::bytes`).
    bytes: u64,
    snapshots_built: u64,
}

impl<F: Flavor> Default for State<F> {
    fn default() -> Self {
        State {
            last_applied: None,
            membership: F::Membership::default(),
            data: BTreeMap::new(),
            bytes: 0,
            snapshots_built: 0,
        }
    }
}

/// Bytes of a key and its value.
fn pair_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

impl<F: Flavor> State<F> {
    /// Applies the operations of one request in order; returns how many.
    pub(crate) fn apply_ops(&mut self, ops: Vec<KvOp>) -> usize {
        let n = ops.len();
        for op in ops {
            match op {
                KvOp::Put { key, value } => {
                    let added = pair_bytes(&key, &value);
                    let key_len = key.len();
                    if let Some(old) = self.data.insert(key, value) {
                        self.bytes -= (key_len + old.len()) as u64;
                    }
                    self.bytes += added;
                }
                KvOp::Delete { key } => {
                    if let Some(old) = self.data.remove(&key) {
                        self.bytes -= pair_bytes(&key, &old);
                    }
                }
            }
        }
        n
    }

    /// Replaces the map (a snapshot's).
    pub(crate) fn set_data(&mut self, data: BTreeMap<String, Vec<u8>>) {
        self.bytes = data.iter().map(|(k, v)| pair_bytes(k, v)).sum();
        self.data = data;
    }
}

/// Read access to the applied KV map (the node serves reads from it): what this member has
/// applied, which may lag the leader (for a read that must see every acknowledged write,
/// call openraft's `ensure_linearizable` first). `v010::KvReader` and `v09::KvReader` name it
/// for each adapter.
///
/// ```
/// use vellum_raft_store::{MIN_VOLUME_BYTES, StoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = vellum_raft_store::v010::open_store_at(
///     dir.path().join("node.vlm"),
///     StoreConfig::with_volume_bytes(MIN_VOLUME_BYTES),
/// )?;
/// let reader = store.reader.clone(); // or store.state_machine.reader()
/// assert_eq!(reader.get("hello"), None); // nothing applied yet
/// assert!(reader.is_empty());
/// assert_eq!(reader.last_applied(), None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct KvReaderOf<F: Flavor>(Arc<RwLock<State<F>>>);

impl<F: Flavor> Clone for KvReaderOf<F> {
    fn clone(&self) -> Self {
        KvReaderOf(Arc::clone(&self.0))
    }
}

impl<F: Flavor> KvReaderOf<F> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State<F>> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value of `key` as applied on this member (a follower's may lag the leader's).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.read().data.get(key).cloned()
    }

    /// Up to `limit` pairs whose key starts with `prefix` (all keys: `""`), in byte order of
    /// the keys, and whether more matched (the limit cut the result). For the node's prefix
    /// read (`GET /v1/kv?prefix=`); it clones what it returns under the read lock.
    pub fn range(&self, prefix: &str, limit: usize) -> (Vec<(String, Vec<u8>)>, bool) {
        let state = self.read();
        let mut matching = state
            .data
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix));
        let pairs: Vec<_> =
            matching.by_ref().take(limit).map(|(k, v)| (k.clone(), v.clone())).collect();
        (pairs, matching.next().is_some())
    }

    /// Keys in the map.
    pub fn len(&self) -> usize {
        self.read().data.len()
    }

    /// How many handles share the machine's state: its readers, the machine itself and its
    /// clones (the ones openraft's snapshot builds hold). Once only a caller's own readers
    /// are left, nothing of the machine runs any more (a retired instance's worker and
    /// snapshot builds are done).
    pub fn sharers(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// Bytes of the keys and values in the map: about what its next snapshot takes.
    pub fn bytes(&self) -> u64 {
        self.read().bytes
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last log id applied.
    pub fn last_applied(&self) -> Option<F::LogId> {
        self.read().last_applied.clone()
    }
}

/// A pause point for tests: called with the stage a snapshot build reached.
#[cfg(test)]
type Hook = Arc<dyn Fn(&'static str) + Send + Sync>;

/// The state machine of one node, for the openraft version of `F`.
pub struct KvMachine<F: Flavor> {
    state: Arc<RwLock<State<F>>>,
    volume: Volume,
    dir: String,
    publisher: Arc<snapshot::Publisher>,
    #[cfg(test)]
    pub(crate) hook: Option<Hook>,
}

impl<F: Flavor> Clone for KvMachine<F> {
    fn clone(&self) -> Self {
        KvMachine {
            state: Arc::clone(&self.state),
            volume: self.volume.clone(),
            dir: self.dir.clone(),
            publisher: Arc::clone(&self.publisher),
            #[cfg(test)]
            hook: self.hook.clone(),
        }
    }
}

impl<F: Flavor> std::fmt::Debug for KvMachine<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvMachine").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl<F: Flavor> KvMachine<F> {
    /// Opens the machine under `dir` of `volume`, resuming from the current snapshot.
    pub fn open(volume: Volume, dir: &str) -> Result<KvMachine<F>> {
        let leftovers = snapshot::remove_leftovers(&volume, dir)?;
        if leftovers > 0 {
            tracing::info!(leftovers, "removed unpublished snapshot files a crash left behind");
        }
        let mut state = State::default();
        if let Some((_, bytes)) = snapshot::read(&volume, dir)? {
            let snap: SnapshotData<F> = decode(&bytes)?;
            state.last_applied = snap.last_applied;
            state.membership = snap.membership;
            state.set_data(snap.data);
        }
        Ok(KvMachine {
            state: Arc::new(RwLock::new(state)),
            volume,
            dir: dir.into(),
            publisher: Arc::default(),
            #[cfg(test)]
            hook: None,
        })
    }

    /// A reader of the applied map (cheap to clone; shares the machine's state).
    pub fn reader(&self) -> KvReaderOf<F> {
        KvReaderOf(Arc::clone(&self.state))
    }

    pub(crate) fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, State<F>> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn read_state(&self) -> std::sync::RwLockReadGuard<'_, State<F>> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current snapshot's meta and bytes, if there is one.
    pub(crate) fn current_snapshot(&self) -> Result<Option<(F::SnapshotMeta, Vec<u8>)>> {
        let Some((meta, data)) = snapshot::read(&self.volume, &self.dir)? else { return Ok(None) };
        Ok(Some((decode(&meta)?, data)))
    }

    /// Takes what a snapshot of the current state holds, and how many were built so far.
    pub(crate) fn snapshot_data(&self) -> (SnapshotData<F>, u64) {
        let mut s = self.write_state();
        s.snapshots_built += 1;
        let snap = SnapshotData {
            last_applied: s.last_applied.clone(),
            membership: s.membership.clone(),
            data: s.data.clone(),
        };
        (snap, s.snapshots_built)
    }

    /// Encodes and publishes a snapshot this machine built; returns its bytes.
    pub(crate) async fn build(
        &self,
        meta: &F::SnapshotMeta,
        snap: &SnapshotData<F>,
    ) -> Result<Vec<u8>> {
        let started = Instant::now();
        let bytes = encode(snap)?;
        self.stage("built");
        self.publish(meta, bytes.clone()).await?;
        metrics::histogram!(m::SNAPSHOT_BUILD_DURATION).record(started.elapsed().as_secs_f64());
        Ok(bytes)
    }

    /// Checks that `bytes` decode as a snapshot of this machine, as installing it will
    /// decode them: a pure function of `bytes`, which touches no state. The node calls it
    /// before handing a received snapshot to openraft, where a snapshot that does not decode
    /// is a storage error that stops the Raft core. The decode is bounded by the input's
    /// size (`codec`); it costs what the decoded map holds, in memory, until it returns.
    pub fn check_snapshot(bytes: &[u8]) -> Result<()> {
        decode::<SnapshotData<F>>(bytes).map(drop)
    }

    /// Installs a snapshot received from the leader: checks it decodes, publishes it, and
    /// replaces the state with it.
    pub(crate) async fn install(&self, meta: &F::SnapshotMeta, bytes: Vec<u8>) -> Result<()> {
        let snap: SnapshotData<F> = decode(&bytes)?;
        self.publish(meta, bytes).await?;
        let (last, membership) = F::meta_position(meta);
        let mut s = self.write_state();
        s.last_applied = last;
        s.membership = membership;
        s.set_data(snap.data);
        Ok(())
    }

    /// Writes `data` as the current snapshot off the async runtime, unless the current one
    /// is newer (then it is left in place).
    async fn publish(&self, meta: &F::SnapshotMeta, data: Vec<u8>) -> Result<snapshot::Published> {
        let meta_bytes = encode(meta)?;
        let (volume, dir) = (self.volume.clone(), self.dir.clone());
        let publisher = Arc::clone(&self.publisher);
        let (last, _) = F::meta_position(meta);
        let len = data.len();
        let compared = last.clone();
        let published = tokio::task::spawn_blocking(move || {
            publisher.write(&volume, &dir, &meta_bytes, &data, |current| {
                // A current meta that does not decode is not newer: replace it.
                decode::<F::SnapshotMeta>(current).is_ok_and(|c| F::meta_position(&c).0 > compared)
            })
        })
        .await
        .map_err(|_| Error::Closed)??;
        match published {
            snapshot::Published::Current => {
                metrics::gauge!(m::SNAPSHOT_BYTES).set(len as f64);
            }
            snapshot::Published::Superseded => tracing::info!(
                last_log_id = ?last,
                "a snapshot was not published: a newer one is current"
            ),
        }
        Ok(published)
    }

    #[cfg(test)]
    fn stage(&self, stage: &'static str) {
        if let Some(hook) = &self.hook {
            hook(stage);
        }
    }

    #[cfg(not(test))]
    #[allow(clippy::unused_self)] // the test build's hook reads `self`
    fn stage(&self, _stage: &'static str) {}
}

#[cfg(all(test, feature = "openraft-v010"))]
mod tests {
    use super::*;
    use crate::v010::V010;

    fn put(key: &str, value: &[u8]) -> KvOp {
        KvOp::Put { key: key.into(), value: value.to_vec() }
    }

    #[test]
    fn the_byte_count_follows_puts_overwrites_deletes_and_snapshots() {
        let mut s = State::<V010>::default();
        s.apply_ops(vec![put("a", b"1234"), put("bb", b"12")]);
        assert_eq!(s.bytes, 5 + 4);
        s.apply_ops(vec![put("a", b"1")]);
        assert_eq!(s.bytes, 2 + 4, "an overwrite counts the new value only");
        s.apply_ops(vec![KvOp::Delete { key: "bb".into() }, KvOp::Delete { key: "zz".into() }]);
        assert_eq!(s.bytes, 2, "a delete of a missing key changes nothing");
        let snapshot = BTreeMap::from([("k".to_string(), vec![0u8; 10])]);
        s.set_data(snapshot);
        assert_eq!(s.bytes, 11);
    }
}
