//! Group commit by combining: the handoff between the callers that queue writes and the one
//! that performs them.
//!
//! A caller pushes its item (entries with their flush callback, a vote, a truncation) and then
//! tries to become the writer. If no one is writing, it takes everything queued, makes it
//! durable with as few writes as it can, completes the items in the order they were pushed,
//! and looks again, until the queue is empty. If someone is writing, the caller returns at
//! once: the writer takes its item in the next round. So a lone caller writes in its own
//! thread (no handoff, no context switch), and callers that arrive during a write are
//! combined into the next one.
//!
//! Guarantees (model-checked with loom in `tests/loom_group_commit.rs`): items complete in
//! push order, never before the write that covers them returned, each exactly once, none is
//! left behind, and after a failed write every later item fails.
//!
//! A writer that panics (a bug: an assertion about to protect the disk) fails like a write
//! that returned an error: its batch and every later item complete with
//! `Complete::writer_panicked`, and the writer state is never written with again. Nothing
//! waits forever on a writer that is gone. A completion callback that panics (a bug in the
//! caller) is caught and logged: the write it learns of is done, so the other items of its
//! batch are completed and the queue goes on.

use std::collections::VecDeque;

use crate::sync::{Mutex, TryLockError, yield_point};

/// Something the writer completes once it is durable (or failed).
pub trait Complete {
    /// What a failed write reports to each of its items.
    type Error: Clone;
    /// Reports the write's outcome to this item.
    fn complete(self, result: Result<(), Self::Error>);
    /// The error of the items of a write that panicked, and of every item after it.
    fn writer_panicked() -> Self::Error;
}

struct State<T, E> {
    items: VecDeque<T>,
    closed: bool,
    failed: Option<E>,
}

/// Runs `item`'s completion, catching a panic in it (a bug in the caller's callback): the
/// panic is logged once, and the writer goes on to the next item. Unwinding out of here would
/// leave the rest of the batch without an answer and end the thread that drains the queue
/// (the log's IO thread), after which every later append would wait forever.
fn complete<T: Complete>(item: T, result: Result<(), T::Error>) {
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| item.complete(result)));
    if let Err(payload) = caught {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text panic".into());
        tracing::error!(panic = %what, "a log write's completion callback panicked (a bug in \
            the caller); the log goes on");
    }
}

/// A FIFO of items and the writer state `W` that only one caller at a time holds.
pub struct Combiner<T: Complete, W> {
    state: Mutex<State<T, T::Error>>,
    writer: Mutex<W>,
}

fn lock<X>(m: &Mutex<X>) -> crate::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<T: Complete, W> Combiner<T, W> {
    /// A combiner whose writes `writer` performs.
    pub fn new(writer: W) -> Self {
        Combiner {
            state: Mutex::new(State { items: VecDeque::new(), closed: false, failed: None }),
            writer: Mutex::new(writer),
        }
    }

    /// Queues `item` (`Err(item)` once closed) without writing.
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut s = lock(&self.state);
        if s.closed {
            return Err(item);
        }
        s.items.push_back(item);
        Ok(())
    }

    /// Writes what is queued unless another caller is writing (it will take it).
    pub fn drain(&self, write: impl Fn(&mut W, &mut [T]) -> Result<(), T::Error>) {
        loop {
            let mut w = match self.writer.try_lock() {
                Ok(w) => w,
                Err(TryLockError::WouldBlock) => return,
                // Nothing should poison it (a panicking write and a panicking callback are
                // both caught below); were it poisoned, the writer state is whole all the
                // same, and `failed` decides the rest.
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            loop {
                let (mut batch, failed) = {
                    let mut s = lock(&self.state);
                    (s.items.drain(..).collect::<Vec<T>>(), s.failed.clone())
                };
                yield_point();
                if batch.is_empty() {
                    break;
                }
                let result = match failed {
                    Some(e) => Err(e),
                    None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        write(&mut w, &mut batch)
                    }))
                    .unwrap_or_else(|_| Err(T::writer_panicked())),
                };
                if let Err(e) = &result {
                    lock(&self.state).failed.get_or_insert_with(|| e.clone());
                }
                for item in batch {
                    complete(item, result.clone());
                }
            }
            drop(w);
            yield_point();
            // An item pushed while we held the writer found it taken and left it to us.
            if lock(&self.state).items.is_empty() {
                return;
            }
        }
    }

    /// Queues `item` and writes (see the module docs).
    pub fn submit(
        &self,
        item: T,
        write: impl Fn(&mut W, &mut [T]) -> Result<(), T::Error>,
    ) -> Result<(), T> {
        self.push(item)?;
        self.drain(write);
        Ok(())
    }

    /// The writer state, for work outside the queue (open-time fencing).
    pub fn writer(&self) -> crate::sync::MutexGuard<'_, W> {
        lock(&self.writer)
    }

    /// The first failure, once a write failed.
    pub fn failed(&self) -> Option<T::Error> {
        lock(&self.state).failed.clone()
    }

    /// Refuses new items.
    pub fn close(&self) {
        lock(&self.state).closed = true;
    }
}
