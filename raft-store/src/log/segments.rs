//! Segment files inside the volume, and the spare-segment maker.
//!
//! A segment is a preallocated file `DIR/log/NNNNNNNN.seg` whose blocks are written and
//! committed before the log uses it, so appending into it is a pure overwrite: one
//! write-through write, no allocation, no commit. A background thread keeps one *spare*
//! ready (created, preallocated, zero-filled, committed; its header all zero). Rolling to a
//! new segment is one durable write of the spare's header; creating and deleting segments
//! are the only metadata commits the log makes.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use vellum_engine::{File, Volume};

use crate::error::{Error, Result, SharedError};

/// One active segment.
#[derive(Debug)]
pub struct SegInfo {
    pub salt: u64,
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
}

#[derive(Debug, Default)]
struct SpareState {
    ready: Option<Spare>,
    shutdown: bool,
    failed: Option<SharedError>,
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Path of segment file number `n` under `dir`.
pub fn segment_path(dir: &[u8], n: u64) -> Vec<u8> {
    let mut p = dir.to_vec();
    p.extend_from_slice(format!("/{n:08}.seg").as_bytes());
    p
}

/// Creates, preallocates (written zeros) and commits one segment file.
pub fn create_segment(volume: &Volume, path: &[u8], bytes: u64) -> Result<Arc<File>> {
    let file = volume.create_file(path)?;
    file.preallocate(0, bytes)?;
    volume.commit()?;
    Ok(Arc::new(file))
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
        loop {
            let n = {
                let mut s = lock(m);
                while (s.ready.is_some() || s.failed.is_some()) && !s.shutdown {
                    s = cv.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                if s.shutdown {
                    return;
                }
                s.next_file_no += 1;
                s.next_file_no - 1
            };
            let path = segment_path(dir, n);
            let made = create_segment(volume, &path, segment_bytes);
            let mut s = lock(m);
            match made {
                Ok(file) => s.ready = Some(Spare { path, file }),
                Err(e) => {
                    tracing::error!(error = %e, "creating a spare log segment failed");
                    s.failed = Some(Arc::new(e));
                }
            }
            cv.notify_all();
        }
    }

    /// Takes the spare, waiting for the maker if it is still at work.
    pub fn take(&self) -> Result<Spare> {
        let (m, cv) = &*self.state;
        let mut s = lock(m);
        if let Some((volume, dir, bytes)) = &self.inline {
            if let Some(spare) = s.ready.take() {
                return Ok(spare);
            }
            s.next_file_no += 1;
            let path = segment_path(dir, s.next_file_no - 1);
            let file = create_segment(volume, &path, *bytes)?;
            return Ok(Spare { path, file });
        }
        loop {
            if let Some(spare) = s.ready.take() {
                cv.notify_all();
                return Ok(spare);
            }
            if let Some(e) = &s.failed {
                return Err(Error::shared(e));
            }
            if s.shutdown || self.thread.is_none() {
                return Err(Error::Closed);
            }
            s = cv.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
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
