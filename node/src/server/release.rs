//! Releasing the replica of a group that moved away from this member (`vellum cluster move`
//! took it elsewhere): its entries, its snapshot and its applied map are dropped, and the
//! group's Raft instance here starts again empty, as on a member that never held it, so
//! that a scale-out frees the old members' memory and volume space as well as their disks'
//! writes.
//!
//! A moved replica cannot tell by itself: the move keeps it as a learner until it holds
//! the swap, then drops it, and a group replicates only to its members, so its last
//! membership says learner for ever. The directory (`directory.rs`) tells it. A group (never
//! group 0: it holds every member) whose replica here votes in neither its effective nor
//! its committed membership, holds raft state, and whose latest membership known (the
//! directory's when it is later than this replica's own) names this member neither as voter
//! nor as learner, found so by two looks in a row [`CHECK_EVERY`] apart by the same
//! membership (a change the directory saw once may be undone), is released:
//! 1. The group's instance stops (its health watch is told first: a stop is no fault), and
//!    the release waits until its state machine's worker and snapshot builds are done (at
//!    most [`RETIRE_WAIT`]; else the instance starts again unchanged).
//! 2. Its stored state is read again (the log's last membership entry, or the snapshot's):
//!    unless it is still the membership the look judged, with this member no voter (the
//!    instance took a change at the last moment), the instance starts again unchanged.
//! 3. A marker `DIR/released/G` records the vote (one metadata commit); the snapshot goes;
//!    the log drops the group and creates it again, empty; the vote is saved into it; the
//!    marker goes (one commit).
//! 4. A new instance starts on the empty group and takes the old one's place in the table,
//!    the Raft authority (`member::Guard::replace`) and the health watch.
//!
//! Invariants:
//! - Only a replica that is no voter in any membership this member holds of the group is
//!   released: a learner counts in no quorum, so its entries are no acknowledged write's
//!   only copy.
//! - The vote survives: a power cut after the log dropped the group finds the marker at the
//!   next start ([`finish`]), which does step 3 again, vote included, before the groups
//!   open. A member that forgot a vote could grant two in one term. Two orderings keep it
//!   ([`Rule`]): the marker is durable before the log drops the group, and the vote is saved
//!   into the new group before the marker goes. A power cut at every carrier operation of
//!   a release, and again during the recovery, checks both (`every_cut_of_a_release_keeps_
//!   the_vote`, with a mutant for each rule).
//! - Nothing of the old instance writes the group once the wipe begins: its core is stopped
//!   and nothing else shares its state machine (`KvReader::sharers`).
//! - A replica added back starts from the group's snapshot, never from its first entry: a
//!   move or `cluster add` purges the group's log first (`http::cluster::compact_first`).
//!   Replaying old memberships that name it a voter, with a short log, it could grant a
//!   vote that a voter of those memberships must not get.
//! - A failure between step 1 and the new instance stops the node (the health watch's
//!   verdict, as a stopped core): a group without an instance would answer nothing, and
//!   the next start finishes the release from its marker or finds the replica still held.
//! - The node's shutdown waits for a release in progress before it stops the groups.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use vellum_raft_store::log::LogCore;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine};
use vellum_raft_store::v010::openraft::{Config, EntryPayload, Raft, RaftMetrics};
use vellum_raft_store::v010::{KvBatcher, KvStateMachine, LogStore, TypeConfig, open_group};
use vellum_raft_store::{BatchLimits, DiskLatency, KvBatching};

use super::directory::{Directory, votes_in};
use super::groups::{Group, Table};
use super::member::Guard;
use super::metrics::Health;
use super::network::Network;
use super::space::Space;
use super::transport::PeerClients;

