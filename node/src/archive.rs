//! Snapshot archives on any medium (issue 24; docs/OPERATIONS.md, "Disaster recovery"):
//! written by `vellum serve --snapshot-archive` and `vellum backup`, read by `vellum restore`
//! and `vellum serve --auto-restore`.
//!
//! Layout under a prefix URL (any medium of the facade: `s3://`, `local://`, ...):
//! - `PREFIX/<index:020>-<term>/data`: the snapshot's bytes as the raft store keeps them,
//!   written first, streamed in [`UPLOAD_CHUNK`] pieces through `Media::create`,
//!   `MediaFile::append` and `close` (a multipart upload on object storage above its
//!   threshold), never one buffer-sized `put`; on a file system to a per-writer `.part`
//!   name first, renamed into place. A `data` left by an earlier attempt is kept
//!   when its SHA-256 matches and replaced otherwise (without a manifest it is no archive).
//! - `PREFIX/<index:020>-<term>/manifest.json`: written LAST, create-only ([`Manifest`]):
//!   format, the snapshot's log id, membership, size and SHA-256 of `data`, the encoded
//!   openraft meta, when and by which node.
//! - `PREFIX/latest.json`: the newest manifest, replaced only conditionally (`If-Match` on the
//!   version read): a stale writer gets a precondition failure, never overwrites.
//!
//! Invariants: an archive is complete exactly when its manifest exists; listing reads
//! manifests only, so data without a manifest (an upload cut short) is never taken. A
//! restore checks size and SHA-256 of `data` against the manifest and decodes it before
//! anything is written. Pruning removes the manifest first, then the data.
//! Every function here is blocking: call it from `spawn_blocking`.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use vellum_engine::media::{self, Bare, MediaOptions, PutMode, Target};
use vellum_raft_store::KvNode;
use vellum_raft_store::v010::ExportedSnapshot;

/// The manifest format this build writes and reads.
pub const FORMAT: u32 = 1;
/// The manifest's name in an archive.
pub const MANIFEST: &str = "manifest.json";
/// The data object's name in an archive.
pub const DATA: &str = "data";
/// The pointer to the newest archive, under the prefix.
pub const LATEST: &str = "latest.json";

/// What went wrong with an archive.
#[derive(Debug)]
pub enum ArchiveError {
    /// The medium failed (unreachable, refused, missing bucket, ...).
    Media(vellum_engine::Error),
    /// An archive's bytes are not what its manifest says (size, checksum, decoding).
    Corrupt(String),
    /// No complete archive under the URL.
    NoArchive(String),
    /// `latest.json` moved on since it was read: another (newer) writer updated it.
    Stale(String),
    /// The raft store refused (e.g. the volume already holds raft state).
    Store(vellum_raft_store::Error),
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveError::Media(e) => write!(f, "{e}"),
            ArchiveError::Corrupt(why) => write!(f, "corrupt archive: {why}"),
            ArchiveError::NoArchive(url) => write!(f, "no complete archive at {url}"),
            ArchiveError::Stale(why) => write!(f, "stale archive writer: {why}"),
            ArchiveError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ArchiveError {}

impl From<vellum_engine::Error> for ArchiveError {
    fn from(e: vellum_engine::Error) -> Self {
        ArchiveError::Media(e)
    }
}

impl From<vellum_raft_store::Error> for ArchiveError {
    fn from(e: vellum_raft_store::Error) -> Self {
        ArchiveError::Store(e)
    }
}

type Result<T> = std::result::Result<T, ArchiveError>;

/// One member in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Node id.
    pub id: u64,
    /// Its Raft address.
    pub raft_addr: String,
    /// Its API address.
    pub api_addr: String,
}

/// `manifest.json` (and `latest.json`, which is a copy of the newest one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The cluster's id, when it has one (none today).
    pub cluster_id: Option<String>,
    /// The snapshot's last log id: term.
    pub term: u64,
    /// The snapshot's last log id: index.
    pub index: u64,
    /// The snapshot's membership (the cluster archived, not the one restored).
    pub membership: Vec<Member>,
    /// Bytes of `data`.
    pub size: u64,
    /// SHA-256 of `data`, lower-case hex.
    pub sha256: String,
    /// The openraft snapshot meta as the store encodes it, base64 (standard, padded).
    pub meta_base64: String,
    /// When the archive was written, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The node that wrote it (0: `vellum backup`).
    pub node_id: u64,
}

