//! The background checkpointer of a journaled volume: a thread that asks its target to
//! checkpoint when a commit wakes it (the ring passed [`super::ring::BACKGROUND_PERCENT`]) and
//! on a timer (batches have waited the interval), so commits rarely find the ring full and
//! replay after a crash stays short even when the ring never fills.
//!
//! The journal knows no volume: the thread holds its target weakly through [`Target`], and
//! the target decides (under its metadata mutex) whether a checkpoint is due
//! ([`super::Ring::background_due`]) and only checkpoints what is already durable (no record
//! queued), so a background checkpoint never makes anything durable earlier than the commit
//! that asked for it and never changes the commit id. A target dropped without close is not
//! kept alive by the thread.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::io::lock;

/// Default time a batch may wait in the ring before a background checkpoint.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// What the thread checkpoints.
pub(crate) trait Target: Send + Sync {
    /// Checkpoints if one is due after batches waited `interval`. Returns false when the
    /// target can no longer be written (closed or poisoned): the thread stops.
    fn checkpoint_if_due(&self, interval: Duration) -> bool;
}

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

/// Starts the checkpointer of `target` with `interval`; `None` when the system refuses a
/// thread (the ring is then still checkpointed when it fills and at close).
pub(crate) fn start(target: Weak<dyn Target>, interval: Duration) -> Option<Handle> {
    let signal = Arc::new((Mutex::new(Signal::default()), Condvar::new()));
    let theirs = Arc::clone(&signal);
    let spawned = std::thread::Builder::new()
        .name("vellum-checkpoint".into())
        .spawn(move || run(&target, &theirs, interval));
    match spawned {
        Ok(thread) => Some(Handle { signal, thread }),
        Err(error) => {
            tracing::warn!(%error, "no checkpoint thread");
            None
        }
    }
}

fn run(target: &Weak<dyn Target>, signal: &(Mutex<Signal>, Condvar), interval: Duration) {
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
        let Some(target) = target.upgrade() else { return };
        if !target.checkpoint_if_due(interval) {
            return;
        }
    }
}

impl Handle {
    /// Wakes the thread (a commit left the ring past the background line).
    pub(crate) fn kick(&self) {
        let mut s = lock(&self.signal.0);
        if !s.kicked {
            s.kicked = true;
            self.signal.1.notify_one();
        }
    }

    /// Stops the thread and waits for it (a checkpoint in progress ends first).
    pub(crate) fn stop(self) {
        lock(&self.signal.0).stop = true;
        self.signal.1.notify_one();
        if self.thread.thread().id() != std::thread::current().id() {
            let _ = self.thread.join();
        }
    }
}
