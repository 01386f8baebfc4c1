//! The batcher against a stand-in for `Raft`: entries are recorded, held until the test lets
//! them go, and answered as the test says (committed, not the leader, failed).

use std::sync::Mutex;

use openraft::error::{Fatal, RaftError};
use tokio::sync::Semaphore;

use super::*;
use crate::kv::types::KvNode;
use crate::v09::{KvBatcher, TypeConfig};

/// How the stand-in answers.
#[derive(Clone, Copy)]
enum Answer {
    Commit,
    NotLeader,
    Fail,
}

/// Records every entry; each `submit` waits for one permit of `gate` (or for `delay` of
/// tokio's clock, when set).
struct Stand {
    entries: Arc<Mutex<Vec<KvRequest>>>,
    gate: Arc<Semaphore>,
    answer: Answer,
    delay: Option<std::time::Duration>,
}

impl Submit<TypeConfig> for Stand {
    async fn submit(&self, data: KvRequest) -> SubmitResult<TypeConfig> {
        let index = {
            let mut entries =
                self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            entries.push(data.clone());
            entries.len() as u64
        };
        let stopped = || ProposeError::Raft(RaftError::Fatal(Fatal::Stopped));
        match self.delay {
            Some(d) => tokio::time::sleep(d).await,
            None => self.gate.acquire().await.map_err(|_| stopped())?.forget(),
        }
        match self.answer {
            Answer::Commit => {
                Ok(Written { log_index: index, response: KvResponse { applied: data.ops.len() } })
            }
            Answer::NotLeader => Err(ProposeError::NotLeader {
                leader_id: Some(2),
                leader_node: Some(KvNode::default()),
            }),
            Answer::Fail => Err(stopped()),
        }
    }
}

struct Fixture {
    batcher: KvBatcher,
    entries: Arc<Mutex<Vec<KvRequest>>>,
    gate: Arc<Semaphore>,
}

fn fixture(answer: Answer, limits: BatchLimits) -> Fixture {
    let entries = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(Semaphore::new(0));
    let stand =
        Stand { entries: Arc::clone(&entries), gate: Arc::clone(&gate), answer, delay: None };
    Fixture { batcher: Batcher::start_on(stand, KvBatching, limits), entries, gate }
}

impl Fixture {
    fn entry_sizes(&self) -> Vec<usize> {
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.iter().map(|e| e.ops.len()).collect()
    }

    /// Waits until `n` entries were submitted (the first is held at the gate).
    async fn until_submitted(&self, n: usize) {
        while self.entry_sizes().len() < n {
            tokio::task::yield_now().await;
        }
    }

    /// Waits until `n` requests sit in the queue behind the entry in flight.
    async fn until_queued(&self, n: usize) {
        while QUEUE_DEPTH - self.batcher.tx.capacity() < n {
            tokio::task::yield_now().await;
        }
    }

    /// Proposes `count` puts of `len`-byte values, each from its own task.
    fn callers(
        &self,
        count: usize,
        len: usize,
    ) -> Vec<tokio::task::JoinHandle<Result<Proposed<()>, ProposeError<TypeConfig>>>> {
        (0..count)
            .map(|i| {
                let b = self.batcher.clone();
                let op = KvOp::Put { key: format!("k{i}"), value: vec![0; len] };
                tokio::spawn(async move { b.propose(op).await })
            })
            .collect()
    }
}

async fn answers<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap_or_else(|e| panic!("caller task: {e}")));
    }
    out
}

#[tokio::test]
async fn concurrent_callers_share_one_entry_and_each_gets_its_answer() {
    let f = fixture(Answer::Commit, BatchLimits::default());
    let first = f.callers(1, 8);
    f.until_submitted(1).await;
    let rest = f.callers(10, 8);
    f.until_queued(10).await;
    f.gate.add_permits(2);
    let first = answers(first).await;
    let rest = answers(rest).await;
    assert_eq!(f.entry_sizes(), vec![1, 10], "one in flight, the ten queued meanwhile in one");
    assert_eq!(first[0].as_ref().ok().map(|p| p.log_index), Some(1));
    for r in &rest {
        assert_eq!(r.as_ref().ok(), Some(&Proposed { log_index: 2, response: () }));
    }
    let ops: Vec<String> = f.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)[1]
        .ops
        .iter()
        .map(|op| match op {
            KvOp::Put { key, .. } | KvOp::Delete { key } => key.clone(),
        })
        .collect();
    let mut sorted = ops.clone();
    sorted.sort();
    assert_eq!(ops.len(), 10);
    sorted.dedup();
    assert_eq!(sorted.len(), 10, "every caller's operation is in the entry once");
}

#[tokio::test]
async fn a_batch_stops_at_its_operation_bound() {
    let f = fixture(
        Answer::Commit,
        BatchLimits { max_ops: 4, max_bytes: 1 << 20, max_in_flight: 1, ..BatchLimits::default() },
    );
    let first = f.callers(1, 8);
    f.until_submitted(1).await;
    let rest = f.callers(10, 8);
    f.until_queued(10).await;
    f.gate.add_permits(4);
    let all: Vec<_> = answers(first).await.into_iter().chain(answers(rest).await).collect();
    assert!(all.iter().all(Result::is_ok));
    assert_eq!(f.entry_sizes(), vec![1, 4, 4, 2]);
}

