//! Segment files inside the volume, and the spare-segment maker.
//!
//! A segment is a preallocated file `DIR/log/NNNNNNNN.seg` whose blocks are written and
//! committed before the log uses it, so appending into it is a pure overwrite: one
//! write-through write, no allocation, no commit. A background thread keeps one *spare*
//! ready (created, preallocated, zero-filled, committed; its header all zero). Rolling to a
//! new segment is one durable write of the spare's header; creating and deleting segments
//! are the only metadata commits the log makes.
//!
//! The maker never gives up: a failure (a volume briefly full, say) is counted
//! (`vellum_log_spare_failures_total`), logged, and retried with a growing pause, so a roll
//! hours later finds a spare once space is back. A roll that finds none waits a bounded time
//! for the maker before it fails.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vellum_engine::{File, IoPolicy, Tier, Volume};

use super::frame::Seal;
use super::state::lock;
use crate::error::{Error, Result, SharedError};
use crate::metrics as m;

/// The first pause after a failed spare, doubled per failure up to `RETRY_MAX`.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How long a roll waits for a spare the maker is still retrying.
const TAKE_WAIT: Duration = Duration::from_secs(2);

/// One active segment.
#[derive(Debug)]
pub struct SegInfo {
    pub seal: Seal,
    /// Bytes of the segment file.
    pub len: u64,
    pub file: Arc<File>,
    pub path: Vec<u8>,
    /// Highest entry index written into it (0: none yet).
    pub max_index: u64,
}

/// The active segments by sequence number.
#[derive(Debug, Default)]
pub struct Segments {
    pub by_seq: BTreeMap<u64, SegInfo>,
}

/// A spare segment ready to activate.
#[derive(Debug)]
pub struct Spare {
    pub path: Vec<u8>,
    pub file: Arc<File>,
    pub len: u64,
}

/// How the maker is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpareStatus {
    /// A spare is ready to activate.
    pub ready: bool,
    /// Failed attempts since the maker started.
    pub failures: u64,
    /// Failed attempts since its last success (0: healthy).
    pub failing: u64,
}

#[derive(Debug, Default)]
struct SpareState {
    ready: Option<Spare>,
    shutdown: bool,
    failures: u64,
    failing: u64,
    last_error: Option<SharedError>,
    next_file_no: u64,
}

/// Keeps one spare segment ready, made by a background thread (or, without one, made when
/// it is taken: deterministic, for tests).
#[derive(Debug)]
pub struct SpareMaker {
    state: Arc<(Mutex<SpareState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    inline: Option<(Volume, Vec<u8>, u64)>,
}

/// Path of segment file number `n` under `dir`.
/// The IO tiers of a segment: appends go direct (write-through in production: durable when
/// the carrier write returns, never parked in the cache), reads of older entries (a follower
/// catching up, recovery's scan) go through the volume's cache, with readahead along the
/// segment's extent.
pub const SEGMENT_POLICY: IoPolicy = IoPolicy { read: Tier::Buffered, write: Tier::Direct };

pub fn segment_path(dir: &[u8], n: u64) -> Vec<u8> {
    let mut p = dir.to_vec();
    p.extend_from_slice(format!("/{n:08}.seg").as_bytes());
    p
}

/// Creates, preallocates (written zeros) and commits one segment file. On failure nothing
/// of it stays behind to be committed later by someone else.
pub fn create_segment(volume: &Volume, path: &[u8], bytes: u64) -> Result<Spare> {
    let file = volume.create_file_with(path, SEGMENT_POLICY)?;
    let made = file.preallocate(0, bytes).and_then(|()| volume.commit());
    if let Err(e) = made {
        drop(file);
        let _ = volume.remove(path);
        return Err(e.into());
    }
    Ok(Spare { path: path.to_vec(), file: Arc::new(file), len: bytes })
}

impl SpareMaker {
    /// Starts the maker; `spare` is a spare found at open, `next_file_no` the first unused
    /// file number.
    pub fn start(
        volume: Volume,
        dir: Vec<u8>,
        segment_bytes: u64,
        spare: Option<Spare>,
        next_file_no: u64,
        background: bool,
    ) -> SpareMaker {
        let state = Arc::new((
            Mutex::new(SpareState { ready: spare, next_file_no, ..SpareState::default() }),
            Condvar::new(),
        ));
        if !background {
            return SpareMaker { state, thread: None, inline: Some((volume, dir, segment_bytes)) };
        }
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("vellum-spare".into())
            .spawn(move || Self::run(&shared, &volume, &dir, segment_bytes))
            .ok();
        SpareMaker { state, thread, inline: None }
    }

