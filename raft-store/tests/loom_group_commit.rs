//! Model check of the group-commit combiner with loom: over every interleaving (preemption
//! bounded) of three submitters, items complete in log order, each exactly once, never before
//! the write that covers them returned, none is left behind, and after a failed write every
//! later item fails.
//!
//! The combiner source is compiled here against loom's `Mutex` (the library builds it
//! against std's).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod sync {
    pub(crate) use loom::sync::{Mutex, MutexGuard};
    pub(crate) use std::sync::TryLockError;

    pub(crate) fn yield_point() {
        loom::thread::yield_now();
    }
}

#[allow(dead_code)]
#[path = "../src/log/queue.rs"]
mod queue;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use queue::{Combiner, Complete};

struct Item {
    seq: u64,
    durable: Arc<AtomicU64>,
    fired: Arc<loom::sync::Mutex<Vec<(u64, bool)>>>,
}

impl Complete for Item {
    type Error = ();
    fn complete(self, result: Result<(), ()>) {
        if result.is_ok() {
            assert!(
                self.durable.load(Ordering::SeqCst) >= self.seq,
                "item {} completed before its write",
                self.seq
            );
        }
        self.fired.lock().unwrap().push((self.seq, result.is_ok()));
    }
    fn writer_panicked() {}
}

/// The writer's state: how many writes it made.
struct Disk {
    writes: u32,
    fail_first: bool,
    durable: Arc<AtomicU64>,
}

fn write(d: &mut Disk, batch: &mut [Item]) -> Result<(), ()> {
    d.writes += 1;
    if d.fail_first && d.writes == 1 {
        return Err(());
    }
    let max = batch.iter().map(|i| i.seq).max().unwrap();
    d.durable.store(max, Ordering::SeqCst);
    Ok(())
}

fn model(fail_first: bool) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let durable = Arc::new(AtomicU64::new(0));
        let fired = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let c =
            Arc::new(Combiner::new(Disk { writes: 0, fail_first, durable: Arc::clone(&durable) }));
        // The log order: each submitter takes its sequence number and pushes under one lock,
        // as `LogCore::append` pushes under the index lock, then drains after releasing it.
        let order = Arc::new(loom::sync::Mutex::new(0u64));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let (c, durable, fired, order) =
                    (Arc::clone(&c), Arc::clone(&durable), Arc::clone(&fired), Arc::clone(&order));
                loom::thread::spawn(move || {
                    {
                        let mut o = order.lock().unwrap();
                        *o += 1;
                        assert!(c.push(Item { seq: *o, durable, fired }).is_ok());
                    }
                    c.drain(write);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let fired = fired.lock().unwrap().clone();
        let seqs: Vec<u64> = fired.iter().map(|f| f.0).collect();
        assert_eq!(
            seqs,
            vec![1, 2, 3],
            "every item completed once, in log order, none left behind"
        );
        if fail_first {
            assert!(!fired[0].1, "the first write failed");
            assert!(fired.iter().all(|f| !f.1), "after a failure every later item fails");
        } else {
            assert!(fired.iter().all(|f| f.1));
        }
    });
}

#[test]
fn completions_follow_log_order_and_durability() {
    model(false);
}

#[test]
fn a_failed_write_fails_everything_after_it() {
    model(true);
}
