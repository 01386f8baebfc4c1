//! Model check of the group-commit handoff with loom: over every interleaving of two
//! producers, the writer and close, items complete in log order, never before the write
//! that covers them, and after a failed write every later item fails.
//!
//! The queue source is compiled here against loom's `Mutex` and `Condvar` (the library
//! builds it against std's).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod sync {
    pub(crate) use loom::sync::{Condvar, Mutex};
}

#[allow(dead_code)]
#[path = "../src/log/queue.rs"]
mod queue;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use queue::{Complete, Queue};

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
}

fn model(fail_first_write: bool) {
    // Bounded preemption keeps the run in seconds; three preemptions cover every handoff
    // race of this queue (push vs take, close vs take, completion vs the next push).
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let q: Arc<Queue<Item>> = Arc::new(Queue::default());
        let durable = Arc::new(AtomicU64::new(0));
        let fired = Arc::new(loom::sync::Mutex::new(Vec::new()));
        // The log order: producers take their sequence number and push under one lock, as
        // `LogCore::append` pushes under the index lock.
        let order = Arc::new(loom::sync::Mutex::new(0u64));

        let writer = {
            let (q, durable) = (Arc::clone(&q), Arc::clone(&durable));
            loom::thread::spawn(move || {
                let mut writes = 0;
                q.run_writer(|batch| {
                    writes += 1;
                    if fail_first_write && writes == 1 {
                        return Err(());
                    }
                    let max = batch.iter().map(|i| i.seq).max().unwrap();
                    durable.store(max, Ordering::SeqCst);
                    Ok(())
                });
            })
        };
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let (q, durable, fired, order) =
                    (Arc::clone(&q), Arc::clone(&durable), Arc::clone(&fired), Arc::clone(&order));
                loom::thread::spawn(move || {
                    let mut o = order.lock().unwrap();
                    *o += 1;
                    let item = Item { seq: *o, durable, fired };
                    assert!(q.push(item).is_ok());
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        q.close();
        writer.join().unwrap();

        let fired = fired.lock().unwrap().clone();
        let seqs: Vec<u64> = fired.iter().map(|f| f.0).collect();
        assert_eq!(seqs, vec![1, 2], "completions in log order");
        if fail_first_write {
            assert!(!fired[0].1, "the first write failed");
            assert!(!fired[1].1, "after a failure every later item fails");
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
