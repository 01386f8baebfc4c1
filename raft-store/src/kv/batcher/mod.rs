//! Proposal batching for any openraft application, 0.9 or 0.10.
//!
//! openraft 0.9 appends one entry per `client_write` and awaits its durable append before the
//! next, so an application that calls `client_write` per request gets one request per durable
//! write, whatever its concurrency. openraft 0.10 makes many entries durable in one write, but
//! every request is still an entry of its own (encoded, framed, replicated and applied one by
//! one); batching turns N requests into one entry there too. A [`Batcher`] keeps at most
//! `max_in_flight` proposals in flight; every request that arrives meanwhile goes into the
//! next entry, so throughput grows with concurrency and a lone caller still pays one durable
//! write plus replication. Paced by the disk under the log ([`Batcher::start_paced`],
//! `pace.rs`), the bound adapts to the disk's latency: where the durable write is most of the
//! commit (a spinning disk), one entry in flight that waits briefly for the callers just
//! answered, so every caller rides in one durable write per round; where the CPU or network
//! bounds the commit, up to `max_in_flight`.
//!
//! The application says, through [`Batching`], how N requests become one `C::D`, how one
//! `C::R` splits back into N per-caller responses, and what one request weighs in bytes. `C`
//! is what [`Proposals`] describes: `v010::Proposals010<C>` for an openraft 0.10
//! `RaftTypeConfig`, or an openraft 0.9 `RaftTypeConfig` itself (`v09/proposals.rs`).
//!
//! Invariants:
//! - At most `max_in_flight` `client_write`s of a batcher are outstanding (one while a
//!   batcher paced by the disk finds the commit bound by it). With one, batches reach
//!   openraft in the order their first requests arrived; with more, they may reach it in
//!   another order (each caller is still answered only once its own entry is committed and
//!   applied). Requests keep their arrival order inside a batch.
//! - A batch holds at most `max_ops` requests and at most `max_bytes` bytes, except that a
//!   single request heavier than `max_bytes` goes alone; and its entry fits
//!   `max_entry_bytes`: a request whose entry alone would be larger is refused
//!   ([`ProposeError::TooLarge`]) before it becomes an entry, so it fails alone (openraft
//!   0.10 stops its core when the log store refuses an append). Set `max_entry_bytes` to the
//!   log store's `max_entry_bytes()`.
//! - Every caller gets exactly one answer: its own response, or the batch's error.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
// tokio's clock: real time, or a test's paused time (the pace judges commit times by it).
use tokio::time::Instant;

use self::pace::Pace;
use crate::log::DiskLatency;

use super::types::{KvOp, KvRequest, KvResponse};
use crate::metrics as m;

/// The types of an openraft version's write path a batcher deals in. `v010::Proposals010<C>`
/// wraps an openraft 0.10 `RaftTypeConfig`; every openraft 0.9 one is one (`v09/proposals.rs`).
pub trait Proposals: Send + Sync + 'static {
    /// The entry's application data (`RaftTypeConfig::D`).
    type D: Send + 'static;
    /// The applied entry's response (`RaftTypeConfig::R`).
    type R: Send + 'static;
    /// A member's id.
    type NodeId: Clone + fmt::Debug + Send + Sync + 'static;
    /// A member's node record.
    type Node: Clone + fmt::Debug + Send + Sync + 'static;
    /// What raft answers a failed `client_write` with (other than "not the leader").
    type Error: Clone + fmt::Display + Send + Sync + 'static;

    /// The `result` label of [`m::PROPOSALS_TOTAL`] for a batch that failed with `e`.
    fn error_label(_e: &Self::Error) -> &'static str {
        "failed"
    }
}

