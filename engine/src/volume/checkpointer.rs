//! The background checkpointer of a journaled volume: on a timer, it checkpoints a ring that
//! holds batches, so replay after a crash stays short even when the ring never fills.
//!
//! It only checkpoints what is already durable: it runs when no record is queued (the
//! metadata mutex held, so none can be queued meanwhile), so a checkpoint here never makes
//! anything durable earlier than the commit that asked for it, and never changes the commit
//! id. The fill threshold and a full ring are handled inline by the committing thread
//! (`commit::journal_commit`), and close checkpoints itself.
//!
//! The thread holds a weak reference to the volume: a volume dropped without close is not
//! kept alive by it.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::{Inner, commit};
use crate::io::lock;
use crate::superblock::VolumeState;

/// Default time a batch may wait in the ring before a background checkpoint.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// The thread's handle: a stop flag and its signal.
#[derive(Debug)]
pub(crate) struct Handle {
    signal: Arc<(Mutex<bool>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

/// Starts the checkpointer of `inner` (journaled, writable) with `interval`.
pub(crate) fn start(inner: &Arc<Inner>, interval: Duration) {
    let signal = Arc::new((Mutex::new(false), Condvar::new()));
    let theirs = Arc::clone(&signal);
    let weak = Arc::downgrade(inner);
    let spawned = std::thread::Builder::new()
        .name("vellum-checkpoint".into())
        .spawn(move || run(&weak, &theirs, interval));
    match spawned {
        Ok(thread) => *lock(&inner.checkpointer) = Some(Handle { signal, thread }),
        // Without it, the ring is still checkpointed when it fills and at close.
        Err(error) => tracing::warn!(%error, "no checkpoint thread"),
    }
}

fn run(inner: &Weak<Inner>, signal: &(Mutex<bool>, Condvar), interval: Duration) {
    let tick = (interval / 4).max(Duration::from_millis(1));
    loop {
        {
            let stop = lock(&signal.0);
            let stop = if *stop {
                stop
            } else {
                signal.1.wait_timeout(stop, tick).map_or_else(|e| e.into_inner().0, |r| r.0)
            };
            if *stop {
                return;
            }
        }
        let Some(inner) = inner.upgrade() else { return };
        if inner.usable().is_err() {
            return;
        }
        let mut meta = inner.meta();
        let due = meta.ring.as_ref().is_some_and(|r| r.used > 0)
            && meta.ns.journal.as_ref().is_some_and(Vec::is_empty)
            && meta.last_checkpoint.elapsed() >= interval;
        if due && let Err(error) = commit::commit(&inner, &mut meta, VolumeState::Dirty) {
            // A carrier failure poisoned the volume (the next caller hears of it); a full
            // volume waits for the next commit to make room.
            tracing::warn!(%error, "background checkpoint failed");
        }
    }
}

/// Stops the thread and waits for it (a checkpoint in progress ends first).
pub(crate) fn stop(inner: &Inner) {
    let Some(h) = lock(&inner.checkpointer).take() else { return };
    *lock(&h.signal.0) = true;
    h.signal.1.notify_one();
    if h.thread.thread().id() != std::thread::current().id() {
        let _ = h.thread.join();
    }
}
