//! The proposal batcher (`crate::batcher`) on openraft 0.9: every 0.9 `RaftTypeConfig` is a
//! [`Proposals`] as it is, and `Raft<C>` submits its entries.
//!
//! 0.9 appends one entry per `client_write` and awaits its durable append before the next, so
//! this is where batching pays most: N concurrent requests become one entry and one durable
//! write.

use std::future::Future;

use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::responder::Responder;
use openraft::{Raft, RaftTypeConfig};

use crate::kv::batcher::{Proposals, ProposeError, Submit, SubmitResult, Written};

impl<C: RaftTypeConfig> Proposals for C {
    type D = C::D;
    type R = C::R;
    type NodeId = C::NodeId;
    type Node = C::Node;
    type Error = RaftError<C::NodeId, ClientWriteError<C::NodeId, C::Node>>;
}

impl<C, E> Submit<C> for Raft<C>
where
    C: RaftTypeConfig,
    <C::Responder as Responder<C>>::Receiver:
        Future<Output = Result<openraft::raft::ClientWriteResult<C>, E>> + Send,
    E: std::error::Error + Send,
{
    async fn submit(&self, data: C::D) -> SubmitResult<C> {
        match self.client_write(data).await {
            Ok(w) => Ok(Written { log_index: w.log_id.index, response: w.data }),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(ProposeError::NotLeader { leader_id: f.leader_id, leader_node: f.leader_node })
            }
            Err(e) => Err(ProposeError::Raft(e)),
        }
    }
}