/// How an application's requests are batched into entries. Implement it once per
/// `RaftTypeConfig`; [`KvBatching`] is the KV store's.
pub trait Batching<C: Proposals>: Send + Sync + 'static {
    /// One caller's request.
    type Request: Send + 'static;
    /// One caller's share of the entry's response.
    type Response: Send + 'static;

    /// What `request` adds to an entry, in bytes, for the byte bounds: never less than
    /// what it adds to the encoded entry.
    fn request_bytes(&self, request: &Self::Request) -> usize;

    /// What an entry's encoding adds besides its requests' [`request_bytes`]: an entry of
    /// requests weighing `B` in all encodes to at most `B + entry_overhead()` bytes. The
    /// batcher checks [`BatchLimits::max_entry_bytes`] with it. The default, 0, suits an
    /// application whose `request_bytes` already count it.
    ///
    /// [`request_bytes`]: Batching::request_bytes
    fn entry_overhead(&self) -> usize {
        0
    }

    /// The entry that applies `requests` in order (never empty).
    fn merge(&self, requests: Vec<Self::Request>) -> C::D;

    /// Splits the applied entry's response into one response per request, in the order
    /// `merge` got them. Returning another count fails the whole batch.
    fn split(&self, response: C::R, count: usize) -> Vec<Self::Response>;
}

/// An entry committed and applied: where it is in the log, and its response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written<R> {
    /// The entry's log index.
    pub log_index: u64,
    /// What applying it returned.
    pub response: R,
}

/// What submitting one entry gives: written, or why not (`NotLeader` or `Raft`).
pub type SubmitResult<C> = Result<Written<<C as Proposals>::R>, ProposeError<C>>;

/// Where a batcher sends its entries: a `Raft` handle (0.9 or 0.10), or a stand-in in tests.
pub trait Submit<C: Proposals>: Send + Sync + 'static {
    /// Proposes `data` as one entry; resolves once it is committed and applied (or failed).
    fn submit(&self, data: C::D) -> impl Future<Output = SubmitResult<C>> + Send;
}

/// How large a batch may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Requests per entry (at least 1).
    pub max_ops: usize,
    /// Bytes per entry, as [`Batching::request_bytes`] counts them.
    pub max_bytes: usize,
    /// Entries proposed and not yet committed (at least 1); a batcher paced by the disk
    /// (`Batcher::start_paced`) keeps one while the disk bounds the commit.
    pub max_in_flight: usize,
    /// The largest encoded entry the log accepts: the log store's `max_entry_bytes()`
    /// (default: unchecked, `usize::MAX`). A request whose entry alone would be larger is
    /// refused with [`ProposeError::TooLarge`]; batches stay within it.
    pub max_entry_bytes: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            max_ops: 1024,
            max_bytes: 1 << 20,
            max_in_flight: 1,
            max_entry_bytes: usize::MAX,
        }
    }
}

/// A committed request: where its entry is in the log, and its share of the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposed<T> {
    /// The log index of the entry that carried the request.
    pub log_index: u64,
    /// The request's share of the entry's response.
    pub response: T,
}

/// Why a request did not commit. Every caller of a batch gets the same error.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum ProposeError<C: Proposals> {
    /// This node is not the leader (any more): send the request to `leader_id` if known.
    #[error("not the leader (leader: {leader_id:?})")]
    NotLeader {
        /// The leader this node knows of.
        leader_id: Option<C::NodeId>,
        /// Its node record (addresses).
        leader_node: Option<C::Node>,
    },
    /// The request alone makes an entry larger than the log holds
    /// ([`BatchLimits::max_entry_bytes`]): refused before it became an entry; nothing else
    /// failed. Split it, or keep large values outside the log.
    #[error(
        "the request makes a log entry of up to {bytes} bytes; one entry of this log holds \
         {max} bytes"
    )]
    TooLarge {
        /// The entry's size, at most (request plus entry overhead).
        bytes: usize,
        /// [`BatchLimits::max_entry_bytes`].
        max: usize,
    },
    /// Raft refused or failed the write (storage error, shutdown, ...).
    #[error("raft failed the write: {0}")]
    Raft(C::Error),
    /// [`Batching::split`] returned `got` responses for `expected` requests.
    #[error("the application split the response into {got} parts for {expected} requests")]
    Split {
        /// Requests in the batch.
        expected: usize,
        /// Responses `split` returned.
        got: usize,
    },
    /// The batcher's task has stopped (the runtime is shutting down).
    #[error("the batcher has stopped")]
    Stopped,
}