impl Manifest {
    /// The archive's directory name: `<index:020>-<term>` (sorts by index).
    pub fn name(&self) -> String {
        name(self.term, self.index)
    }
}

/// An archive directory's name.
pub fn name(term: u64, index: u64) -> String {
    format!("{index:020}-{term}")
}

/// Opens an archive URL (a bare path is a host path).
pub fn open(url: &str) -> Result<Target> {
    Ok(media::open_str(url, Bare::Local, MediaOptions::default())?)
}

fn join(dir: &str, name: &str) -> String {
    let dir = dir.trim_end_matches('/');
    format!("{dir}/{name}")
}

fn is_not_found(e: &vellum_engine::Error) -> bool {
    matches!(
        e,
        vellum_engine::Error::NotFound { .. }
            | vellum_engine::Error::Remote {
                kind: vellum_engine::error::RemoteFailure::NotFound,
                ..
            }
    )
}

fn is_precondition(e: &vellum_engine::Error) -> bool {
    matches!(e, vellum_engine::Error::PreconditionFailed { .. })
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Creates the directory `path` and, where missing, its parents (`mkdir -p`: an archive
/// prefix on a new backup disk need not exist yet); one that exists is fine.
fn mkdir(target: &Target, path: &str) -> Result<()> {
    match target.media.mkdir(path) {
        Ok(()) => Ok(()),
        Err(vellum_engine::Error::AlreadyExists { .. }) => Ok(()),
        Err(vellum_engine::Error::NotSupported { .. }) => Ok(()),
        Err(vellum_engine::Error::NotFound { .. }) => {
            match path.trim_end_matches('/').rsplit_once('/') {
                Some((parent, _)) if !parent.is_empty() => {
                    mkdir(target, parent)?;
                    mkdir(target, path)
                }
                _ => Err(vellum_engine::Error::NotFound { path: path.as_bytes().to_vec() }.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes `snap` as one archive under `target` (data first, manifest last, then
/// `latest.json`); returns its manifest. An archive already complete under the same name is
/// left as it is (same log id, same state).
pub fn write(target: &Target, snap: &ExportedSnapshot, node_id: u64) -> Result<Manifest> {
    let Some((term, index)) = snap.position() else {
        return Err(ArchiveError::Corrupt("the snapshot covers no log entry".into()));
    };
    let membership = snap
        .members()
        .into_iter()
        .map(|(id, n)| Member { id, raft_addr: n.raft_addr, api_addr: n.api_addr })
        .collect();
    let manifest = Manifest {
        format: FORMAT,
        cluster_id: None,
        term,
        index,
        membership,
        size: snap.data.len() as u64,
        sha256: sha256_hex(&snap.data),
        meta_base64: base64::engine::general_purpose::STANDARD.encode(&snap.meta_bytes),
        created_unix_ms: now_ms(),
        node_id,
    };
    let dir = join(&target.path, &manifest.name());
    mkdir(target, &target.path)?;
    mkdir(target, &dir)?;
    let data = join(&dir, DATA);
    let present = match target.media.stat(&data) {
        // Left by an earlier attempt (or another writer) of the same log id: the same
        // state if its checksum says so; otherwise an upload cut short, replaced.
        Ok(_) => sha256_hex(&target.media.get(&data)?.0) == manifest.sha256,
        Err(e) if is_not_found(&e) => false,
        Err(e) => return Err(e.into()),
    };
    if !present && target.media.rename_is_atomic() {
        // A file system writes in place: stream to this writer's own name, then rename, so
        // two nodes archiving the same log id never interleave in one `data`.
        let part = format!("{data}.{node_id}-{}.part", now_ms());
        let done = upload(target, &part, &snap.data)
            .and_then(|()| target.media.rename(&part, &data).map_err(ArchiveError::from));
        if done.is_err() {
            let _ = target.media.remove(&part);
        }
        done?;
    } else if !present {
        // Object storage: the object appears only when `close` completes the upload.
        upload(target, &data, &snap.data)?;
    }
    let json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    match target.media.put(&join(&dir, MANIFEST), &json, PutMode::Create) {
        Ok(_) => {}
        Err(e)
            if is_precondition(&e) || matches!(e, vellum_engine::Error::AlreadyExists { .. }) =>
        {
            return read_manifest(target, &dir);
        }
        Err(e) => return Err(e.into()),
    }
    update_latest(target, &manifest, &json)?;
    Ok(manifest)
}

/// The size of one `append` of an upload (object storage: one part of its multipart upload).
pub const UPLOAD_CHUNK: usize = 8 << 20;

/// Streams `bytes` to `path` (replacing what is there): `create`, `append` per
/// [`UPLOAD_CHUNK`], `close` (which completes the upload). A failure leaves no complete object
/// on object storage; on a file system a partial file, which [`write`] replaces.
fn upload(target: &Target, path: &str, bytes: &[u8]) -> Result<()> {
    let file = target.media.create(path)?;
    for chunk in bytes.chunks(UPLOAD_CHUNK) {
        file.append(chunk)?;
    }
    file.close()?;
    Ok(())
}

/// Points `latest.json` at `manifest` unless it names a newer archive already; a writer
/// whose read version is stale gets [`ArchiveError::Stale`].
pub fn update_latest(target: &Target, manifest: &Manifest, json: &[u8]) -> Result<()> {
    let path = join(&target.path, LATEST);
    let mode = match target.media.get(&path) {
        Ok((bytes, version)) => {
            if let Ok(current) = serde_json::from_slice::<Manifest>(&bytes)
                && current.index >= manifest.index
            {
                return Ok(());
            }
            PutMode::Update(version)
        }
        Err(e) if is_not_found(&e) => PutMode::Create,
        Err(e) => return Err(e.into()),
    };
    match target.media.put(&path, json, mode) {
        Ok(_) => Ok(()),
        Err(e)
            if is_precondition(&e) || matches!(e, vellum_engine::Error::AlreadyExists { .. }) =>
        {
            Err(ArchiveError::Stale(e.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

fn read_manifest(target: &Target, dir: &str) -> Result<Manifest> {
    let (bytes, _) = target.media.get(&join(dir, MANIFEST))?;
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| ArchiveError::Corrupt(format!("{dir}/{MANIFEST}: {e}")))?;
    if manifest.format != FORMAT {
        return Err(ArchiveError::Corrupt(format!(
            "{dir}/{MANIFEST}: format {} (this build reads {FORMAT})",
            manifest.format
        )));
    }
    Ok(manifest)
}

/// The complete archives under `target` (those with a manifest), oldest first. A prefix that
/// does not exist holds none.
pub fn list(target: &Target) -> Result<Vec<Manifest>> {
    let entries = match target.media.list(&target.path) {
        Ok(entries) => entries,
        Err(e) if is_not_found(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut found = BTreeMap::new();
    for entry in entries {
        let Some(base) = entry.path.trim_end_matches('/').rsplit('/').next() else { continue };
        let Some((index, term)) = base.split_once('-') else { continue };
        let (Ok(index), Ok(_term)) = (index.parse::<u64>(), term.parse::<u64>()) else {
            continue;
        };
        match read_manifest(target, &join(&target.path, base)) {
            Ok(m) => {
                found.insert((index, m.term), m);
            }
            Err(ArchiveError::Media(e)) if is_not_found(&e) => {} // incomplete: no manifest
            Err(ArchiveError::Corrupt(why)) => tracing::warn!("skipping an archive: {why}"),
            Err(e) => return Err(e),
        }
    }
    Ok(found.into_values().collect())
}

/// Deletes the oldest complete archives beyond the newest `keep` (manifest first, then
/// data); returns how many.
pub fn prune(target: &Target, keep: usize) -> Result<usize> {
    let all = list(target)?;
    let doomed = all.len().saturating_sub(keep.max(1));
    for manifest in &all[..doomed] {
        let dir = join(&target.path, &manifest.name());
        target.media.remove(&join(&dir, MANIFEST))?;
        match target.media.remove(&join(&dir, DATA)) {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        // A directory (local://) goes too; object storage has none.
        let _ = target.media.remove(&dir);
    }
    Ok(doomed)
}

/// The archive `url` names: one archive (a directory with a manifest) or a prefix, where the
/// newest complete archive is taken; `None` when a prefix holds none.
pub fn find(target: &Target) -> Result<Option<(Target, Manifest)>> {
    match read_manifest(target, &target.path) {
        Ok(m) => {
            let parent = target.path.trim_end_matches('/').rsplit_once('/').map_or("/", |p| p.0);
            let parent = Target { media: target.media.clone(), path: parent.to_string() };
            return Ok(Some((parent, m)));
        }
        Err(ArchiveError::Media(e)) if is_not_found(&e) => {}
        Err(e) => return Err(e),
    }
    Ok(list(target)?.pop().map(|m| (target.clone(), m)))
}

/// Reads the data of the archive `manifest` names under `prefix` and checks its size,
/// SHA-256 and decoding; nothing is written.
pub fn fetch(prefix: &Target, manifest: &Manifest) -> Result<ExportedSnapshot> {
    let dir = join(&prefix.path, &manifest.name());
    let (data, _) = prefix.media.get(&join(&dir, DATA)).map_err(|e| {
        if is_not_found(&e) {
            ArchiveError::Corrupt(format!("{dir}/{DATA} is missing"))
        } else {
            ArchiveError::Media(e)
        }
    })?;
    if data.len() as u64 != manifest.size {
        return Err(ArchiveError::Corrupt(format!(
            "{dir}/{DATA} holds {} bytes, the manifest says {} (truncated?)",
            data.len(),
            manifest.size
        )));
    }
    let sum = sha256_hex(&data);
    if sum != manifest.sha256 {
        return Err(ArchiveError::Corrupt(format!(
            "{dir}/{DATA}: SHA-256 {sum} does not match the manifest's {}",
            manifest.sha256
        )));
    }
    let meta = base64::engine::general_purpose::STANDARD
        .decode(&manifest.meta_base64)
        .map_err(|e| ArchiveError::Corrupt(format!("{dir}/{MANIFEST}: meta: {e}")))?;
    let snap = ExportedSnapshot::decode(meta, data)
        .map_err(|e| ArchiveError::Corrupt(format!("{dir}: {e}")))?;
    if snap.position() != Some((manifest.term, manifest.index)) {
        return Err(ArchiveError::Corrupt(format!(
            "{dir}: the snapshot is at {:?}, the manifest says ({}, {})",
            snap.position(),
            manifest.term,
            manifest.index
        )));
    }
    Ok(snap)
}

/// Finds, fetches and checks the archive at `url` (see [`find`]).
pub fn fetch_url(url: &str) -> Result<Option<(Manifest, ExportedSnapshot)>> {
    let target = open(url)?;
    let Some((prefix, manifest)) = find(&target)? else { return Ok(None) };
    let snap = fetch(&prefix, &manifest)?;
    Ok(Some((manifest, snap)))
}

/// Restores `snap` into `volume` (no store open on it) with `members` as the new cluster.
pub fn restore_into(
    volume: &vellum_engine::Volume,
    snap: &ExportedSnapshot,
    members: BTreeMap<u64, KvNode>,
) -> Result<()> {
    let capacity = volume.info().layout.capacity_bytes();
    let log = vellum_raft_store::LogConfig {
        segment_bytes: vellum_raft_store::LogConfig::segment_bytes_for(capacity),
        ..vellum_raft_store::LogConfig::default()
    };
    vellum_raft_store::v010::restore_snapshot(volume, log, snap, members)?;
    Ok(())
}

/// `vellum restore`.
#[derive(clap::Args, Debug, Clone)]
pub struct RestoreArgs {
    /// One archive (`PREFIX/<index>-<term>`) or a prefix given to --snapshot-archive (the
    /// newest complete archive there is taken).
    #[arg(long, value_name = "URL")]
    pub from: String,
    /// The new member's volume: created if missing; an existing one must hold no raft state.
    #[arg(long, value_name = "PATH")]
    pub volume: std::path::PathBuf,
    /// The new member's id (as `vellum serve --id`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub id: u64,
    /// The new cluster: `1=RAFT_ADDR/API_ADDR,...`, as `vellum serve --initial-cluster` (the
    /// same on every member restored).
    #[arg(long, value_name = "MEMBERS")]
    pub initial_cluster: String,
    /// Capacity of a volume created here [default: 1GiB, as `vellum serve`].
    #[arg(long, value_parser = crate::size::parse_size)]
    pub volume_size: Option<u64>,
}

/// `vellum restore`: fetch and check first, then create the volume and restore into it.
pub fn restore_command(args: &RestoreArgs) -> std::result::Result<(), crate::error::CliError> {
    use crate::error::CliError;
    let members = crate::server::config::parse_initial_cluster(&args.initial_cluster)
        .map_err(|e| CliError::Usage(format!("--initial-cluster: {e}")))?;
    if !members.contains_key(&args.id) {
        return Err(CliError::Usage(format!(
            "--initial-cluster does not contain this node's id {}",
            args.id
        )));
    }
    let failed = |e: ArchiveError| CliError::Usage(format!("restore from {}: {e}", args.from));
    let (manifest, snap) = fetch_url(&args.from)
        .map_err(failed)?
        .ok_or_else(|| failed(ArchiveError::NoArchive(args.from.clone())))?;
    let size = args.volume_size.unwrap_or(crate::server::config::DEFAULT_VOLUME_BYTES);
    let volume =
        vellum_raft_store::open_volume(&args.volume, size, vellum_engine::VolumeOptions::default())
            .map_err(|e| {
                CliError::Usage(format!("opening the volume {}: {e}", args.volume.display()))
            })?;
    let log = vellum_raft_store::LogConfig::default();
    let state = vellum_raft_store::v010::has_raft_state(&volume, &log);
    let restored = match state {
        Ok(true) => Err(CliError::Usage(format!(
            "the volume {} already holds raft state: restore into a new volume",
            args.volume.display()
        ))),
        Ok(false) => restore_into(&volume, &snap, members).map_err(failed),
        Err(e) => {
            Err(CliError::Usage(format!("reading the volume {}: {e}", args.volume.display())))
        }
    };
    let closed = volume.close();
    restored?;
    closed.map_err(CliError::Engine)?;
    println!(
        "restored archive {} (log index {}, term {}, {} bytes, sha256 {}) into {} as node {}",
        manifest.name(),
        manifest.index,
        manifest.term,
        manifest.size,
        manifest.sha256,
        args.volume.display(),
        args.id
    );
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
mod tests {
    use super::*;

    fn node(n: u64) -> KvNode {
        KvNode {
            raft_addr: format!("127.0.0.1:{}", 7000 + n),
            api_addr: format!("127.0.0.1:{}", 8000 + n),
        }
    }

    fn snap(term: u64, index: u64) -> ExportedSnapshot {
        let members = (1..=3).map(|n| (n, node(n))).collect();
        let data = (0..index).map(|i| (format!("k{i}"), format!("v{i}").into_bytes())).collect();
        ExportedSnapshot::build(term, 1, index, members, data).unwrap()
    }

    fn local(dir: &std::path::Path) -> (String, Target) {
        let url = format!("local://{}/archives", dir.display());
        let target = open(&url).unwrap();
        (url, target)
    }

    #[test]
    fn archives_are_written_listed_newest_last_and_pruned_to_keep() {
        let dir = tempfile::tempdir().unwrap();
        let (url, target) = local(dir.path());
        assert!(list(&target).unwrap().is_empty(), "a prefix that does not exist holds none");
        for (term, index) in [(1, 10), (2, 20), (2, 30)] {
            let m = write(&target, &snap(term, index), 1).unwrap();
            assert_eq!(m.name(), format!("{index:020}-{term}"));
        }
        // Writing the same log id again leaves the archive as it is.
        write(&target, &snap(2, 30), 2).unwrap();
        let all = list(&target).unwrap();
        assert_eq!(all.iter().map(|m| m.index).collect::<Vec<_>>(), vec![10, 20, 30]);
        let latest: Manifest = serde_json::from_slice(
            &std::fs::read(dir.path().join("archives").join(LATEST)).unwrap(),
        )
        .unwrap();
        assert_eq!(latest.index, 30);
        assert_eq!(prune(&target, 2).unwrap(), 1);
        assert_eq!(
            list(&target).unwrap().iter().map(|m| m.index).collect::<Vec<_>>(),
            vec![20, 30]
        );
        assert!(!dir.path().join("archives").join(name(1, 10)).exists());
        // The prefix gives the newest; one archive's URL gives that one.
        let (m, s) = fetch_url(&url).unwrap().unwrap();
        assert_eq!((m.index, s.position()), (30, Some((2, 30))));
        let one = format!("{url}/{}", name(2, 20));
        let (m, s) = fetch_url(&one).unwrap().unwrap();
        assert_eq!((m.index, s.members().len()), (20, 3));
    }

    #[test]
    fn a_prefix_whose_parents_do_not_exist_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("local://{}/new-disk/cluster/archives", dir.path().display());
        let target = open(&url).unwrap();
        write(&target, &snap(1, 5), 1).unwrap();
        assert_eq!(list(&target).unwrap().iter().map(|m| m.index).collect::<Vec<_>>(), vec![5]);
    }

    #[test]
    fn data_without_a_manifest_is_not_an_archive() {
        let dir = tempfile::tempdir().unwrap();
        let (url, target) = local(dir.path());
        write(&target, &snap(1, 10), 1).unwrap();
        // An upload cut short: data, no manifest.
        let half = dir.path().join("archives").join(name(3, 50));
        std::fs::create_dir_all(&half).unwrap();
        std::fs::write(half.join(DATA), &snap(3, 50).data[..10]).unwrap();
        assert_eq!(list(&target).unwrap().len(), 1);
        assert_eq!(fetch_url(&url).unwrap().unwrap().0.index, 10);
        // A later upload of the same log id replaces the cut-short data (no manifest: no
        // archive), then completes it.
        let m = write(&target, &snap(3, 50), 1).unwrap();
        assert_eq!(list(&target).unwrap().len(), 2);
        assert_eq!(std::fs::read(half.join(DATA)).unwrap(), snap(3, 50).data);
        assert_eq!(fetch_url(&url).unwrap().unwrap().0.index, m.index);
        // No `.part` left behind.
        assert_eq!(std::fs::read_dir(&half).unwrap().count(), 2);
        let empty = tempfile::tempdir().unwrap();
        assert!(fetch_url(&local(empty.path()).0).unwrap().is_none());
    }

    #[test]
    fn truncated_or_corrupted_data_is_refused_by_size_and_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let (url, target) = local(dir.path());
        let m = write(&target, &snap(1, 10), 1).unwrap();
        let data = dir.path().join("archives").join(m.name()).join(DATA);
        let good = std::fs::read(&data).unwrap();
        std::fs::write(&data, &good[..good.len() - 1]).unwrap();
        let err = fetch_url(&url).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        std::fs::write(&data, &bad).unwrap();
        let err = fetch_url(&url).unwrap_err().to_string();
        assert!(err.contains("SHA-256") && !err.contains('\n'), "{err}");
        std::fs::remove_file(&data).unwrap();
        let err = fetch_url(&url).unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
    }

    #[test]
    fn a_stale_latest_writer_is_refused_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let (_, target) = local(dir.path());
        write(&target, &snap(1, 10), 1).unwrap();
        let path = join(&target.path, LATEST);
        let (_, read_by_old) = target.media.get(&path).unwrap();
        // A newer writer moves latest.json on...
        write(&target, &snap(2, 20), 2).unwrap();
        // ... then the stale one, holding the version it read, is refused.
        let old = serde_json::to_vec(&list(&target).unwrap()[0]).unwrap();
        let err = target.media.put(&path, &old, PutMode::Update(read_by_old)).unwrap_err();
        assert!(is_precondition(&err), "{err}");
        let (now, _) = target.media.get(&path).unwrap();
        assert_eq!(serde_json::from_slice::<Manifest>(&now).unwrap().index, 20);
        // An older archive never moves latest.json back.
        write(&target, &snap(1, 15), 1).unwrap();
        let (now, _) = target.media.get(&path).unwrap();
        assert_eq!(serde_json::from_slice::<Manifest>(&now).unwrap().index, 20);
    }

    #[test]
    fn restore_builds_a_volume_once_and_refuses_one_with_state() {
        let dir = tempfile::tempdir().unwrap();
        let (url, target) = local(dir.path());
        write(&target, &snap(2, 40), 1).unwrap();
        let cluster = "1=127.0.0.1:7101/127.0.0.1:8101,2=127.0.0.1:7102/127.0.0.1:8102";
        let args = RestoreArgs {
            from: url.clone(),
            volume: dir.path().join("n1.vlm"),
            id: 1,
            initial_cluster: cluster.into(),
            volume_size: Some(32 << 20),
        };
        restore_command(&args).unwrap();
        let err = restore_command(&args).unwrap_err().to_string();
        assert!(err.contains("already holds raft state"), "{err}");
        let volume = vellum_raft_store::open_volume(
            &args.volume,
            32 << 20,
            vellum_engine::VolumeOptions::default(),
        )
        .unwrap();
        let log = vellum_raft_store::LogConfig::default();
        let restored = vellum_raft_store::v010::export_snapshot(&volume, &log).unwrap().unwrap();
        assert_eq!(restored.position(), Some((2, 40)));
        let members = restored.members();
        assert_eq!(members.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(members[&2].api_addr, "127.0.0.1:8102");
        volume.close().unwrap();
        // A corrupt archive creates nothing.
        let m = list(&target).unwrap().pop().unwrap();
        std::fs::write(dir.path().join("archives").join(m.name()).join(DATA), b"junk").unwrap();
        let other = RestoreArgs { volume: dir.path().join("n2.vlm"), id: 2, ..args };
        assert!(restore_command(&other).is_err());
        assert!(!other.volume.exists());
    }
}
