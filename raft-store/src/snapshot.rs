//! Snapshot files in the volume (docs/RAFT-LOG.md, "Snapshots").
//!
//! A snapshot is one file, `DIR/snapshot/current`, with its openraft `SnapshotMeta` as the
//! file attribute `meta`. A new snapshot is written to `current.tmp`, renamed over `current`,
//! and published by one metadata commit: data, name and meta become durable together, and a
//! crash before the commit leaves the previous snapshot in place.

use vellum_engine::Volume;

use crate::error::Result;

const META_ATTR: &[u8] = b"meta";

fn path(dir: &str, name: &str) -> Vec<u8> {
    format!("{}/snapshot/{name}", dir.trim_end_matches('/')).into_bytes()
}

/// Writes and publishes a snapshot (one commit).
pub fn write(volume: &Volume, dir: &str, meta: &[u8], data: &[u8]) -> Result<()> {
    volume.create_dir_all(format!("{}/snapshot", dir.trim_end_matches('/')))?;
    let tmp = path(dir, "current.tmp");
    if volume.exists(&tmp)? {
        volume.remove(&tmp)?;
    }
    let file = volume.create_file(&tmp)?;
    file.write_at(data, 0)?;
    file.set_attr(META_ATTR, meta)?;
    drop(file);
    volume.rename(&tmp, path(dir, "current"))?;
    volume.commit()?;
    Ok(())
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