impl<C: Proposals> fmt::Debug for ProposeError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl<C: Proposals> Clone for ProposeError<C> {
    fn clone(&self) -> Self {
        match self {
            ProposeError::NotLeader { leader_id, leader_node } => ProposeError::NotLeader {
                leader_id: leader_id.clone(),
                leader_node: leader_node.clone(),
            },
            ProposeError::Raft(e) => ProposeError::Raft(e.clone()),
            ProposeError::Split { expected, got } => {
                ProposeError::Split { expected: *expected, got: *got }
            }
            ProposeError::TooLarge { bytes, max } => {
                ProposeError::TooLarge { bytes: *bytes, max: *max }
            }
            ProposeError::Stopped => ProposeError::Stopped,
        }
    }
}

impl<C: Proposals> ProposeError<C> {
    /// The `result` label of [`m::PROPOSALS_TOTAL`].
    fn label(&self) -> &'static str {
        match self {
            ProposeError::NotLeader { .. } => "not_leader",
            ProposeError::Raft(e) => C::error_label(e),
            ProposeError::TooLarge { .. } => "too_large",
            _ => "failed",
        }
    }
}

type Reply<C, B> = oneshot::Sender<Result<Proposed<<B as Batching<C>>::Response>, ProposeError<C>>>;

struct Pending<C: Proposals, B: Batching<C>> {
    request: B::Request,
    bytes: usize,
    reply: Reply<C, B>,
    queued: Instant,
}

/// The handle callers propose through; clone it freely. The batching task stops once every
/// handle is dropped.
///
/// Here on a stand-in for `Raft` (any [`Submit`]; with openraft, [`Batcher::start`] takes the
/// `Raft` handle itself): concurrent requests share entries, and a request too large for one
/// entry is refused alone.
///
/// ```
/// use vellum_raft_store::batcher::{Submit, SubmitResult, Written};
/// use vellum_raft_store::v010::{Proposals010, TypeConfig};
/// use vellum_raft_store::{BatchLimits, Batcher, KvBatching, KvOp, KvRequest, KvResponse, ProposeError};
///
/// /// Commits every entry at once, at index 1.
/// struct Stand;
/// impl Submit<Proposals010<TypeConfig>> for Stand {
///     async fn submit(&self, data: KvRequest) -> SubmitResult<Proposals010<TypeConfig>> {
///         Ok(Written { log_index: 1, response: KvResponse { applied: data.ops.len() } })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let limits = BatchLimits { max_entry_bytes: 64 << 10, ..BatchLimits::default() };
/// let batcher = Batcher::start_on(Stand, KvBatching, limits);
/// let put = |len| KvOp::Put { key: "k".into(), value: vec![0; len] };
/// assert_eq!(batcher.propose(put(10)).await.unwrap().log_index, 1);
/// let refused = batcher.propose(put(1 << 20)).await;
/// assert!(matches!(refused, Err(ProposeError::TooLarge { max: 65536, .. })));
/// # }
/// ```
pub struct Batcher<C: Proposals, B: Batching<C>> {
    tx: mpsc::Sender<Pending<C, B>>,
    batching: Arc<B>,
    max_entry_bytes: usize,
}

impl<C: Proposals, B: Batching<C>> Clone for Batcher<C, B> {
    fn clone(&self) -> Self {
        Batcher {
            tx: self.tx.clone(),
            batching: Arc::clone(&self.batching),
            max_entry_bytes: self.max_entry_bytes,
        }
    }
}

/// Requests queued beyond this make `propose` wait (back-pressure on callers).
const QUEUE_DEPTH: usize = 64 * 1024;

impl<C: Proposals, B: Batching<C>> Batcher<C, B> {
    /// Starts the batching task on the current tokio runtime, proposing into `raft` (an
    /// openraft 0.9 or 0.10 `Raft` handle).
    pub fn start<S: Submit<C>>(raft: S, batching: B, limits: BatchLimits) -> Self {
        Self::start_on(raft, batching, limits)
    }

