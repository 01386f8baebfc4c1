//! A background thread that works when kicked or when its period passes, and that its handle
//! stops and joins: the shape of the page cache's writeback thread and of the journal's
//! checkpointer, written once.
//!
//! Invariants: a kick is never lost (it is a flag under the signal's mutex, checked before
//! waiting); `stop` wakes the thread at once and waits for the work in progress to end; the
//! thread never joins itself (a worker whose last owner is dropped on its own thread).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::lock;

/// The handle of a running worker.
#[derive(Debug)]
pub(crate) struct Worker {
    signal: Arc<(Mutex<Signal>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Signal {
    stop: bool,
    kicked: bool,
}

impl Worker {
    /// Starts thread `name`, which calls `work` after every kick and at least every `period`
    /// until `work` returns false or the worker is stopped.
    pub(crate) fn spawn(
        name: &str,
        period: Duration,
        mut work: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<Worker> {
        let signal = Arc::new((Mutex::new(Signal::default()), Condvar::new()));
        let theirs = Arc::clone(&signal);
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            loop {
                {
                    let mut s = lock(&theirs.0);
                    if !s.stop && !s.kicked {
                        s = theirs
                            .1
                            .wait_timeout(s, period)
                            .map_or_else(|e| e.into_inner().0, |r| r.0);
                    }
                    if s.stop {
                        return;
                    }
                    s.kicked = false;
                }
                if !work() {
                    return;
                }
            }
        })?;
        Ok(Worker { signal, thread })
    }

    /// Wakes the thread (its work runs once more soon).
    pub(crate) fn kick(&self) {
        let mut s = lock(&self.signal.0);
        if !s.kicked {
            s.kicked = true;
            self.signal.1.notify_one();
        }
    }

    /// Stops the thread and waits for its work in progress.
    pub(crate) fn stop(self) {
        lock(&self.signal.0).stop = true;
        self.signal.1.notify_one();
        if self.thread.thread().id() != std::thread::current().id() {
            let _ = self.thread.join();
        }
    }
}
