//! The page cache's writeback thread and its thresholds (design: "Own page cache"; modelled
//! on the kernel's dirty thresholds, with our own parameters).
//!
//! - Every [`PERIOD`] the thread wakes and writes back pages dirty for longer than
//!   [`EXPIRE`]; when more than [`BACKGROUND_PERCENT`] of the frames are dirty it also writes
//!   the lowest blocks until the dirty count is back under that line. A writer that crosses
//!   the line wakes it at once.
//! - A writer that finds more than [`HARD_PERCENT`] of the frames dirty helps: it drains one
//!   budget itself before its write returns, so dirty pages never fill the cache.
//! - Every drain takes at most [`DRAIN_BUDGET_BYTES`] (the thread loops for more), and
//!   consecutive dirty blocks go out as one carrier write.
//! - A failed writeback poisons the volume (the bytes it held are lost) and stops the thread.
//!
//! The thread holds the IO layer, never the volume's metadata: a commit (under the metadata
//! mutex) drains the cache itself and waits for the thread's writes in flight.

use std::sync::Arc;
use std::time::Duration;

use super::Io;
use super::cache::Select;
use super::lock;
use super::worker::Worker;

/// How often the thread wakes without being asked.
pub const PERIOD: Duration = Duration::from_millis(100);
/// A page dirty for longer than this is written at the next wake-up.
pub const EXPIRE: Duration = Duration::from_secs(1);
/// Background writeback starts above this share of the frames dirty.
pub const BACKGROUND_PERCENT: usize = 10;
/// Writers help (drain one budget themselves) above this share.
pub const HARD_PERCENT: usize = 20;
/// Most bytes one drain writes.
pub const DRAIN_BUDGET_BYTES: usize = 8 << 20;
/// Most bytes one cache miss reads (the demanded pages and their readahead).
pub const MAX_READ_RUN_BYTES: usize = 2 << 20;

fn pages(io: &Io, percent: usize) -> usize {
    io.cache().map_or(usize::MAX, |c| (c.frames() * percent / 100).max(1))
}

fn budget(io: &Io) -> usize {
    io.cache().map_or(0, |c| (DRAIN_BUDGET_BYTES / c.page_size()).max(1))
}

/// Starts the thread for `io` (which has a cache).
pub(crate) fn start(io: &Arc<Io>) {
    let theirs = Arc::clone(io);
    let background = pages(io, BACKGROUND_PERCENT);
    match Worker::spawn("vellum-writeback", PERIOD, move || drain(&theirs, background)) {
        Ok(worker) => *lock(&io.writeback) = Some(worker),
        // Without the thread, writers over the hard line and every sync still drain: slower
        // to react, never wrong.
        Err(error) => tracing::warn!(%error, "no writeback thread: writers drain the cache"),
    }
}

/// One wake-up of the thread: drains budgets while each is full. False when the thread
/// should end (the volume closed, or a failed write poisoned it).
fn drain(io: &Io, background: usize) -> bool {
    let Some(cache) = io.cache() else { return false };
    if io.is_poisoned() {
        return false;
    }
    loop {
        let select = Select { older_than: EXPIRE, above: background };
        match io.session().and_then(|s| cache.drain(&s, select, budget(io))) {
            Ok(n) if n >= budget(io) => {}
            Ok(_) => return true,
            // Closed, or the IO layer poisoned the volume.
            Err(_) => return false,
        }
    }
}

/// After a buffered write: wakes the thread above the background line, and drains one budget
/// in the writer's own thread above the hard line.
pub(crate) fn after_write(io: &Io, session: &super::Session<'_>) -> crate::error::Result<()> {
    let Some(cache) = io.cache() else { return Ok(()) };
    let dirty = cache.dirty_pages();
    if dirty > pages(io, HARD_PERCENT) {
        let select = Select { older_than: Duration::MAX, above: pages(io, BACKGROUND_PERCENT) };
        cache.drain(session, select, budget(io))?;
    } else if dirty > pages(io, BACKGROUND_PERCENT)
        && let Some(worker) = lock(&io.writeback).as_ref()
    {
        worker.kick();
    }
    Ok(())
}

/// Stops the thread and waits for it (its writes in flight end first).
pub(crate) fn stop(io: &Io) {
    let worker = lock(&io.writeback).take();
    if let Some(worker) = worker {
        worker.stop();
    }
}
