//! Snapshot files in the volume (docs/RAFT-LOG.md, "Snapshots").
//!
//! A snapshot is one file, `DIR/snapshot/current`, with its openraft `SnapshotMeta` as the
//! file attribute `meta`. A new snapshot is written to a temporary file of its own
//! (`tmp-N`), renamed over `current`, and published by one metadata commit: data, name and
//! meta become durable together, and a crash before the commit leaves the previous snapshot
//! in place.
//!
//! Invariants: publications are serialized (one [`Publisher`] per store, shared by every
//! clone of the state machine: openraft builds snapshots on a task of their own, concurrently
//! with installing one received from the leader); and newest wins: a snapshot older than the
//! current one is never published over it, because the log may already be purged past the
//! older one. Temporary files a crash left behind are removed at open.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use vellum_engine::Volume;

use crate::error::Result;

const META_ATTR: &[u8] = b"meta";
const TMP_PREFIX: &str = "tmp-";

fn dir_path(dir: &str) -> String {
    format!("{}/snapshot", dir.trim_end_matches('/'))
}

fn path(dir: &str, name: &str) -> Vec<u8> {
    format!("{}/{name}", dir_path(dir)).into_bytes()
}

/// Serializes the publications of one store.
#[derive(Debug, Default)]
pub struct Publisher {
    lock: Mutex<()>,
    next_tmp: AtomicU64,
}

/// What a publication did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The snapshot is `current` now.
    Current,
    /// A newer snapshot was current already; this one was dropped.
    Superseded,
}

impl Publisher {
    /// Writes and publishes a snapshot (one commit), unless `is_older(current_meta)` says
    /// the current snapshot is newer than this one.
    pub fn write(
        &self,
        volume: &Volume,
        dir: &str,
        meta: &[u8],
        data: &[u8],
        is_older: impl FnOnce(&[u8]) -> bool,
    ) -> Result<Published> {
        let _one_at_a_time = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(current) = read_meta(volume, dir)?
            && is_older(&current)
        {
            return Ok(Published::Superseded);
        }
        volume.create_dir_all(dir_path(dir))?;
        let n = self.next_tmp.fetch_add(1, Ordering::Relaxed);
        let tmp = path(dir, &format!("{TMP_PREFIX}{n}"));
        if volume.exists(&tmp)? {
            volume.remove(&tmp)?;
        }
        let file = volume.create_file(&tmp)?;
        file.write_at(data, 0)?;
        file.set_attr(META_ATTR, meta)?;
        drop(file);
        volume.rename(&tmp, path(dir, "current"))?;
        volume.commit()?;
        Ok(Published::Current)
    }
}

/// The current snapshot's meta, if there is one.
fn read_meta(volume: &Volume, dir: &str) -> Result<Option<Vec<u8>>> {
    let current = path(dir, "current");
    if !volume.exists(&current)? {
        return Ok(None);
    }
    Ok(Some(volume.open_file(&current)?.attr(META_ATTR)?.unwrap_or_default()))
}

/// The current snapshot's meta and data, if there is one.
pub fn read(volume: &Volume, dir: &str) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let current = path(dir, "current");
    if !volume.exists(&current)? {
        return Ok(None);
    }
    let file = volume.open_file(&current)?;
    let meta = file.attr(META_ATTR)?.unwrap_or_default();
    Ok(Some((meta, file.read_to_end()?)))
}

/// Removes temporary files a crash left behind (a commit by someone else may have made
/// one durable half written); they were never published. Returns how many.
pub fn remove_leftovers(volume: &Volume, dir: &str) -> Result<usize> {
    let snap_dir = dir_path(dir);
    if volume.info().read_only || !volume.exists(&snap_dir)? {
        return Ok(0);
    }
    let mut removed = 0;
    for entry in volume.list(&snap_dir)? {
        if entry.name.starts_with(TMP_PREFIX.as_bytes()) || entry.name == b"current.tmp" {
            let mut p = snap_dir.clone().into_bytes();
            p.push(b'/');
            p.extend_from_slice(&entry.name);
            volume.remove(&p)?;
            removed += 1;
        }
    }
    if removed > 0 {
        volume.commit()?;
    }
    Ok(removed)
}