    /// [`Batcher::start`], paced by the disk under the log (`pace.rs`): while the log's
    /// durable writes are most of the commit time (a spinning disk), one entry is in flight
    /// and it waits briefly for the callers just answered, so that they share one entry and
    /// one durable write per round; otherwise up to `max_in_flight` entries go as soon as a
    /// slot is free. `disk` is the log's [`DiskLatency`] (`LogCore::disk_latency`).
    pub fn start_paced<S: Submit<C>>(
        raft: S,
        batching: B,
        limits: BatchLimits,
        disk: DiskLatency,
    ) -> Self {
        Self::spawn(raft, batching, limits, Some(disk))
    }

    /// [`Batcher::start`] with any [`Submit`]: a wrapper around `Raft`, or a test double.
    pub fn start_on<S: Submit<C>>(submit: S, batching: B, limits: BatchLimits) -> Self {
        Self::spawn(submit, batching, limits, None)
    }

    fn spawn<S: Submit<C>>(
        submit: S,
        batching: B,
        limits: BatchLimits,
        disk: Option<DiskLatency>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let batching = Arc::new(batching);
        // A batch's requests and the entry's own overhead must fit one entry.
        let room = limits.max_entry_bytes.saturating_sub(batching.entry_overhead());
        let limits = BatchLimits {
            max_ops: limits.max_ops.max(1),
            max_in_flight: limits.max_in_flight.max(1),
            max_bytes: limits.max_bytes.min(room),
            ..limits
        };
        let pace = Pace::new(limits.max_in_flight, disk);
        tokio::spawn(run(Arc::new(submit), Arc::clone(&batching), rx, limits, pace));
        Batcher { tx, batching, max_entry_bytes: limits.max_entry_bytes }
    }

    /// Proposes `request`; resolves once its entry is committed and applied. A request
    /// whose entry alone would exceed [`BatchLimits::max_entry_bytes`] is refused at once
    /// with [`ProposeError::TooLarge`] (the Raft instance is not involved).
    pub async fn propose(
        &self,
        request: B::Request,
    ) -> Result<Proposed<B::Response>, ProposeError<C>> {
        let bytes = self.batching.request_bytes(&request);
        let entry = bytes.saturating_add(self.batching.entry_overhead());
        if entry > self.max_entry_bytes {
            metrics::counter!(m::PROPOSALS_TOTAL, "result" => "too_large").increment(1);
            return Err(ProposeError::TooLarge { bytes: entry, max: self.max_entry_bytes });
        }
        let (reply, rx) = oneshot::channel();
        let pending = Pending { request, bytes, reply, queued: Instant::now() };
        self.tx.send(pending).await.map_err(|_| ProposeError::Stopped)?;
        rx.await.map_err(|_| ProposeError::Stopped)?
    }
}

/// A batch, and the request that starts the next one.
type Gathered<C, B> = (Vec<Pending<C, B>>, Option<Pending<C, B>>);

/// Takes the next batch: `first`, then whatever is queued, within the bounds; while the
/// disk bounds the commit, waits (up to the pace's linger) until the batch holds as many
/// requests sent since the last commit as that commit answered. A request that would cross
/// the byte bound is handed back to start the next batch.
async fn gather<C: Proposals, B: Batching<C>>(
    rx: &mut mpsc::Receiver<Pending<C, B>>,
    first: Pending<C, B>,
    limits: BatchLimits,
    pace: &Pace,
) -> Gathered<C, B> {
    let round = pace.take_round();
    let since_round = |p: &Pending<C, B>| round.is_some_and(|(at, _)| p.queued >= at);
    let mut back = usize::from(since_round(&first));
    let mut bytes = first.bytes;
    let mut batch = vec![first];
    let mut deadline = None;
    while batch.len() < limits.max_ops {
        let next = match rx.try_recv() {
            Ok(p) => p,
            Err(_) if round.is_none_or(|(_, answered)| back >= answered) => break,
            Err(_) => {
                let until = *deadline.get_or_insert_with(|| Instant::now() + pace.linger());
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(p)) => p,
                    Ok(None) | Err(_) => break,
                }
            }
        };
        if bytes.saturating_add(next.bytes) > limits.max_bytes {
            return (batch, Some(next));
        }
        back += usize::from(since_round(&next));
        bytes += next.bytes;
        batch.push(next);
    }
    (batch, None)
}