/// How often the releaser looks for replicas to release.
pub const CHECK_EVERY: Duration = Duration::from_secs(2);
/// Replicas this node released (their state dropped, the group's instance started empty).
pub const RELEASED: &str = "vellum_raft_replicas_released_total";
/// How long a release waits for the old state machine's worker and snapshot builds to end.
const RETIRE_WAIT: Duration = Duration::from_secs(30);
/// Entries read at a time when looking for a group's last membership entry.
const SCAN_CHUNK: u64 = 64;
/// The attribute of a release marker that holds the group's vote (empty: none).
const VOTE_ATTR: &[u8] = b"vote";

/// What a group's instance is started from; the same at start and after a release.
#[derive(Clone)]
pub struct Launch {
    pub id: u64,
    pub config: Arc<Config>,
    pub guard: Arc<Guard>,
    pub peers: PeerClients,
    /// What the node's and its peers' volumes take (`space.rs`).
    pub space: Arc<Space>,
    /// G, the node's group count.
    pub groups: u64,
    pub batching: BatchLimits,
    pub latency: DiskLatency,
    pub health: Arc<Health>,
    /// Each group's ready flag (`groups::spawn_ready`).
    pub ready: Vec<Arc<AtomicBool>>,
}

impl Launch {
    /// Starts group `g`'s Raft instance on `log` and `sm`.
    pub async fn raft(
        &self,
        g: u64,
        log: LogStore<TypeConfig>,
        sm: KvStateMachine,
    ) -> Result<super::KvRaft, String> {
        let (guard, space) = (Arc::clone(&self.guard), Arc::clone(&self.space));
        let network = Network::new(guard, self.peers.clone(), space, g, self.groups);
        Raft::new(self.id, Arc::clone(&self.config), network, log, sm)
            .await
            .map_err(|e| format!("starting raft group {g}: {e}"))
    }

