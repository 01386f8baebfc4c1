//! The proposal batcher (`crate::batcher`) on openraft 0.10: [`Proposals010`] names an
//! openraft 0.10 type configuration for the batcher, and `Raft<C, SM>` submits its entries.
//!
//! 0.10 already makes many entries durable in one write; the batcher still pays where the
//! cost is per entry (encoding, framing, replication, apply): N requests become one entry.
//! Entries are submitted without waiting for the previous one to commit when the batcher
//! allows several in flight, as 0.10 pipelines them.

use std::fmt;
use std::marker::PhantomData;

use openraft010::errors::{ClientWriteError, RaftError};
use openraft010::storage::RaftStateMachine;
use openraft010::{Raft, RaftTypeConfig};

use super::TypeConfig;
use crate::kv::batcher::{
    Batcher, KvBatching, Proposals, ProposeError, Submit, SubmitResult, Written,
};

/// An openraft 0.10 type configuration, as the batcher sees it: `Batching<Proposals010<C>>`.
pub struct Proposals010<C>(PhantomData<fn() -> C>);

impl<C> fmt::Debug for Proposals010<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Proposals010")
    }
}

impl<C: RaftTypeConfig> Proposals for Proposals010<C> {
    type D = C::D;
    type R = C::R;
    type NodeId = C::NodeId;
    type Node = C::Node;
    type Error = RaftError<C, ClientWriteError<C>>;

    fn error_label(e: &Self::Error) -> &'static str {
        match e {
            // Appended, then replaced by a new leader's log: it may have committed.
            RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => "unknown",
            _ => "failed",
        }
    }
}

impl<C, SM> Submit<Proposals010<C>> for Raft<C, SM>
where
    C: RaftTypeConfig,
    SM: RaftStateMachine<C>,
{
    async fn submit(&self, data: C::D) -> SubmitResult<Proposals010<C>> {
        match self.client_write(data).await {
            Ok(w) => Ok(Written { log_index: w.log_id.index, response: w.data }),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(ProposeError::NotLeader { leader_id: f.leader_id, leader_node: f.leader_node })
            }
            // Everything else, `LogEntryDiscarded` (outcome unknown) included, goes to the
            // callers as raft said it.
            Err(e) => Err(ProposeError::Raft(e)),
        }
    }
}

/// The KV store's batcher on openraft 0.10: [`KvOp`](crate::KvOp)s in, one
/// [`KvRequest`](crate::KvRequest) per entry. Give it the store's `max_entry_bytes()`, so
/// that a request too large for the log fails alone instead of stopping openraft.
///
/// ```
/// use vellum_raft_store::v010::openraft::Raft;
/// use vellum_raft_store::v010::{KvBatcher, KvStateMachine, Store, TypeConfig};
/// use vellum_raft_store::{BatchLimits, KvBatching, KvOp, ProposeError};
///
/// /// Starts the batcher on a running `Raft` of `store`, and writes one key through it.
/// async fn put(
///     raft: &Raft<TypeConfig, KvStateMachine>,
///     store: &Store,
/// ) -> Result<u64, ProposeError<vellum_raft_store::v010::Proposals010<TypeConfig>>> {
///     let limits = BatchLimits { max_entry_bytes: store.max_entry_bytes(), ..BatchLimits::default() };
///     let batcher = KvBatcher::start(raft.clone(), KvBatching, limits); // clone it per task
///     let done = batcher.propose(KvOp::Put { key: "k".into(), value: b"v".to_vec() }).await?;
///     Ok(done.log_index)
/// }
/// ```
///
/// `raft-store/README.md` runs it in a complete program.
pub type KvBatcher = Batcher<Proposals010<TypeConfig>, KvBatching>;
