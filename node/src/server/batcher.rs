//! Proposal batching. openraft 0.9 appends one entry per `client_write` and waits for it to
//! be durable before the next, so the node batches: one proposal is in flight at a time, and
//! every client write that arrives meanwhile goes into the next entry. Throughput grows with
//! concurrency; a lone client still pays one durable write plus replication.

use openraft::Raft;
use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot};
use vellum_raft_store::{KvOp, KvRequest, TypeConfig};

use super::metrics as m;

/// Why a proposal did not commit.
#[derive(Debug, Clone)]
pub enum ProposeError {
    /// This node is not the leader (any more).
    NotLeader,
    /// Raft failed (storage, shutdown, ...).
    Failed(String),
}

struct Proposal {
    op: KvOp,
    reply: oneshot::Sender<Result<u64, ProposeError>>,
}

/// The handle the HTTP layer proposes through.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Proposal>,
}

impl Proposer {
    /// Starts the batching task.
    pub fn start(raft: Raft<TypeConfig>, max_batch: usize) -> Proposer {
        let (tx, rx) = mpsc::channel(64 * 1024);
        tokio::spawn(run(raft, rx, max_batch.max(1)));
        Proposer { tx }
    }

    /// Proposes `op`; resolves once it is committed and applied, with its log index.
    pub async fn propose(&self, op: KvOp) -> Result<u64, ProposeError> {
        let (reply, rx) = oneshot::channel();
        let p = Proposal { op, reply };
        self.tx
            .send(p)
            .await
            .map_err(|_| ProposeError::Failed("the node is shutting down".into()))?;
        rx.await.map_err(|_| ProposeError::Failed("the node is shutting down".into()))?
    }
}

async fn run(raft: Raft<TypeConfig>, mut rx: mpsc::Receiver<Proposal>, max_batch: usize) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        metrics::histogram!(m::PROPOSAL_BATCH_ENTRIES).record(batch.len() as f64);
        let ops: Vec<KvOp> = batch.iter().map(|p| p.op.clone()).collect();
        let result = raft.client_write(KvRequest { ops }).await;
        let outcome = match result {
            Ok(resp) => Ok(resp.log_id.index),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                Err(ProposeError::NotLeader)
            }
            Err(e) => Err(ProposeError::Failed(e.to_string())),
        };
        let label = match &outcome {
            Ok(_) => "committed",
            Err(ProposeError::NotLeader) => "not_leader",
            Err(ProposeError::Failed(_)) => "failed",
        };
        metrics::counter!(m::PROPOSALS_TOTAL, "result" => label).increment(batch.len() as u64);
        for p in batch {
            let _ = p.reply.send(outcome.clone());
        }
    }
}