#[tokio::test]
async fn a_batch_stays_under_its_byte_bound_and_a_large_value_goes_alone() {
    // Each put weighs its value + a one- or two-byte key + 16 bytes of overhead.
    let f = fixture(
        Answer::Commit,
        BatchLimits { max_ops: 100, max_bytes: 1000, max_in_flight: 1, ..BatchLimits::default() },
    );
    let first = f.callers(1, 8);
    f.until_submitted(1).await;
    let mut rest = Vec::new();
    for len in [400, 400, 400, 5000, 100] {
        rest.extend(f.callers(1, len));
        f.until_queued(rest.len()).await;
    }
    f.gate.add_permits(5);
    let all: Vec<_> = answers(first).await.into_iter().chain(answers(rest).await).collect();
    assert!(all.iter().all(Result::is_ok));
    // 400 + 400 fit 1000 bytes, a third does not; 5000 bytes go alone; 100 follows.
    assert_eq!(f.entry_sizes(), vec![1, 2, 1, 1, 1]);
}

#[tokio::test]
async fn not_leader_reaches_every_caller_with_the_leader_hint() {
    let f = fixture(Answer::NotLeader, BatchLimits::default());
    let first = f.callers(1, 8);
    f.until_submitted(1).await;
    let rest = f.callers(5, 8);
    f.until_queued(5).await;
    f.gate.add_permits(2);
    let all: Vec<_> = answers(first).await.into_iter().chain(answers(rest).await).collect();
    assert_eq!(all.len(), 6);
    for r in all {
        assert!(matches!(r, Err(ProposeError::NotLeader { leader_id: Some(2), .. })), "{r:?}");
    }
    assert_eq!(f.entry_sizes(), vec![1, 5]);
}

#[tokio::test]
async fn a_raft_failure_reaches_every_caller() {
    let f = fixture(Answer::Fail, BatchLimits::default());
    let first = f.callers(1, 8);
    f.until_submitted(1).await;
    let rest = f.callers(5, 8);
    f.until_queued(5).await;
    f.gate.add_permits(2);
    let all: Vec<_> = answers(first).await.into_iter().chain(answers(rest).await).collect();
    for r in all {
        assert!(matches!(r, Err(ProposeError::Raft(RaftError::Fatal(Fatal::Stopped)))), "{r:?}");
    }
}

/// A batching whose split drops a response.
struct Short;

impl Batching<TypeConfig> for Short {
    type Request = KvOp;
    type Response = ();
    fn request_bytes(&self, _: &KvOp) -> usize {
        1
    }
    fn merge(&self, ops: Vec<KvOp>) -> KvRequest {
        KvRequest { ops }
    }
    fn split(&self, _: KvResponse, count: usize) -> Vec<()> {
        vec![(); count - 1]
    }
}

#[tokio::test]
async fn a_wrong_split_fails_the_batch_instead_of_leaving_a_caller_hanging() {
    let gate = Arc::new(Semaphore::new(1));
    let stand = Stand { entries: Arc::default(), gate, answer: Answer::Commit, delay: None };
    let b = Batcher::start_on(stand, Short, BatchLimits::default());
    let r = b.propose(KvOp::Delete { key: "k".into() }).await;
    assert!(matches!(r, Err(ProposeError::Split { expected: 1, got: 0 })), "{r:?}");
}

/// Closed-loop callers on a commit that takes 20 ms, of which the log's durable write is 15:
/// `callers` tasks each proposing `rounds` times and coming back after a turnaround of
/// 1 ms times their number (tokio's paused clock, whose timers tick in milliseconds: nothing
/// here depends on real time).
/// Returns the entries' sizes.
async fn closed_loop(paced: bool, callers: usize, rounds: usize) -> Vec<usize> {
    use std::time::Duration;
    let entries = Arc::new(Mutex::new(Vec::new()));
    let stand = Stand {
        entries: Arc::clone(&entries),
        gate: Arc::new(Semaphore::new(0)),
        answer: Answer::Commit,
        delay: Some(Duration::from_millis(20)),
    };
    let limits = BatchLimits { max_in_flight: 2, ..BatchLimits::default() };
    let batcher = if paced {
        let disk = crate::log::DiskLatency::new();
        disk.record(Duration::from_millis(15));
        KvBatcher::start_paced(stand, KvBatching, limits, disk)
    } else {
        KvBatcher::start_on(stand, KvBatching, limits)
    };
    let tasks: Vec<_> = (0..callers)
        .map(|i| {
            let b = batcher.clone();
            tokio::spawn(async move {
                for r in 0..rounds {
                    let op = KvOp::Put { key: format!("k{i}-{r}"), value: vec![0; 8] };
                    assert!(b.propose(op).await.is_ok());
                    tokio::time::sleep(Duration::from_millis(i as u64 + 1)).await;
                }
            })
        })
        .collect();
    answers(tasks).await;
    let entries = entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    entries.iter().map(|e| e.ops.len()).collect()
}

/// Where the disk bounds the commit, a batch waits for the callers just answered: after the
/// first round every caller rides in one entry per commit. Unpaced (the mutant of that
/// rule), the callers that come back first leave in an entry of their own and the rest
/// follow in another: cohorts that each wait for two commits.
#[tokio::test(start_paused = true)]
async fn a_batcher_paced_by_a_slow_disk_carries_every_returning_caller_in_one_entry() {
    let paced = closed_loop(true, 6, 5).await;
    assert_eq!(paced.iter().sum::<usize>(), 30, "{paced:?}");
    assert!(paced[2..].iter().all(|&n| n == 6), "one entry per round after the first: {paced:?}");
    assert!(paced.len() <= 6, "{paced:?}");
    let unpaced = closed_loop(false, 6, 5).await;
    assert_eq!(unpaced.iter().sum::<usize>(), 30, "{unpaced:?}");
    assert!(unpaced[2..].iter().any(|&n| n < 6), "the cohorts split unpaced: {unpaced:?}");
}
