//! Other groups of a log appending (and purging behind themselves) all the while a test runs
//! on one group: what a group handle must not notice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use vellum_raft_store::log::{LogCore, LogEntry, wait};

/// Rounds of appends the busy groups made, over every `Busy` of the test binary.
pub static ROUNDS: AtomicU64 = AtomicU64::new(0);

/// Stops the busy groups (and counts their rounds) when dropped.
pub struct Busy {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            ROUNDS.fetch_add(t.join().expect("the busy groups' thread"), Ordering::SeqCst);
        }
    }
}

/// Starts a thread appending one 300-byte entry to each of `groups` per round, purging each
/// 50 entries behind itself every 100 rounds, for at most 2,000 rounds (about 24 MiB of 4 KiB
/// batches): the group under test may keep every segment since its first.
pub fn start(groups: Vec<LogCore>) -> Busy {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        let mut next = 0;
        while !stopped.load(Ordering::SeqCst) && next < 2000 {
            for g in &groups {
                let payload = vec![g.group_id() as u8; 300].into();
                let e = LogEntry { index: next, term: 1, payload };
                wait(|done| g.append(vec![e], done)).expect("a busy group's append");
                if next % 100 == 99 {
                    g.purge(next - 50, vec![]).expect("a busy group's purge");
                }
            }
            next += 1;
        }
        next
    });
    Busy { stop, thread: Some(thread) }
}
