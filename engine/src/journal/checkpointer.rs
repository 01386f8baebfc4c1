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

use std::sync::Weak;
use std::time::Duration;

pub(crate) use crate::io::worker::Worker;

/// Default time a batch may wait in the ring before a background checkpoint.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// What the thread checkpoints.
pub(crate) trait Target: Send + Sync {
    /// Checkpoints if one is due after batches waited `interval`. Returns false when the
    /// target can no longer be written (closed or poisoned): the thread stops.
    fn checkpoint_if_due(&self, interval: Duration) -> bool;
}

/// Starts the checkpointer of `target` with `interval`; `None` when the system refuses a
/// thread (the ring is then still checkpointed when it fills and at close).
pub(crate) fn start(target: Weak<dyn Target>, interval: Duration) -> Option<Worker> {
    let tick = (interval / 4).max(Duration::from_millis(1));
    let work = move || target.upgrade().is_some_and(|t| t.checkpoint_if_due(interval));
    match Worker::spawn("vellum-checkpoint", tick, work) {
        Ok(worker) => Some(worker),
        Err(error) => {
            tracing::warn!(%error, "no checkpoint thread");
            None
        }
    }
}