    fn run(state: &(Mutex<SpareState>, Condvar), volume: &Volume, dir: &[u8], segment_bytes: u64) {
        let (m, cv) = state;
        let mut pause = RETRY_FIRST;
        loop {
            let n = {
                let mut s = lock(m);
                while s.ready.is_some() && !s.shutdown {
                    s = cv.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                if s.shutdown {
                    return;
                }
                s.next_file_no += 1;
                s.next_file_no - 1
            };
            let made = create_segment(volume, &segment_path(dir, n), segment_bytes);
            let mut s = lock(m);
            match made {
                Ok(spare) => {
                    if s.failing > 0 {
                        tracing::info!(after = s.failing, "a spare log segment is ready again");
                    }
                    s.ready = Some(spare);
                    s.failing = 0;
                    s.last_error = None;
                    pause = RETRY_FIRST;
                }
                Err(e) => {
                    s.failures += 1;
                    s.failing += 1;
                    metrics::counter!(m::SPARE_FAILURES_TOTAL).increment(1);
                    if s.failing == 1 || s.failing.is_power_of_two() {
                        tracing::error!(
                            error = %e,
                            attempts = s.failing,
                            retry_in = ?pause,
                            "creating a spare log segment failed; retrying"
                        );
                    }
                    s.last_error = Some(Arc::new(e));
                    cv.notify_all();
                    // Wait before the retry (woken early only by shutdown).
                    let deadline = Instant::now() + pause;
                    while !s.shutdown && Instant::now() < deadline {
                        let left = deadline.saturating_duration_since(Instant::now());
                        s = cv
                            .wait_timeout(s, left)
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .0;
                    }
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
            metrics::gauge!(m::SPARE_READY).set(if s.ready.is_some() { 1.0 } else { 0.0 });
            cv.notify_all();
        }
    }

    /// Takes the spare, waiting for the maker if it is still at work (a bounded time while
    /// it is failing).
    pub fn take(&self) -> Result<Spare> {
        let (m, cv) = &*self.state;
        let mut s = lock(m);
        if let Some((volume, dir, bytes)) = &self.inline {
            if let Some(spare) = s.ready.take() {
                return Ok(spare);
            }
            s.next_file_no += 1;
            let path = segment_path(dir, s.next_file_no - 1);
            return create_segment(volume, &path, *bytes);
        }
        let deadline = Instant::now() + TAKE_WAIT;
        loop {
            if let Some(spare) = s.ready.take() {
                metrics::gauge!(m::SPARE_READY).set(0.0);
                cv.notify_all();
                return Ok(spare);
            }
            if s.shutdown || self.thread.is_none() {
                return Err(Error::Closed);
            }
            let now = Instant::now();
            if s.failing > 0 && now >= deadline {
                return Err(s.last_error.clone().map_or(Error::Closed, Error::NoSpare));
            }
            let left = if s.failing > 0 { deadline - now } else { TAKE_WAIT };
            s = cv.wait_timeout(s, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }

    /// How the maker is doing (for tests and metrics).
    pub fn status(&self) -> SpareStatus {
        let s = lock(&self.state.0);
        SpareStatus { ready: s.ready.is_some(), failures: s.failures, failing: s.failing }
    }

    /// Stops the maker thread.
    pub fn stop(&mut self) {
        {
            let (m, cv) = &*self.state;
            lock(m).shutdown = true;
            cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SpareMaker {
    fn drop(&mut self) {
        self.stop();
    }
}
