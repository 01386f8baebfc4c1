//! The group-commit queue: the handoff between callers and the writer thread.
//!
//! Callers push items (entry batches with their flush callbacks, votes, truncations) in log
//! order; the writer takes everything queued at once, makes it durable with as few writes as
//! it can, and only then completes the items, in the order they were pushed. An item is never
//! completed before the write that covers it returned, and once a write failed every later
//! item fails too (the log is poisoned). `raft-store/tests/loom_group_commit.rs` model-checks
//! this handoff with loom.

use std::collections::VecDeque;

use crate::sync::{Condvar, Mutex};

/// Something the writer completes once it is durable (or failed).
pub trait Complete {
    type Error: Clone;
    fn complete(self, result: Result<(), Self::Error>);
}

struct State<T> {
    items: VecDeque<T>,
    closed: bool,
}

/// A FIFO of items for one writer.
pub struct Queue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            state: Mutex::new(State { items: VecDeque::new(), closed: false }),
            ready: Condvar::new(),
        }
    }
}

impl<T: Complete> Queue<T> {
    /// Queues `item`; `Err(item)` once the queue is closed.
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.closed {
            return Err(item);
        }
        s.items.push_back(item);
        drop(s);
        self.ready.notify_one();
        Ok(())
    }

    /// Waits for items and takes all of them; `None` once closed and drained.
    pub fn take_all(&self) -> Option<Vec<T>> {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if !s.items.is_empty() {
                return Some(s.items.drain(..).collect());
            }
            if s.closed {
                return None;
            }
            s = self.ready.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Refuses new items; the writer drains what is queued and stops.
    pub fn close(&self) {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).closed = true;
        self.ready.notify_all();
    }

    /// The writer loop: take a batch, make it durable with `write`, complete every item in
    /// order. After the first failure every item fails with that error, unwritten.
    pub fn run_writer(&self, mut write: impl FnMut(&mut [T]) -> Result<(), T::Error>) {
        let mut failed: Option<T::Error> = None;
        while let Some(mut batch) = self.take_all() {
            let result = match &failed {
                Some(e) => Err(e.clone()),
                None => write(&mut batch),
            };
            if let Err(e) = &result {
                failed = Some(e.clone());
            }
            for item in batch {
                item.complete(result.clone());
            }
        }
    }
}
