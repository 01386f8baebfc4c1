//! `--snapshot-archive`: the background task that archives the node's snapshots
//! (`crate::archive` has the format).
//!
//! Invariants: it never blocks the Raft core or the write path (it reads Raft's metrics,
//! asks for a snapshot through `trigger`, and does every IO in `spawn_blocking`); only the
//! leader uploads; a snapshot whose log index is not newer than the newest archive is not
//! uploaded again (what is archived is learned from the store's manifests on becoming
//! leader, so across leader changes too); a failing store is logged and counted, and retried
//! next period: it never stops the node.

use std::time::{Duration, Instant};

use vellum_raft_store::LogConfig;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;

use super::KvRaft;
use super::metrics as m;
use crate::archive;

/// What the task needs.
pub struct Archiver {
    pub url: String,
    pub interval: Duration,
    pub keep: usize,
    pub id: u64,
    pub raft: KvRaft,
    pub volume: vellum_engine::Volume,
}

impl Archiver {
    /// Runs until `stop` turns true.
    pub async fn run(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let url = self.url.clone();
        let target = match tokio::task::spawn_blocking(move || archive::open(&url)).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "--snapshot-archive: archiving is off");
                return;
            }
            Err(_) => return,
        };
        let started = Instant::now();
        let mut last_archive: Option<Instant> = None;
        // The newest archived index, once read from the store (None: not read yet).
        let mut archived: Option<Option<u64>> = None;
        let mut last_check: Option<Instant> = None;
        let mut was_leader = false;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            let age = last_archive.unwrap_or(started).elapsed().as_secs_f64();
            metrics::gauge!(m::ARCHIVE_AGE).set(age);
            if last_check.is_some_and(|t| t.elapsed() < self.interval) {
                continue;
            }
            last_check = Some(Instant::now());
            let metrics = self.raft.metrics().borrow_watched().clone();
            let leader = metrics.current_leader == Some(self.id);
            if !leader {
                was_leader = false;
                continue;
            }
            if !was_leader {
                archived = None; // another leader may have archived meanwhile: read again
                was_leader = true;
            }
            let known = if let Some(k) = archived {
                k
            } else {
                let t = target.clone();
                match tokio::task::spawn_blocking(move || archive::list(&t)).await {
                    Ok(Ok(all)) => {
                        let newest = all.last().map(|m| m.index);
                        if let Some(index) = newest {
                            metrics::gauge!(m::ARCHIVE_INDEX).set(index as f64);
                        }
                        archived = Some(newest);
                        newest
                    }
                    Ok(Err(e)) => {
                        metrics::counter!(m::ARCHIVE_FAILURES).increment(1);
                        tracing::warn!(
                            error = %e,
                            "listing the snapshot archives; retrying next period"
                        );
                        continue;
                    }
                    Err(_) => return,
                }
            };
            let snapshot = metrics.snapshot.map(|l| l.index);
            let applied = metrics.last_applied.map(|l| l.index);
            if applied > snapshot && applied > known {
                // So that the next archive reflects recent state (built off the write path).
                let _ = self.raft.trigger().snapshot().await;
            }
            let volume = self.volume.clone();
            let exported = tokio::task::spawn_blocking(move || {
                vellum_raft_store::v010::export_snapshot(&volume, &LogConfig::default())
            })
            .await;
            let snap = match exported {
                Ok(Ok(Some(snap))) => snap,
                Ok(Ok(None)) => continue,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "reading the current snapshot to archive it");
                    continue;
                }
                Err(_) => return,
            };
            let Some((_, index)) = snap.position() else { continue };
            if known.is_some_and(|k| k >= index) {
                continue; // unchanged: archived already
            }
            let (t, id, keep, bytes) = (target.clone(), self.id, self.keep, snap.data.len());
            let written = tokio::task::spawn_blocking(move || {
                let written = archive::write(&t, &snap, id);
                let pruned = written.is_ok().then(|| archive::prune(&t, keep));
                (written, pruned)
            })
            .await;
            let Ok((written, pruned)) = written else { return };
            match written {
                Ok(manifest) => {
                    metrics::counter!(m::ARCHIVE_UPLOADS).increment(1);
                    metrics::counter!(m::ARCHIVE_BYTES).increment(bytes as u64);
                    metrics::gauge!(m::ARCHIVE_INDEX).set(manifest.index as f64);
                    metrics::gauge!(m::ARCHIVE_AGE).set(0.0);
                    last_archive = Some(Instant::now());
                    archived = Some(Some(manifest.index));
                    tracing::info!(
                        index = manifest.index,
                        term = manifest.term,
                        bytes,
                        archive = %manifest.name(),
                        "snapshot archived"
                    );
                }
                Err(archive::ArchiveError::Stale(why)) => {
                    // The archive is complete; only latest.json belongs to a newer writer.
                    archived = Some(Some(index));
                    tracing::warn!(%why, "latest.json was updated by another writer; left as it is");
                }
                Err(e) => {
                    metrics::counter!(m::ARCHIVE_FAILURES).increment(1);
                    tracing::warn!(error = %e, index, "archiving the snapshot failed; retrying next period");
                }
            }
            if let Some(Err(e)) = pruned {
                tracing::warn!(error = %e, "deleting old snapshot archives");
            }
        }
    }
}
