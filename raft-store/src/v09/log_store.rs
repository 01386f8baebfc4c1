//! openraft 0.9 `RaftLogStorage` and `RaftLogReader` on the log core: encode entries with
//! bincode, hand them to the core, map errors to `StorageError`. Nothing else lives here, so
//! an openraft 0.10 adapter is an addition, not a rewrite.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogId, RaftLogReader,
    RaftTypeConfig, StorageError, Vote,
};

use super::storage_error;
use crate::error::{Error, LogIoError, Result};
use crate::kv::adapter::{completed, range_bounds};
use crate::kv::codec::{decode, encode};
use crate::log::{Callback, LogCore, LogEntry};

/// The raft log storage of one node. Cheap to clone (clones are the log readers).
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

impl<C: RaftTypeConfig> LogStore<C> {
    /// The log store on `core` (what [`open_store`](super::open_store) builds).
    pub fn new(core: LogCore) -> Self {
        LogStore { core, _c: PhantomData }
    }

    /// The largest encoded entry (bincode of openraft's `Entry<C>`: log id and payload) this
    /// log accepts; see [`LogCore::max_entry_bytes`]. An `append` with a larger entry is
    /// refused with a storage error, which stops openraft's core: check before
    /// `client_write`, or propose through a [`Batcher`](crate::kv::batcher::Batcher).
    pub fn max_entry_bytes(&self) -> usize {
        self.core.max_entry_bytes()
    }

    /// Index of the committed log id last saved (what the node had committed at start-up).
    pub fn committed_index(&self) -> Option<u64> {
        Self::meta_log_id(self.core.meta().committed.as_ref()).ok().flatten().map(|l| l.index)
    }

    /// The openraft-agnostic core underneath.
    pub fn core(&self) -> &LogCore {
        &self.core
    }

    fn decode_entry(e: &LogEntry) -> Result<C::Entry> {
        decode(&e.payload)
    }

    fn last_log_id(&self) -> Result<Option<LogId<C::NodeId>>> {
        let (_, last) = self.core.bounds();
        let Some(last) = last else { return Ok(None) };
        let entries = self.core.read(last, last + 1)?;
        match entries.first() {
            Some(e) => Ok(Some(Self::decode_entry(e)?.get_log_id().clone())),
            None => Ok(None),
        }
    }

    fn meta_log_id(bytes: Option<&Vec<u8>>) -> Result<Option<LogId<C::NodeId>>> {
        bytes.map(|b| decode::<LogId<C::NodeId>>(b)).transpose()
    }
}

// openraft's `StorageError` is large; it is the trait's error type, not ours to box.
#[allow(clippy::result_large_err)]
impl<C: RaftTypeConfig> RaftLogReader<C> for LogStore<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        let (lo, hi) = range_bounds(&range);
        let read = |e: &Error| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e);
        let entries = self.core.read(lo, hi).map_err(|e| read(&e))?;
        entries.iter().map(|e| Self::decode_entry(e).map_err(|e| read(&e))).collect()
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for LogStore<C> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        let read = |e: &Error| storage_error(ErrorSubject::Logs, ErrorVerb::Read, e);
        let purged = Self::meta_log_id(self.core.meta().purged.as_ref()).map_err(|e| read(&e))?;
        let last = self.last_log_id().map_err(|e| read(&e))?.or_else(|| purged.clone());
        Ok(LogState { last_purged_log_id: purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let write = |e: &Error| storage_error(ErrorSubject::Vote, ErrorVerb::Write, e);
        let bytes = encode(vote).map_err(|e| write(&e))?;
        completed(|done| self.core.save_vote(bytes, done)).await.map_err(|e| write(&e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        let read = |e: &Error| storage_error(ErrorSubject::Vote, ErrorVerb::Read, e);
        self.core.meta().vote.as_ref().map(|b| decode(b)).transpose().map_err(|e| read(&e))
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        // Recorded, not written: it rides on the next log write (see `LogCore::save_committed`).
        // openraft only re-applies a little more after a restart when it lags.
        let write = |e: &Error| storage_error(ErrorSubject::Store, ErrorVerb::Write, e);
        let Some(id) = committed else { return Ok(()) };
        let bytes = encode(&id).map_err(|e| write(&e))?;
        self.core.save_committed(id.index, id.leader_id.get_term(), bytes).map_err(|e| write(&e))
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        let read = |e: &Error| storage_error(ErrorSubject::Store, ErrorVerb::Read, e);
        Self::meta_log_id(self.core.meta().committed.as_ref()).map_err(|e| read(&e))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let write = |e: &Error| storage_error(ErrorSubject::Logs, ErrorVerb::Write, e);
        let mut batch = Vec::new();
        for entry in entries {
            let id = entry.get_log_id().clone();
            let payload = encode(&entry).map_err(|e| write(&e))?;
            batch.push(LogEntry {
                index: id.index,
                term: id.leader_id.get_term(),
                payload: Arc::from(payload),
            });
        }
        let done: Callback = Box::new(move |r| {
            callback.log_io_completed(r.map_err(|e| std::io::Error::other(LogIoError(e))));
        });
        self.core.append(batch, done).map_err(|e| write(&e))
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let write = |e: &Error| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e);
        completed(|done| self.core.truncate(log_id.index, done)).await.map_err(|e| write(&e))
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let write = |e: &Error| storage_error(ErrorSubject::Logs, ErrorVerb::Delete, e);
        let bytes = encode(&log_id).map_err(|e| write(&e))?;
        let core = self.core.clone();
        let r = tokio::task::spawn_blocking(move || core.purge(log_id.index, bytes)).await;
        match r {
            Ok(r) => r.map_err(|e| write(&e)),
            Err(_) => Err(write(&Error::Closed)),
        }
    }
}