async fn run<C: Proposals, B: Batching<C>, S: Submit<C>>(
    submit: Arc<S>,
    batching: Arc<B>,
    mut rx: mpsc::Receiver<Pending<C, B>>,
    limits: BatchLimits,
    pace: Arc<Pace>,
) {
    let mut carried = None;
    loop {
        // A slot first, then the batch: what arrives while all are taken waits in the queue
        // and joins the next batch.
        let slot = pace.slot().await;
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let (batch, next) = gather(&mut rx, first, limits, &pace).await;
        carried = next;
        let (submit, batching, pace) =
            (Arc::clone(&submit), Arc::clone(&batching), Arc::clone(&pace));
        tokio::spawn(async move {
            propose_batch(submit.as_ref(), batching.as_ref(), &pace, batch).await;
            drop(slot);
        });
        // Give the spawned proposal a chance to reach openraft before the next one.
        tokio::task::yield_now().await;
    }
}

/// Proposes one batch and answers each of its callers.
async fn propose_batch<C: Proposals, B: Batching<C>, S: Submit<C>>(
    submit: &S,
    batching: &B,
    pace: &Pace,
    batch: Vec<Pending<C, B>>,
) {
    let count = batch.len();
    metrics::histogram!(m::PROPOSAL_BATCH_ENTRIES).record(count as f64);
    let started = Instant::now();
    for p in &batch {
        metrics::histogram!(m::STAGE_DURATION, "stage" => "queued")
            .record(started.duration_since(p.queued).as_secs_f64());
    }
    let (requests, replies): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|p| (p.request, p.reply)).unzip();
    let submitted = submit.submit(batching.merge(requests)).await;
    metrics::histogram!(m::STAGE_DURATION, "stage" => "raft_write")
        .record(started.elapsed().as_secs_f64());
    let outcome = submitted.and_then(|written| {
        let responses = batching.split(written.response, count);
        if responses.len() == count {
            Ok((written.log_index, responses))
        } else {
            Err(ProposeError::Split { expected: count, got: responses.len() })
        }
    });
    let label = outcome.as_ref().map_or_else(ProposeError::label, |_| "committed");
    metrics::counter!(m::PROPOSALS_TOTAL, "result" => label).increment(count as u64);
    match outcome {
        Ok((log_index, responses)) => {
            pace.committed(started.elapsed(), count);
            for (reply, response) in replies.into_iter().zip(responses) {
                // A caller that gave up (dropped its future) needs no answer.
                let _ = reply.send(Ok(Proposed { log_index, response }));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Bytes one KV operation adds to an entry besides its key and value (its tag and two length
/// varints: 11 bytes at most for keys and values under 4 GiB).
const KV_OP_OVERHEAD: usize = 16;

/// The KV store's batching: operations in, one [`KvRequest`] per entry, nothing per operation
/// beyond the log index (every operation of an entry is applied, in order). The same for the
/// 0.9 and the 0.10 adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct KvBatching;

/// One implementation for every openraft version whose entries are [`KvRequest`]s.
impl<C> Batching<C> for KvBatching
where
    C: Proposals<D = KvRequest, R = KvResponse>,
{
    type Request = KvOp;
    type Response = ();

    fn request_bytes(&self, op: &KvOp) -> usize {
        KV_OP_OVERHEAD
            + match op {
                KvOp::Put { key, value } => key.len() + value.len(),
                KvOp::Delete { key } => key.len(),
            }
    }

    fn entry_overhead(&self) -> usize {
        super::types::ENTRY_ENVELOPE_BYTES
    }

    fn merge(&self, ops: Vec<KvOp>) -> KvRequest {
        KvRequest { ops }
    }

    fn split(&self, _response: KvResponse, count: usize) -> Vec<()> {
        vec![(); count]
    }
}

mod pace;
#[cfg(all(test, feature = "openraft-v09"))]
mod tests;
