//! The background checkpointer of a journaled volume: it checkpoints the ring when a commit
//! leaves it at least [`FILL_PERCENT`] full (the committing thread wakes it) and, on a timer,
//! when batches have waited in it for the interval, so commits rarely find the ring full and
//! replay after a crash stays short even when the ring never fills.
//!
//! It only checkpoints what is already durable: it runs when no record is queued (the
//! metadata mutex held, so none can be queued meanwhile), so a checkpoint here never makes
//! anything durable earlier than the commit that asked for it, and never changes the commit
//! id. When commits keep the queue busy, the committing thread itself checkpoints past
//! `commit::CHECKPOINT_FILL_PERCENT`, and a full ring makes the commit a checkpoint; close
//! checkpoints itself.
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
/// A commit that leaves the ring at least this full wakes the checkpointer.
pub const FILL_PERCENT: u64 = 50;

/// The thread's handle: its signal and the thread.
#[derive(Debug)]
pub(crate) struct Handle {
    signal: Arc<(Mutex<Signal>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Signal {
    stop: bool,
    kicked: bool,
}

/// Starts the checkpointer of `inner` (journaled, writable) with `interval`.
pub(crate) fn start(inner: &Arc<Inner>, interval: Duration) {
    let signal = Arc::new((Mutex::new(Signal::default()), Condvar::new()));
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

fn run(inner: &Weak<Inner>, signal: &(Mutex<Signal>, Condvar), interval: Duration) {
    let tick = (interval / 4).max(Duration::from_millis(1));
    loop {
        {
            let mut s = lock(&signal.0);
            if !s.stop && !s.kicked {
                s = signal.1.wait_timeout(s, tick).map_or_else(|e| e.into_inner().0, |r| r.0);
            }
            if s.stop {
                return;
            }
            s.kicked = false;
        }
        let Some(inner) = inner.upgrade() else { return };
        if inner.usable().is_err() {
            return;
        }
        let mut meta = inner.meta();
        let (used, len) = meta.ring.as_ref().map_or((0, 1), |r| (r.used, r.len));
        let due = used > 0
            && meta.ns.journal.as_ref().is_some_and(Vec::is_empty)
            && (used * 100 / len >= FILL_PERCENT || meta.last_checkpoint.elapsed() >= interval);
        if due && let Err(error) = commit::commit(&inner, &mut meta, VolumeState::Dirty) {
            // A carrier failure poisoned the volume (the next caller hears of it); a full
            // volume waits for the next commit to make room.
            tracing::warn!(%error, "background checkpoint failed");
        }
    }
}

/// Wakes the thread (a commit left the ring at least [`FILL_PERCENT`] full).
pub(crate) fn kick(inner: &Inner) {
    if let Some(h) = lock(&inner.checkpointer).as_ref() {
        let mut s = lock(&h.signal.0);
        if !s.kicked {
            s.kicked = true;
            h.signal.1.notify_one();
        }
    }
}

/// Stops the thread and waits for it (a checkpoint in progress ends first).
pub(crate) fn stop(inner: &Inner) {
    let Some(h) = lock(&inner.checkpointer).take() else { return };
    lock(&h.signal.0).stop = true;
    h.signal.1.notify_one();
    if h.thread.thread().id() != std::thread::current().id() {
        let _ = h.thread.join();
    }
}