    /// Group `g` around its running instance `raft` (its proposer started here).
    pub fn group(
        &self,
        g: u64,
        raft: super::KvRaft,
        kv: vellum_raft_store::v010::KvReader,
    ) -> Group {
        Group {
            id: g,
            proposer: KvBatcher::start_paced(
                raft.clone(),
                KvBatching,
                self.batching,
                self.latency.clone(),
            ),
            raft,
            kv,
            retired: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The path of group `g`'s release marker, for a log under `dir`.
fn marker(dir: &str, g: u64) -> String {
    format!("{}/released/{g}", dir.trim_end_matches('/'))
}

/// Finishes the releases a power cut interrupted (see the module header): run before the
/// log's groups are shaped and opened. Blocking.
pub fn finish(log: &LogCore, volume: &vellum_engine::Volume, dir: &str) -> Result<(), String> {
    let at = format!("{}/released", dir.trim_end_matches('/'));
    if !volume.exists(&at).map_err(|e| e.to_string())? {
        return Ok(());
    }
    for entry in volume.list(&at).map_err(|e| e.to_string())? {
        let Some(g) = std::str::from_utf8(&entry.name).ok().and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let vote = volume
            .open_file(marker(dir, g))
            .and_then(|f| f.attr(VOTE_ATTR))
            .map_err(|e| format!("reading the release marker of group {g}: {e}"))?
            .filter(|v| !v.is_empty());
        tracing::info!(group = g, "finishing the release of this group's replica");
        wipe(log, volume, dir, g, vote)?;
    }
    Ok(())
}

/// Step 3 of the module header: group `g`'s snapshot and entries go, its `vote` stays.
/// Blocking.
fn wipe(
    log: &LogCore,
    volume: &vellum_engine::Volume,
    dir: &str,
    g: u64,
    vote: Option<Vec<u8>>,
) -> Result<(), String> {
    assert!(g != 0, "group 0 holds every member and is never released");
    let err = |what: &'static str| move |e: vellum_raft_store::Error| format!("{what}: {e}");
    let eng = |what: &'static str| move |e: vellum_engine::Error| format!("{what}: {e}");
    let path = marker(dir, g);
    let write_marker = || -> Result<(), String> {
        volume
            .create_dir_all(format!("{}/released", dir.trim_end_matches('/')))
            .map_err(eng("marker"))?;
        if !volume.exists(&path).map_err(eng("marker"))? {
            let file = volume.create_file(&path).map_err(eng("marker"))?;
            file.set_attr(VOTE_ATTR, vote.as_deref().unwrap_or_default()).map_err(eng("marker"))?;
            drop(file);
            volume.commit().map_err(eng("marker"))?;
        }
        Ok(())
    };
    let remove_marker = || -> Result<(), String> {
        volume.remove(&path).map_err(eng("marker"))?;
        volume.commit().map_err(eng("marker"))
    };
    if !broken(Rule::MarkerFirst) {
        write_marker()?;
    }
    let snapshots = format!("{}/snapshot", vellum_raft_store::v010::group_machine_dir(dir, g));
    if volume.exists(&snapshots).map_err(eng("snapshot"))? {
        for entry in volume.list(&snapshots).map_err(eng("snapshot"))? {
            let mut p = snapshots.clone().into_bytes();
            p.push(b'/');
            p.extend_from_slice(&entry.name);
            volume.remove(&p).map_err(eng("snapshot"))?;
        }
        volume.commit().map_err(eng("snapshot"))?;
    }
    if log.group(g).is_ok() {
        log.drop_group(g).map_err(err("dropping the group's entries"))?;
    }
    let core = log.create_group(g).map_err(err("creating the group again"))?;
    if broken(Rule::MarkerFirst) {
        write_marker()?;
    }
    if broken(Rule::VoteBeforeMarkerGoes) {
        remove_marker()?;
    }
    if let Some(vote) = vote {
        let (tx, rx) = std::sync::mpsc::channel();
        core.save_vote(vote, Box::new(move |r| drop(tx.send(r))))
            .map_err(err("saving the vote"))?;
        rx.recv()
            .map_err(|_| "saving the vote: the log stopped".to_string())?
            .map_err(|e| format!("saving the vote: {e}"))?;
    }
    if !broken(Rule::VoteBeforeMarkerGoes) {
        remove_marker()?;
    }
    Ok(())
}

/// The ordering rules of [`wipe`] that keep a vote across a power cut, each broken by a
/// mutant of the crash test (`every_cut_of_a_release_keeps_the_vote`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// The marker (with the vote) is durable before the log drops the group.
    MarkerFirst,
    /// The vote is saved into the new group before the marker goes.
    VoteBeforeMarkerGoes,
}

#[cfg(test)]
thread_local! {
    /// The rule the crash test's mutant breaks on this thread (`None`: all kept).
    static BROKEN: std::cell::Cell<Option<Rule>> = const { std::cell::Cell::new(None) };
}

/// Whether `rule` is broken on purpose (a mutant of the crash test; never outside tests).
fn broken(rule: Rule) -> bool {
    #[cfg(test)]
    {
        BROKEN.with(|b| b.get() == Some(rule))
    }
    #[cfg(not(test))]
    {
        let _ = rule;
        false
    }
}

/// Whether this member's replica of a group, as `m` (its instance's metrics) shows it, may
/// be released by what `directory` knows of the group (see the module header): the latest
/// membership known, the directory's when it is later than this replica's, names this
/// member neither as voter nor as learner.
pub fn releasable(g: u64, me: u64, m: &RaftMetrics<TypeConfig>, directory: &Directory) -> bool {
    let holds_state =
        m.last_log_index.is_some() || m.last_applied.is_some() || m.snapshot.is_some();
    let electable =
        votes_in(m, me) || m.committed_membership_config.membership().voter_ids().any(|v| v == me);
    let ours = m.membership_config.log_id().as_ref().map(|l| l.index);
    let named = match directory.get(g).filter(|v| v.config_index > ours) {
        Some(later) => later.voters.contains(&me) || later.learners.contains(&me),
        // This replica holds the latest membership known (it may even hold the one that
        // dropped it: the leader replicates a change to the replicas it drops).
        None => m.membership_config.membership().learner_ids().any(|l| l == me),
    };
    g != 0 && holds_state && !electable && !named
}

/// Looks for replicas to release every [`CHECK_EVERY`] while this node runs several groups:
/// a replica is released when two looks in a row find it releasable by the same membership
/// (a change the directory saw once may still be undone). Ends with `stop`, after the release
/// in progress: the node's shutdown waits for the task before it stops the groups'
/// instances, so that no instance starts after them.
pub fn spawn(
    launch: Launch,
    groups: Arc<Table>,
    directory: Arc<Directory>,
    log: LogCore,
    volume: vellum_engine::Volume,
    dir: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    if groups.len() < 2 {
        return None;
    }
    Some(tokio::spawn(async move {
        // Per group: the directory's membership index the last look found it releasable by.
        let mut seen: std::collections::BTreeMap<u64, Option<u64>> =
            std::collections::BTreeMap::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(CHECK_EVERY) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            let mut now = std::collections::BTreeMap::new();
            for group in groups.all() {
                let m = group.raft.metrics().borrow_watched().clone();
                if !releasable(group.id, launch.id, &m, &directory) {
                    continue;
                }
                let by = directory.get(group.id).and_then(|v| v.config_index);
                now.insert(group.id, by);
                if seen.get(&group.id) != Some(&by) {
                    continue; // once more at the next look
                }
                let ours = m.membership_config.log_id().as_ref().map(|l| l.index);
                let r = release(&launch, &groups, group, ours, (&log, &volume, &dir), &stop).await;
                if let Err(e) = r {
                    launch.health.core_stopped(&e, &launch.ready[0]);
                    return;
                }
            }
            seen = now;
        }
    }))
}

/// Steps 1 to 4 of the module header for `old`.
async fn release(
    launch: &Launch,
    groups: &Table,
    old: Group,
    ours: Option<u64>,
    (log, volume, dir): (&LogCore, &vellum_engine::Volume, &str),
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let g = old.id;
    let me = launch.id;
    tracing::info!(group = g, "this member holds no replica of the group any more: releasing it");
    old.retired.store(true, Ordering::Release);
    if let Err(e) = old.raft.shutdown().await {
        tracing::warn!(group = g, error = %e, "stopping the group's instance");
    }
    // The old machine's worker and snapshot builds run on after the core stopped: nothing of
    // them may write the group's snapshot directory once the wipe begins. Left then: the
    // table's slot and `reader`.
    let reader = old.kv.clone();
    drop(old);
    let deadline = tokio::time::Instant::now() + RETIRE_WAIT;
    let mut idle = reader.sharers() <= 2;
    while !idle && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        idle = reader.sharers() <= 2;
    }
    drop(reader);
    if !idle {
        tracing::warn!(group = g, "the group's old state machine is still busy: not released now");
    }
    let (log2, volume2, dir2) = (log.clone(), volume.clone(), dir.to_string());
    let runtime = tokio::runtime::Handle::current();
    let (released, (store, sm)) = tokio::task::spawn_blocking(move || {
        let open =
            || open_group(&volume2, &log2, &dir2, g).map_err(|e| format!("opening group {g}: {e}"));
        let (mut store, mut sm) = open()?;
        // What the instance took after the look (a change that names this member again,
        // say) keeps the replica: its stored membership must be the one the look judged.
        let (voter, index) = runtime.block_on(stored_membership(&mut store, &mut sm, me))?;
        if !idle || voter || index != ours {
            return Ok::<_, String>((false, (store, sm)));
        }
        let vote = log2.group(g).map_err(|e| e.to_string())?.meta().vote;
        drop((store, sm));
        wipe(&log2, &volume2, &dir2, g, vote)?;
        Ok((true, open()?))
    })
    .await
    .map_err(|e| format!("releasing group {g}: {e}"))?
    .map_err(|e| format!("releasing group {g}: {e}"))?;
    if !released {
        tracing::info!(group = g, "the replica is kept: its instance starts again unchanged");
    }
    if *stop.borrow() {
        return Ok(()); // the node stops: its next start opens the group
    }
    let kv = sm.reader();
    let raft = launch.raft(g, store, sm).await?;
    launch.guard.replace(g, raft.metrics());
    let group = launch.group(g, raft.clone(), kv);
    super::metrics::spawn_raft_watch(
        raft,
        g,
        0,
        false,
        Arc::clone(&launch.ready[usize::try_from(g).unwrap_or(0)]),
        Arc::clone(&launch.health),
        Arc::clone(&group.retired),
    );
    groups.replace(group);
    if released {
        metrics::counter!(RELEASED).increment(1);
        tracing::info!(group = g, "replica released: its entries, snapshot and map are gone");
    }
    Ok(())
}

