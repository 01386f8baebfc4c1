//! The page cache's threads: the writeback thread and its thresholds (design: "Own page
//! cache"; modelled on the kernel's dirty thresholds, with our own parameters), and the
//! readahead threads.
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
//!
//! Asynchronous readahead: a sequential reader queues the windows past its own readahead
//! (`Readahead::next_async`, four windows ahead) and [`READAHEAD_THREADS`] threads load them
//! (`PageCache::prefetch`) while it consumes the pages before them, so the carrier reads of
//! a buffered scan overlap its copies. A loading page is pinned, so a reader waits for it
//! and a direct write's discard waits and drops it, as for the reader's own loads. A failed
//! readahead read is dropped without poisoning anything: the reader that wants those pages
//! loads them itself and meets the error. The threads stop with the writeback thread.

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
    let writeback = lock(&io.writeback).take();
    let readahead = std::mem::take(&mut *lock(&io.readahead));
    for worker in writeback.into_iter().chain(readahead) {
        worker.stop();
    }
}

/// Windows queued for the readahead thread beyond this many drop the oldest: a reader that
/// outruns the thread reads its pages itself.
const PREFETCH_QUEUE: usize = 8;

/// Readahead threads: two keep a read in flight while the other sets its window up (four
/// did no better on a two-core machine).
const READAHEAD_THREADS: usize = 2;

/// Starts the readahead thread for `io` (which has a cache): it loads the windows that
/// sequential readers queue ([`prefetch`]) while they consume the pages before them, so a
/// buffered scan's carrier reads overlap its copies instead of alternating with them.
pub(crate) fn start_readahead(io: &Arc<Io>) {
    for _ in 0..READAHEAD_THREADS {
        let theirs = Arc::clone(io);
        match Worker::spawn("vellum-readahead", PERIOD * 10, move || read_ahead(&theirs)) {
            Ok(worker) => lock(&io.readahead).push(worker),
            // Without the thread, readers load every window themselves: slower, never wrong.
            Err(error) => tracing::warn!(%error, "no readahead thread: readers load every window"),
        }
    }
}

/// Queues the absent pages of physical blocks `first..until` for the readahead thread.
pub(crate) fn prefetch(io: &Io, first: u64, until: u64) {
    if first >= until {
        return;
    }
    let workers = lock(&io.readahead);
    if workers.is_empty() {
        return;
    }
    {
        let mut queue = lock(&io.prefetches);
        if queue.back() == Some(&(first, until)) {
            return;
        }
        if queue.len() >= PREFETCH_QUEUE {
            queue.pop_front();
        }
        queue.push_back((first, until));
    }
    for worker in workers.iter() {
        worker.kick();
    }
}

/// One wake-up of the readahead thread: loads the queued windows. A failed read is left to
/// the reader that wants the pages (it loads them itself and gets the error). False when the
/// volume closed.
fn read_ahead(io: &Io) -> bool {
    let Some(cache) = io.cache() else { return false };
    loop {
        let Some((first, until)) = lock(&io.prefetches).pop_front() else { return true };
        let Ok(session) = io.session() else { return false };
        if let Err(error) = cache.prefetch(&session, first, until) {
            tracing::debug!(%error, first, until, "a readahead read failed; the reader retries");
        }
    }
}
