//! openraft 0.10 `RaftLogStorage` and `RaftLogReader` on the log core: encode entries with
//! bincode, hand them to the core, map errors to `io::Error`.
//!
//! `append` returns once the entries are queued (readable); its `IOFlushed` callback fires
//! from the log's IO thread when the write covering them returned. Appends, truncations and
//! vote saves go through one FIFO queue in the core, so they reach the carrier in the order
//! openraft issued them, as 0.10 requires.

use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft010::entry::RaftEntry;
use openraft010::impls::leader_id_adv;
use openraft010::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft010::type_config::alias::{CommittedLeaderIdOf, LogIdOf, VoteOf};
use openraft010::{OptionalSend, RaftTypeConfig};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, LogIoError, Result};
use crate::kv::adapter::{completed, range_bounds};
use crate::kv::codec::{decode, encode};
use crate::log::{Callback, LogCore, LogEntry};

/// The term a committed leader id carries: the log writes it into every frame header and
/// checks it on reads. Implemented for openraft's default (`leader_id_adv`) leader id.
pub trait CommittedTerm {
    /// The term.
    fn term_u64(&self) -> u64;
}

impl<NID> CommittedTerm for leader_id_adv::LeaderId<u64, NID>
where
    NID: openraft010::NodeId,
{
    fn term_u64(&self) -> u64 {
        self.term
    }
}

/// The raft log storage of one node, for openraft 0.10. Cheap to clone (clones are the log
/// readers).
pub struct LogStore<C: RaftTypeConfig> {
    core: LogCore,
    _c: PhantomData<fn() -> C>,
}

impl<C: RaftTypeConfig> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore { core: self.core.clone(), _c: PhantomData }
    }
}

impl<C: RaftTypeConfig> Debug for LogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").field("core", &self.core).finish()
    }
}

fn io_error(e: Error) -> io::Error {
    io::Error::other(e)
}

impl<C> LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
    LogIdOf<C>: Serialize + DeserializeOwned,
    VoteOf<C>: Serialize + DeserializeOwned,
    CommittedLeaderIdOf<C>: CommittedTerm,
{
    /// The log store on `core` (what [`open_store`](super::open_store) builds).
    pub fn new(core: LogCore) -> Self {
        LogStore { core, _c: PhantomData }
    }

    /// The largest encoded entry (bincode of openraft's entry: log id and payload) this log
    /// accepts: an entry's frame must fit an empty segment
    /// ([`LogCore::max_entry_bytes`]). openraft 0.10 treats an `append` this store refuses
    /// as a fatal storage error: the `Raft` instance shuts down and every later call fails
    /// until the store is reopened. So check a request before a direct `client_write`, or
    /// propose through a [`KvBatcher`](super::KvBatcher) (which refuses such a request
    /// alone).
    ///
    /// ```
    /// use vellum_raft_store::{KvOp, KvRequest, StoreConfig};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let store = vellum_raft_store::v010::open_store_at(
    ///     dir.path().join("node.vlm"),
    ///     StoreConfig::with_volume_bytes(16 << 20),
    /// )?;
    /// let big = KvRequest { ops: vec![KvOp::Put { key: "k".into(), value: vec![0; 2 << 20] }] };
    /// // Refuse it before `client_write`: the log would refuse the append, and openraft 0.10
    /// // would stop.
    /// assert!(big.entry_bytes() > store.log_store.max_entry_bytes());
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_entry_bytes(&self) -> usize {
        self.core.max_entry_bytes()
    }

    /// Index of the committed log id last saved (what the node had committed at start-up).
    pub fn committed_index(&self) -> Option<u64> {
        Self::meta_log_id(self.core.meta().committed.as_ref()).ok().flatten().map(|l| l.index())
    }

    /// The openraft-agnostic core underneath.
    pub fn core(&self) -> &LogCore {
        &self.core
    }

    fn last_log_id(&self) -> Result<Option<LogIdOf<C>>> {
        let (_, last) = self.core.bounds();
        let Some(last) = last else { return Ok(None) };
        let entries = self.core.read(last, last + 1)?;
        match entries.first() {
            Some(e) => Ok(Some(decode::<C::Entry>(&e.payload)?.log_id())),
            None => Ok(None),
        }
    }

    fn meta_log_id(bytes: Option<&Vec<u8>>) -> Result<Option<LogIdOf<C>>> {
        bytes.map(|b| decode::<LogIdOf<C>>(b)).transpose()
    }
}

impl<C> RaftLogReader<C> for LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
    LogIdOf<C>: Serialize + DeserializeOwned,
    VoteOf<C>: Serialize + DeserializeOwned,
    CommittedLeaderIdOf<C>: CommittedTerm,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        let (lo, hi) = range_bounds(&range);
        let entries = self.core.read(lo, hi).map_err(io_error)?;
        entries.iter().map(|e| decode(&e.payload).map_err(io_error)).collect()
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<C>>, io::Error> {
        self.core.meta().vote.as_ref().map(|b| decode(b)).transpose().map_err(io_error)
    }
}

impl<C> RaftLogStorage<C> for LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
    LogIdOf<C>: Serialize + DeserializeOwned,
    VoteOf<C>: Serialize + DeserializeOwned,
    CommittedLeaderIdOf<C>: CommittedTerm,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let purged = Self::meta_log_id(self.core.meta().purged.as_ref()).map_err(io_error)?;
        let last = self.last_log_id().map_err(io_error)?.or_else(|| purged.clone());
        Ok(LogState { last_purged_log_id: purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<C>) -> Result<(), io::Error> {
        let bytes = encode(vote).map_err(io_error)?;
        completed(|done| self.core.save_vote(bytes, done)).await.map_err(io_error)
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        // Recorded, not written: it rides on the next log write (see `LogCore::save_committed`).
        let Some(id) = committed else { return Ok(()) };
        let bytes = encode(&id).map_err(io_error)?;
        let term = id.committed_leader_id().term_u64();
        self.core.save_committed(id.index(), term, bytes).map_err(io_error)
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<C>>, io::Error> {
        Self::meta_log_id(self.core.meta().committed.as_ref()).map_err(io_error)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = Vec::new();
        for entry in entries {
            let (leader, index) = entry.log_id_parts();
            let term = leader.term_u64();
            let payload = encode(&entry).map_err(io_error)?;
            batch.push(LogEntry { index, term, payload: Arc::from(payload) });
        }
        let done: Callback = Box::new(move |r| {
            callback.io_completed(r.map_err(|e| io::Error::other(LogIoError(e))));
        });
        self.core.append(batch, done).map_err(io_error)
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        // The core truncates from an index on: everything after `last_log_id` goes.
        let from = last_log_id.map_or(0, |l| l.index() + 1);
        completed(|done| self.core.truncate(from, done)).await.map_err(io_error)
    }

    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        let bytes = encode(&log_id).map_err(io_error)?;
        let core = self.core.clone();
        let index = log_id.index();
        match tokio::task::spawn_blocking(move || core.purge(index, bytes)).await {
            Ok(r) => r.map_err(io_error),
            Err(_) => Err(io_error(Error::Closed)),
        }
    }
}