/// The membership stored last for a group (its log's last membership entry, or its state
/// machine's when the log holds none): whether node `me` votes in it, and its log index.
/// Reads the log backwards, [`SCAN_CHUNK`] entries at a time.
async fn stored_membership(
    store: &mut LogStore<TypeConfig>,
    sm: &mut KvStateMachine,
    me: u64,
) -> Result<(bool, Option<u64>), String> {
    fn err(e: impl std::fmt::Display) -> String {
        e.to_string()
    }
    let state = store.get_log_state().await.map_err(err)?;
    let first = state.last_purged_log_id.as_ref().map_or(0, |l| l.index + 1);
    if let Some(mut hi) = state.last_log_id.as_ref().map(|l| l.index) {
        let mut reader = store.get_log_reader().await;
        while hi >= first {
            let lo = hi.saturating_sub(SCAN_CHUNK - 1).max(first);
            let entries = reader.try_get_log_entries(lo..=hi).await.map_err(err)?;
            if let Some((m, at)) = entries.iter().rev().find_map(|e| match &e.payload {
                EntryPayload::Membership(m) => Some((m.clone(), e.log_id.index)),
                _ => None,
            }) {
                return Ok((m.voter_ids().any(|v| v == me), Some(at)));
            }
            if lo == first {
                break;
            }
            hi = lo - 1;
        }
    }
    let (_, stored) = sm.applied_state().await.map_err(err)?;
    let at = stored.log_id().as_ref().map(|l| l.index);
    Ok((stored.membership().voter_ids().any(|v| v == me), at))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use vellum_engine::FormatOptions;
    use vellum_engine::carrier::{CrashPlan, FaultRng, FaultyCarrier, MemoryCarrier};
    use vellum_raft_store::log::{LogConfig, LogEntry};
    use vellum_raft_store::v010::KvNode;
    use vellum_raft_store::v010::openraft::{Membership, StoredMembership};
    use vellum_raft_store::{MIN_VOLUME_BYTES, VolumeOptions, open_volume};

    use super::super::directory::View;
    use super::*;

    /// Metrics of a replica of node 1 whose membership has `voters` and `learners`.
    fn metrics(voters: &[u64], learners: &[u64], holds_state: bool) -> RaftMetrics<TypeConfig> {
        let mut m = RaftMetrics::<TypeConfig>::new_initial(1);
        let nodes: BTreeMap<u64, KvNode> =
            voters.iter().chain(learners).map(|id| (*id, KvNode::default())).collect();
        let set: BTreeSet<u64> = voters.iter().copied().collect();
        let membership = Membership::new(vec![set], nodes).unwrap();
        m.membership_config = Arc::new(StoredMembership::new(None, membership));
        m.last_log_index = holds_state.then_some(7);
        m
    }

    fn view(voters: &[u64], learners: &[u64], config_index: Option<u64>) -> View {
        View {
            group: 3,
            term: 2,
            leader: Some(2),
            leader_node: None,
            voters: voters.to_vec(),
            learners: learners.to_vec(),
            config_index,
        }
    }

    #[test]
    fn only_a_replica_no_membership_names_is_released() {
        let dir = Directory::default();
        let learner = metrics(&[2, 3, 5], &[1], true);
        // The directory knows no later membership: this replica's own names it a learner.
        assert!(!releasable(3, 1, &learner, &dir));
        dir.merge([view(&[2, 3, 5], &[], Some(9))]);
        assert!(releasable(3, 1, &learner, &dir));
        // Never group 0, never a voter (effective or committed), never a replica with no
        // state (released already, or never held).
        assert!(!releasable(0, 1, &learner, &dir));
        assert!(!releasable(3, 1, &metrics(&[1, 2, 3], &[], true), &dir));
        let mut committed_voter = learner.clone();
        committed_voter.committed_membership_config = metrics(&[1, 2], &[], true).membership_config;
        assert!(!releasable(3, 1, &committed_voter, &dir));
        assert!(!releasable(3, 1, &metrics(&[2, 3, 5], &[1], false), &dir));
        // The later membership names it (a learner being added back): kept.
        let back = Directory::default();
        back.merge([view(&[2, 3, 5], &[1], Some(12))]);
        assert!(!releasable(3, 1, &learner, &back));
        // It holds the change that dropped it itself, and the directory nothing later.
        assert!(releasable(3, 1, &metrics(&[2, 3, 5], &[], true), &Directory::default()));
    }

    fn volume() -> (tempfile::TempDir, vellum_engine::Volume, LogCore) {
        let dir = tempfile::tempdir().unwrap();
        let volume =
            open_volume(dir.path().join("n.vlm"), MIN_VOLUME_BYTES, VolumeOptions::default())
                .unwrap();
        let log = LogCore::open(volume.clone(), LogConfig::default()).unwrap();
        (dir, volume, log)
    }

    fn wait(f: impl FnOnce(vellum_raft_store::log::Callback)) {
        let (tx, rx) = std::sync::mpsc::channel();
        f(Box::new(move |r| drop(tx.send(r))));
        rx.recv().unwrap().unwrap();
    }

    /// Group 3 with entries 1..=3, a vote and a snapshot file.
    fn held_group(volume: &vellum_engine::Volume, log: &LogCore) -> LogCore {
        let core = log.create_group(3).unwrap();
        let entries = (1..=3)
            .map(|i| LogEntry { index: i, term: 1, payload: Arc::from(&b"entry"[..]) })
            .collect();
        wait(|done| core.append(entries, done).unwrap());
        wait(|done| core.save_vote(b"vote-of-term-4".to_vec(), done).unwrap());
        let snapshots =
            format!("{}/snapshot", vellum_raft_store::v010::group_machine_dir("/raft", 3));
        volume.create_dir_all(&snapshots).unwrap();
        volume.create_file(format!("{snapshots}/current")).unwrap();
        volume.commit().unwrap();
        core
    }

    fn assert_released(volume: &vellum_engine::Volume, log: &LogCore) {
        let core = log.group(3).unwrap();
        assert_eq!(core.bounds().1, None, "no entry left");
        assert_eq!(core.meta().vote.as_deref(), Some(&b"vote-of-term-4"[..]), "the vote stays");
        assert_eq!(core.meta().purged_index, None);
        let snapshot =
            format!("{}/snapshot/current", vellum_raft_store::v010::group_machine_dir("/raft", 3));
        assert!(!volume.exists(snapshot).unwrap(), "the snapshot is gone");
        assert!(!volume.exists(marker("/raft", 3)).unwrap(), "the marker is gone");
    }

    #[test]
    fn a_release_drops_entries_and_snapshot_and_keeps_the_vote() {
        let (_dir, volume, log) = volume();
        let core = held_group(&volume, &log);
        let vote = core.meta().vote;
        wipe(&log, &volume, "/raft", 3, vote).unwrap();
        assert_released(&volume, &log);
        assert!(log.group(0).is_ok(), "the other groups stay");
        // All of it durable: the log opened again finds the same.
        drop(core);
        log.close();
        drop(log);
        let log = LogCore::open(volume.clone(), LogConfig::default()).unwrap();
        assert_released(&volume, &log);
    }

    #[test]
    fn a_release_cut_after_the_log_dropped_the_group_is_finished_at_the_next_start() {
        let (_dir, volume, log) = volume();
        let core = held_group(&volume, &log);
        let vote = core.meta().vote.unwrap();
        // The cut: marker written, the group dropped, not created again yet.
        volume.create_dir_all("/raft/released").unwrap();
        let file = volume.create_file(marker("/raft", 3)).unwrap();
        file.set_attr(VOTE_ATTR, &vote).unwrap();
        drop(file);
        volume.commit().unwrap();
        log.drop_group(3).unwrap();
        drop(core);
        assert!(log.group(3).is_err());
        finish(&log, &volume, "/raft").unwrap();
        assert_released(&volume, &log);
        // Nothing left to finish: a second start changes nothing.
        finish(&log, &volume, "/raft").unwrap();
        assert_released(&volume, &log);
    }

    /// The log of the crash test: small segments, writes in the caller's thread (so that a
    /// carrier operation's number names the same step in every run).
    fn crash_config() -> LogConfig {
        LogConfig {
            segment_bytes: 64 << 10,
            background_spares: false,
            io: vellum_raft_store::log::LogIo::Inline,
            ..LogConfig::default()
        }
    }

    /// A volume on a carrier that can lose power, holding group 3 as `held_group` makes it.
    fn crash_volume(
        journal: bool,
    ) -> (Arc<FaultyCarrier>, vellum_engine::Volume, LogCore, Option<Vec<u8>>) {
        let carrier = Arc::new(FaultyCarrier::new(MIN_VOLUME_BYTES, true));
        let format = FormatOptions {
            journal,
            journal_bytes: if journal { 16 << 12 } else { 0 },
            ..FormatOptions::default()
        };
        let volume = vellum_engine::Volume::format(
            Box::new(Arc::clone(&carrier)),
            &format,
            VolumeOptions::default(),
        )
        .unwrap();
        let log = LogCore::open(volume.clone(), crash_config()).unwrap();
        let vote = held_group(&volume, &log).meta().vote;
        (carrier, volume, log, vote)
    }

    /// What a start finds on `image` once it has finished interrupted releases: group 3
    /// held as before ("held") or released ("released"), its vote kept either way.
    fn recovered(image: &[u8]) -> Result<&'static str, String> {
        let volume = vellum_engine::Volume::open(
            Box::new(MemoryCarrier::from_bytes(image)),
            VolumeOptions::default(),
        )
        .map_err(|e| format!("volume open refused: {e}"))?;
        let log = LogCore::open(volume.clone(), crash_config())
            .map_err(|e| format!("log open refused: {e}"))?;
        finish(&log, &volume, "/raft").map_err(|e| format!("finishing the release: {e}"))?;
        if volume.exists(marker("/raft", 3)).unwrap_or(true) {
            return Err("the marker is left after the release was finished".into());
        }
        let core = log.group(3).map_err(|e| format!("group 3 is gone: {e}"))?;
        if core.meta().vote.as_deref() != Some(&b"vote-of-term-4"[..]) {
            return Err(format!("the vote is lost: {:?}", core.meta().vote));
        }
        let snapshot =
            format!("{}/snapshot/current", vellum_raft_store::v010::group_machine_dir("/raft", 3));
        let snapshot = volume.exists(snapshot).map_err(|e| e.to_string())?;
        let got = match (core.bounds(), snapshot) {
            ((1, Some(3)), true) => "held",
            ((_, None), false) if core.meta().purged_index.is_none() => "released",
            (bounds, snapshot) => {
                return Err(format!("half released: bounds {bounds:?}, snapshot {snapshot}"));
            }
        };
        // A second start finds nothing to finish and the same state.
        finish(&log, &volume, "/raft").map_err(|e| format!("second finish: {e}"))?;
        if log.group(3).map(|c| c.bounds()).ok() != Some(core.bounds()) {
            return Err("a second start changed the group".into());
        }
        Ok(got)
    }

    /// Cuts power at carrier operation `at` of a release (`None`: after it ends), sometimes
    /// again during the next start's recovery; what the start after that finds.
    fn cut_release(
        journal: bool,
        at: Option<u64>,
        rng: &mut FaultRng,
    ) -> Result<&'static str, String> {
        let (carrier, volume, log, vote) = crash_volume(journal);
        if let Some(at) = at {
            carrier.set_crash_plan(CrashPlan::AtOp(carrier.ops() + at));
        }
        // A cut makes the wipe fail: what counts is what the next start finds.
        let _ = wipe(&log, &volume, "/raft", 3, vote);
        carrier.cut_power();
        drop(log);
        drop(volume);
        let mut image = carrier.crash_image(rng);
        if rng.chance(50) {
            // A cut during the recovery (the volume's, the log's or the finish of the release).
            let start = |c: &Arc<FaultyCarrier>| {
                let v =
                    vellum_engine::Volume::open(Box::new(Arc::clone(c)), VolumeOptions::default());
                if let Ok(v) = v
                    && let Ok(log) = LogCore::open(v.clone(), crash_config())
                {
                    let _ = finish(&log, &v, "/raft");
                }
            };
            let dry = Arc::new(FaultyCarrier::from_bytes(image.clone(), true));
            start(&dry);
            let second = Arc::new(FaultyCarrier::from_bytes(image, true));
            second.set_crash_plan(CrashPlan::AtOp(rng.below(dry.ops().max(1))));
            start(&second);
            second.cut_power();
            image = second.crash_image(rng);
        }
        recovered(&image)
    }

    /// Power cut at every carrier operation of a release (three images each, torn writes
    /// drawn anew, half of them cut again during the recovery), on volumes with and without
    /// a journal: the next start finds the replica held or released, never half, and the
    /// vote always. Returns the failures (the first few named) and the points run.
    fn release_campaign() -> (Vec<String>, usize) {
        let mut failures = Vec::new();
        let mut points = 0;
        let mut outcomes = BTreeSet::new();
        for journal in [false, true] {
            let (carrier, volume, log, vote) = crash_volume(journal);
            let start = carrier.ops();
            wipe(&log, &volume, "/raft", 3, vote).unwrap();
            let total = carrier.ops() - start;
            let cuts = (0..total).map(Some).chain([None]);
            for (i, at) in cuts.enumerate() {
                for k in 0..3u64 {
                    let mut rng = FaultRng::new(i as u64 * 7 + k + u64::from(journal) * 1000);
                    points += 1;
                    match cut_release(journal, at, &mut rng) {
                        Ok(o) => {
                            outcomes.insert(o);
                        }
                        Err(e) => failures.push(format!("journal {journal}, cut at {at:?}: {e}")),
                    }
                }
            }
        }
        if failures.is_empty() {
            assert_eq!(outcomes.len(), 2, "cuts both before and after the point of no return");
        }
        (failures, points)
    }

    #[test]
    fn every_cut_of_a_release_keeps_the_vote() {
        let (failures, points) = release_campaign();
        assert!(
            failures.is_empty(),
            "{} of {points} points: {:#?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
        // Each ordering rule broken on purpose: the campaign must catch it.
        for rule in [Rule::MarkerFirst, Rule::VoteBeforeMarkerGoes] {
            BROKEN.with(|b| b.set(Some(rule)));
            let (failures, points) = release_campaign();
            BROKEN.with(|b| b.set(None));
            eprintln!(
                "mutant {rule:?}: {} of {points} points fail, first: {:?}",
                failures.len(),
                failures.first()
            );
            assert!(!failures.is_empty(), "the mutant {rule:?} went unnoticed");
        }
    }
}
