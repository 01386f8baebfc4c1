//! Proposal batching. openraft 0.9 appends one entry per `client_write` and waits for it to
//! be durable before the next, so the node batches: one proposal is in flight at a time, and
//! every client write that arrives meanwhile goes into the next entry. Throughput grows with
//! concurrency; a lone client still pays one durable write plus replication.
//!
//! A batch is bounded in operations and in bytes (keys and values), so an entry always fits a
//! log segment and an RPC: a burst of large values becomes several entries, never one that
//! the log must refuse. A single operation larger than the byte bound goes alone (the HTTP
//! layer refused anything that cannot fit an entry before it got here).

use openraft::Raft;
use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot};
use vellum_raft_store::{KvOp, KvRequest, TypeConfig};

use super::metrics as m;

/// Bytes one operation adds to an entry besides its key and value.
const OP_OVERHEAD: usize = 16;

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

impl Proposal {
    fn bytes(&self) -> usize {
        OP_OVERHEAD
            + match &self.op {
                KvOp::Put { key, value } => key.len() + value.len(),
                KvOp::Delete { key } => key.len(),
            }
    }
}

/// The handle the HTTP layer proposes through.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Proposal>,
}

impl Proposer {
    /// Starts the batching task: at most `max_ops` operations and `max_bytes` bytes of keys
    /// and values per entry.
    pub fn start(raft: Raft<TypeConfig>, max_ops: usize, max_bytes: usize) -> Proposer {
        let (tx, rx) = mpsc::channel(64 * 1024);
        tokio::spawn(run(raft, rx, max_ops.max(1), max_bytes));
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

/// Takes the next batch: `first`, then whatever is queued, within the bounds. A proposal
/// that would cross the byte bound is handed back for the next batch.
fn gather(
    rx: &mut mpsc::Receiver<Proposal>,
    first: Proposal,
    max_ops: usize,
    max_bytes: usize,
) -> (Vec<Proposal>, Option<Proposal>) {
    let mut bytes = first.bytes();
    let mut batch = vec![first];
    while batch.len() < max_ops {
        let Ok(p) = rx.try_recv() else { break };
        if bytes + p.bytes() > max_bytes {
            return (batch, Some(p));
        }
        bytes += p.bytes();
        batch.push(p);
    }
    (batch, None)
}

async fn run(
    raft: Raft<TypeConfig>,
    mut rx: mpsc::Receiver<Proposal>,
    max_ops: usize,
    max_bytes: usize,
) {
    let mut carried = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let (batch, next) = gather(&mut rx, first, max_ops, max_bytes);
        carried = next;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn put(len: usize) -> (Proposal, oneshot::Receiver<Result<u64, ProposeError>>) {
        let (reply, rx) = oneshot::channel();
        (Proposal { op: KvOp::Put { key: "k".into(), value: vec![0; len] }, reply }, rx)
    }

    #[test]
    fn a_batch_stays_under_its_byte_bound_and_a_large_value_goes_alone() {
        let (tx, mut rx) = mpsc::channel(64);
        let mut keep = Vec::new();
        for len in [400, 400, 400, 5000, 100] {
            let (p, r) = put(len);
            keep.push(r);
            tx.try_send(p).ok();
        }
        let first = rx.try_recv().ok().unwrap_or_else(|| unreachable!());
        let (batch, carried) = gather(&mut rx, first, 100, 1000);
        assert_eq!(batch.len(), 2, "400 + 400 (+ overheads) fit 1000 bytes, a third does not");
        let (batch, carried) =
            gather(&mut rx, carried.unwrap_or_else(|| unreachable!()), 100, 1000);
        assert_eq!(batch.len(), 1, "the third 400");
        let (batch, carried) =
            gather(&mut rx, carried.unwrap_or_else(|| unreachable!()), 100, 1000);
        assert_eq!(batch.len(), 1, "5000 bytes go alone");
        let (batch, carried) =
            gather(&mut rx, carried.unwrap_or_else(|| unreachable!()), 100, 1000);
        assert_eq!((batch.len(), carried.is_none()), (1, true));
    }
}
