//! The Raft groups of a sharded node (`vellum serve --groups G`): the key space hashed over
//! G openraft 0.10 instances, all on the node's one log (`LogCore` groups: one durable write
//! carries the appends of every group queued meanwhile), each with its own state machine and
//! snapshots in the same volume (`v010::open_group`).
//!
//! Invariants:
//! - A key's group is [`group_of`]: FNV-1a (64 bits) of its bytes modulo G, the same on every
//!   member, every start and every version. It decides which state machine holds a key:
//!   changing the function or G would hide keys, so G is fixed when the cluster is created.
//! - The volume records G as its log's group set, exactly `0..G` ([`shape`]): a volume whose
//!   groups hold raft state refuses another G in one line; one without raft state (a first
//!   start, or one a power cut interrupted while its groups were being created) is reshaped.
//! - Group 0 holds every member of the cluster: its membership is the cluster's (who may
//!   speak Raft at all, who is removed for good: `member.rs`). A membership change without
//!   a group runs on every group through its leader (`http::cluster::every_group`), group 0
//!   last for a removal. Any other group's replicas may sit on some members only: `vellum
//!   cluster move` swaps one replica ([`replica_plan`] spreads them over the members), and
//!   each group's Raft authority is its own membership. A member that holds no replica of a
//!   group routes its keys through the directory (`directory.rs`).
//! - Every Raft RPC names its group and the sender's G (`x-vellum-group: g/G`); a member with
//!   another G is refused (400 `groups_mismatch`): it would hash keys elsewhere.
//! - Leaders spread ([`assignment`]): in group order, each group prefers its voter that
//!   leads fewest groups so far (the lowest id on a tie: with the same voters everywhere,
//!   group g prefers voter g mod N), and a group moves to another of its voters while that
//!   one leads two fewer; the groups of a voter its leaders do not hear from go
//!   to the group's live voter leading fewest. With the same voters in every group each live
//!   voter leads G/N groups, within one. A leader hands a group it should not
//!   lead to the one that should (openraft's leader transfer), at most once per
//!   [`TRANSFER_PAUSE`] per group, so views that differ for a moment cannot make leadership
//!   flap, and never a group whose replicas it is moving ([`Moving`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vellum_raft_store::log::LogCore;
use vellum_raft_store::v010::openraft::Instant as _;
use vellum_raft_store::v010::openraft::ServerState;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::{KvBatcher, KvReader, KvStateMachine, LogStore, TypeConfig};

use super::KvRaft;
use super::directory::Directory;
use crate::error::CliError;

/// The header of a Raft RPC that names its group and the sender's group count: `g/G`.
pub const GROUP_HEADER: &str = "x-vellum-group";

/// A group's gauges: which groups this node leads, and how far each group's applied state
/// is behind its log here. Bounded by `--groups` (at most 256 series).
pub const GROUPS_LED: &str = "vellum_raft_groups_led";
pub const GROUP_APPLY_LAG: &str = "vellum_raft_group_apply_lag_entries";
/// Bytes a group's live entries take in the node's log.
pub const GROUP_LOG_BYTES: &str = "vellum_raft_group_log_bytes";
/// The groups this node holds a voting replica of.
pub const GROUPS_VOTING: &str = "vellum_raft_groups_voting";
/// Replica moves (`vellum cluster move`, `spread`) this node completed as a group's leader.
pub const REPLICA_MOVES: &str = "vellum_raft_replica_moves_total";

/// How often a node looks at the groups its log wants compacted, and the least time between
/// two snapshots it asks of one group for that.
const COMPACT_EVERY: Duration = Duration::from_secs(5);
const COMPACT_PAUSE: Duration = Duration::from_secs(60);

/// The least time between two leader transfers of one group by this node.
pub const TRANSFER_PAUSE: Duration = Duration::from_secs(3);
/// How often a node looks at the spread of the groups it leads.
const BALANCE_EVERY: Duration = Duration::from_secs(1);

/// The groups whose replicas this node is moving as their leader (`POST /v1/cluster/move`):
/// the balancer leaves their leadership alone meanwhile, or a transfer in the middle of a
/// membership change would leave it to another leader (seen in a loaded test run: the move
/// failed, half done).
#[derive(Debug, Default)]
pub struct Moving(std::sync::Mutex<BTreeSet<u64>>);

/// A move in progress: the group leaves [`Moving`] when it is dropped.
pub struct MoveGuard {
    moving: Arc<Moving>,
    group: u64,
}

impl Moving {
    fn set(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `group` as moving until the guard is dropped; `None` if a move of it runs
    /// already.
    pub fn start(self: &Arc<Self>, group: u64) -> Option<MoveGuard> {
        self.set().insert(group).then(|| MoveGuard { moving: Arc::clone(self), group })
    }

    pub fn contains(&self, group: u64) -> bool {
        self.set().contains(&group)
    }
}

impl Drop for MoveGuard {
    fn drop(&mut self) {
        self.moving.set().remove(&self.group);
    }
}

/// One Raft group of this node.
#[derive(Clone)]
pub struct Group {
    pub id: u64,
    pub raft: KvRaft,
    /// Reads of this group's applied map.
    pub kv: KvReader,
    /// Client writes of this group's keys go through it.
    pub proposer: KvBatcher,
    /// Raised before this instance is stopped for a release (`release.rs`): its stop is no
    /// fault of the node.
    pub retired: Arc<std::sync::atomic::AtomicBool>,
}

/// The node's groups by id (`0..G`): each slot holds the group's running Raft instance, and
/// a slot's instance is replaced when its replica is released (`release.rs`). Readers take a
/// clone (a few `Arc`s) and hold no lock across an await.
pub struct Table(Box<[std::sync::RwLock<Group>]>);

impl Table {
    pub fn new(groups: Vec<Group>) -> Table {
        assert!(!groups.is_empty(), "a node runs at least one Raft group");
        assert!(groups.iter().enumerate().all(|(i, g)| g.id == i as u64), "groups by id");
        Table(groups.into_iter().map(std::sync::RwLock::new).collect())
    }

    /// G, the node's group count.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Group `g`, if the node runs it.
    pub fn get(&self, g: usize) -> Option<Group> {
        self.0
            .get(g)
            .map(|slot| slot.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }

    /// Group `g` of `0..G` (a key's group, [`group_of`], always is).
    pub fn at(&self, g: usize) -> Group {
        self.get(g).unwrap_or_else(|| panic!("group {g} of {}", self.len()))
    }

    /// Every group, in id order.
    pub fn all(&self) -> Vec<Group> {
        (0..self.len()).map(|g| self.at(g)).collect()
    }

    /// Every group's Raft, in id order.
    pub fn rafts(&self) -> Vec<KvRaft> {
        self.all().into_iter().map(|g| g.raft).collect()
    }

    /// Puts `group` in its slot, returning the instance it replaces.
    pub fn replace(&self, group: Group) -> Group {
        let slot = &self.0[usize::try_from(group.id).expect("a group id of 0..G")];
        std::mem::replace(
            &mut *slot.write().unwrap_or_else(std::sync::PoisonError::into_inner),
            group,
        )
    }
}

/// The group of `key` among `groups` (FNV-1a of its bytes, modulo `groups`): stable across
/// members, starts and versions.
pub fn group_of(key: &[u8], groups: usize) -> usize {
    assert!(groups > 0, "a node runs at least one group");
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    usize::try_from(hash % groups as u64).unwrap_or(0)
}

/// The `x-vellum-group` value of group `group` of `groups`.
pub fn header_value(group: u64, groups: u64) -> String {
    format!("{group}/{groups}")
}

/// Parses an `x-vellum-group` value (`g/G`).
pub fn parse_header(value: &str) -> Option<(u64, u64)> {
    let (g, n) = value.split_once('/')?;
    Some((g.parse().ok()?, n.parse().ok()?))
}

/// Whether group `core` of a log holds raft state (a vote, entries, a purge point, a
/// committed id or a snapshot).
fn has_state(core: &LogCore, machine_dir: &str, volume: &vellum_engine::Volume) -> bool {
    let meta = core.meta();
    meta.vote.is_some()
        || meta.purged_index.is_some()
        || meta.committed.is_some()
        || core.bounds().1.is_some()
        || volume.exists(format!("{machine_dir}/snapshot/current")).unwrap_or(true)
}

/// Makes the log's group set exactly `0..groups`: refused (one line) when it is another set
/// and one of its groups holds raft state; otherwise the missing groups are created and
/// the others dropped. Blocking.
pub fn shape(
    log: &LogCore,
    volume: &vellum_engine::Volume,
    dir: &str,
    groups: u64,
    location: &std::path::Path,
) -> Result<(), CliError> {
    let have: BTreeSet<u64> = log.groups().into_iter().collect();
    let want: BTreeSet<u64> = (0..groups).collect();
    if have == want {
        return Ok(());
    }
    let stateful = have.iter().any(|&g| {
        log.group(g).is_ok_and(|core| {
            has_state(&core, &vellum_raft_store::v010::group_machine_dir(dir, g), volume)
        })
    });
    if stateful {
        let had = have.len();
        // Not a start-up failure that a restart may get past: the same flag on the same
        // volume is refused again, so exit code 3 (the systemd unit does not restart it).
        return Err(CliError::NotThisMember(format!(
            "the volume {} holds a cluster of {had} Raft group{} and --groups is {groups}: \
             the group count is fixed when the cluster is created; restart with --groups {had}",
            location.display(),
            if had == 1 { "" } else { "s" },
        )));
    }
    let failed =
        |what: String| move |e: vellum_raft_store::Error| CliError::Usage(format!("{what}: {e}"));
    for g in have.difference(&want) {
        log.drop_group(*g).map_err(failed(format!("dropping group {g}")))?;
    }
    for g in want.difference(&have) {
        log.create_group(*g).map_err(failed(format!("creating group {g}")))?;
    }
    Ok(())
}

/// Opens groups `1..groups` of `log` (group 0 is opened as a single-group node's store).
pub fn open_rest(
    volume: &vellum_engine::Volume,
    log: &LogCore,
    dir: &str,
    groups: u64,
) -> Result<Vec<(LogStore<TypeConfig>, KvStateMachine)>, String> {
    (1..groups)
        .map(|g| {
            vellum_raft_store::v010::open_group(volume, log, dir, g)
                .map_err(|e| format!("opening group {g}: {e}"))
        })
        .collect()
}

/// Raises `ready` while every group's flag is up (each group's watch keeps its own,
/// `metrics::spawn_raft_watch`). Ends with `stop`.
pub fn spawn_ready(
    flags: Vec<Arc<std::sync::atomic::AtomicBool>>,
    ready: Arc<std::sync::atomic::AtomicBool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use std::sync::atomic::Ordering;
    tokio::spawn(async move {
        loop {
            let all = flags.iter().all(|f| f.load(Ordering::Acquire));
            ready.store(all, Ordering::Release);
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = stop.changed() => return,
            }
        }
    });
}

/// Which voter should lead each group, from each group's voters (`sets[g]`) and the voters
/// known to be `silent` (see the module header): `None` for a group with no voter that is not
/// silent. Deterministic: members that see the same sets agree.
pub fn assignment(sets: &[Vec<u64>], silent: &BTreeSet<u64>) -> Vec<Option<u64>> {
    let sets: Vec<Vec<u64>> = sets
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.sort_unstable();
            s.dedup();
            s
        })
        .collect();
    let least = |load: &BTreeMap<u64, u64>, set: &[u64], ok: &dyn Fn(u64) -> bool| {
        set.iter()
            .copied()
            .filter(|v| ok(*v))
            .min_by_key(|v| (load.get(v).copied().unwrap_or(0), *v))
    };
    // As if every voter were live: greedy, then a group moves from a voter to another of its
    // voters leading two fewer while one does (each move lowers the sum of squared loads, so
    // this ends).
    let mut load: BTreeMap<u64, u64> = BTreeMap::new();
    let mut ideal = Vec::with_capacity(sets.len());
    for set in &sets {
        let pick = least(&load, set, &|_| true);
        if let Some(v) = pick {
            *load.entry(v).or_default() += 1;
        }
        ideal.push(pick);
    }
    'improve: loop {
        for (t, set) in ideal.iter_mut().zip(&sets) {
            let Some(v) = *t else { continue };
            let Some(u) = least(&load, set, &|_| true) else { continue };
            if load.get(&u).copied().unwrap_or(0) + 1 < load.get(&v).copied().unwrap_or(0) {
                *load.entry(v).or_default() -= 1;
                *load.entry(u).or_default() += 1;
                *t = Some(u);
                continue 'improve;
            }
        }
        break;
    }
    // The groups of silent voters go to their live voters leading fewest; the others stay.
    let mut target: Vec<Option<u64>> =
        ideal.iter().map(|t| t.filter(|v| !silent.contains(v))).collect();
    let mut load: BTreeMap<u64, u64> = BTreeMap::new();
    for t in target.iter().flatten() {
        *load.entry(*t).or_default() += 1;
    }
    for (t, set) in target.iter_mut().zip(&sets) {
        if t.is_none() {
            *t = least(&load, set, &|v| !silent.contains(&v));
            if let Some(v) = *t {
                *load.entry(v).or_default() += 1;
            }
        }
    }
    target
}

/// One step of a replica plan: group `group`'s replica on `from` moves to `to`; without
/// `from`, a replica is added on `to`; without `to`, the one on `from` is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub group: u64,
    pub from: Option<u64>,
    pub to: Option<u64>,
}

/// The steps (in order) that give every group `1..` (`sets[g]`: group g's voters; group 0
/// holds every member and never moves) `replicas` replicas (at most one per member of
/// `members`) and spread them until each member holds as many as any other, within one:
/// groups short of replicas get one on the member holding fewest (the lowest id on a tie),
/// groups over lose the one on the member holding most (the highest id); then each move
/// takes a replica from the member holding most to the one holding fewest, of the lowest
/// group the first holds and the second does not.
pub fn replica_plan(sets: &[Vec<u64>], members: &[u64], replicas: usize) -> Vec<Step> {
    let replicas = replicas.clamp(1, members.len().max(1));
    let mut sets: Vec<BTreeSet<u64>> = sets.iter().map(|s| s.iter().copied().collect()).collect();
    let mut held: BTreeMap<u64, usize> = members.iter().map(|m| (*m, 0)).collect();
    for set in sets.iter().skip(1) {
        for v in set {
            if let Some(n) = held.get_mut(v) {
                *n += 1;
            }
        }
    }
    let mut plan = Vec::new();
    for (g, set) in sets.iter_mut().enumerate().skip(1) {
        while set.len() < replicas {
            let Some(to) = held
                .iter()
                .filter(|(m, _)| !set.contains(m))
                .min_by_key(|(id, n)| (**n, **id))
                .map(|(m, _)| *m)
            else {
                break;
            };
            set.insert(to);
            *held.entry(to).or_default() += 1;
            plan.push(Step { group: g as u64, from: None, to: Some(to) });
        }
        while set.len() > replicas {
            let Some(from) =
                set.iter().copied().max_by_key(|m| (held.get(m).copied().unwrap_or(0), *m))
            else {
                break;
            };
            set.remove(&from);
            if let Some(n) = held.get_mut(&from) {
                *n -= 1;
            }
            plan.push(Step { group: g as u64, from: Some(from), to: None });
        }
    }
    // Each move narrows the spread, so this ends; the bound is a second guard.
    for _ in 0..sets.len() * members.len().max(1) {
        let Some((&from, &most)) = held.iter().max_by_key(|(id, n)| (**n, **id)) else { break };
        let Some((&to, &fewest)) = held.iter().min_by_key(|(id, n)| (**n, **id)) else { break };
        if most <= fewest + 1 {
            break;
        }
        let Some(g) = (1..sets.len()).find(|g| sets[*g].contains(&from) && !sets[*g].contains(&to))
        else {
            break;
        };
        sets[g].remove(&from);
        sets[g].insert(to);
        *held.entry(from).or_default() -= 1;
        *held.entry(to).or_default() += 1;
        plan.push(Step { group: g as u64, from: Some(from), to: Some(to) });
    }
    plan
}

/// The voters a leader heard from within `window` (itself included), from its metrics.
pub(crate) fn heard_from(
    m: &vellum_raft_store::v010::openraft::RaftMetrics<TypeConfig>,
    me: u64,
    window: Duration,
) -> BTreeSet<u64> {
    let mut alive = BTreeSet::from([me]);
    if let Some(beats) = &m.heartbeat {
        for (id, at) in beats {
            if at.as_ref().is_some_and(|t| (**t).elapsed() <= window) {
                alive.insert(*id);
            }
        }
    }
    alive
}

/// Answers the log's space bound (docs/RAFT-LOG.md, "Rewrites and the space bound"): every
/// [`COMPACT_EVERY`], asks each group the log names in `compact_wanted` (too many live bytes
/// pinning old segments to rewrite) for a snapshot, after which openraft purges its log; and
/// sets each group's [`GROUP_LOG_BYTES`]. Ends with `stop`.
pub fn spawn_compactor(
    groups: Arc<Table>,
    log: LogCore,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut asked: BTreeMap<u64, Instant> = BTreeMap::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(COMPACT_EVERY) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            for g in groups.all() {
                if let Ok(handle) = log.group(g.id) {
                    let bytes = handle.live_bytes() as f64;
                    metrics::gauge!(GROUP_LOG_BYTES, "group" => g.id.to_string()).set(bytes);
                }
            }
            for id in log.compact_wanted() {
                let Some(group) = usize::try_from(id).ok().and_then(|g| groups.get(g)) else {
                    continue;
                };
                if asked.get(&id).is_some_and(|t| t.elapsed() < COMPACT_PAUSE) {
                    continue;
                }
                asked.insert(id, Instant::now());
                tracing::info!(group = id, "the log wants this group compacted: snapshot");
                if let Err(e) = group.raft.trigger().snapshot().await {
                    tracing::warn!(group = id, error = %e, "snapshot for the log's space bound");
                }
            }
        }
    });
}

/// Keeps the leaders of this node's groups spread over the voters: every [`BALANCE_EVERY`],
/// and at once when `kick` is notified (`vellum cluster rebalance`). Ends with `stop`.
pub fn spawn_balancer(
    groups: Arc<Table>,
    directory: Arc<Directory>,
    moving: Arc<Moving>,
    me: u64,
    election_timeout: Duration,
    kick: Arc<tokio::sync::Notify>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if groups.len() < 2 {
        return;
    }
    tokio::spawn(async move {
        let mut last: BTreeMap<u64, Instant> = BTreeMap::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(BALANCE_EVERY) => {}
                () = kick.notified() => { last.clear(); }
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            balance_once(&groups.all(), &directory, &moving, me, election_timeout * 2, &mut last)
                .await;
        }
    });
}

/// One look at the groups this node leads; transfers those that another voter should lead.
async fn balance_once(
    groups: &[Group],
    directory: &Directory,
    moving: &Moving,
    me: u64,
    window: Duration,
    last: &mut BTreeMap<u64, Instant>,
) {
    let metrics: Vec<_> =
        groups.iter().map(|g| g.raft.metrics().borrow_watched().clone()).collect();
    let led: Vec<usize> =
        (0..groups.len()).filter(|i| metrics[*i].state == ServerState::Leader).collect();
    metrics::gauge!(GROUPS_LED).set(led.len() as f64);
    let voting = metrics.iter().filter(|m| super::directory::votes_in(m, me)).count();
    metrics::gauge!(GROUPS_VOTING).set(voting as f64);
    for (g, m) in groups.iter().zip(&metrics) {
        let lag =
            m.last_log_index.unwrap_or(0).saturating_sub(m.last_applied.map_or(0, |l| l.index));
        metrics::gauge!(GROUP_APPLY_LAG, "group" => g.id.to_string()).set(lag as f64);
    }
    if led.is_empty() {
        return;
    }
    // Each group's voters: from its Raft here where this node votes in it, from the
    // directory otherwise. Silent: a voter of a group led here that no group led here heard.
    let sets: Vec<Vec<u64>> =
        groups.iter().zip(&metrics).map(|(g, m)| directory.resolve(g.id, me, m).voters).collect();
    let mut heard = BTreeSet::new();
    for i in &led {
        heard.extend(heard_from(&metrics[*i], me, window));
    }
    let silent: BTreeSet<u64> =
        led.iter().flat_map(|i| sets[*i].iter().copied()).filter(|v| !heard.contains(v)).collect();
    let target = assignment(&sets, &silent);
    for i in led {
        let Some(Some(to)) = target.get(i).copied() else { continue };
        let group = &groups[i];
        let paused = last.get(&group.id).is_some_and(|t| t.elapsed() < TRANSFER_PAUSE);
        if to == me || paused || moving.contains(group.id) {
            continue;
        }
        last.insert(group.id, Instant::now());
        tracing::info!(
            group = group.id,
            to,
            "handing the group's leadership over to spread leaders"
        );
        if let Err(e) = group.raft.trigger().transfer_leader(to).await {
            tracing::warn!(group = group.id, error = %e, "leader transfer");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(target: &[u64]) -> BTreeMap<u64, usize> {
        let mut c = BTreeMap::new();
        for t in target {
            *c.entry(*t).or_default() += 1;
        }
        c
    }

    #[test]
    fn keys_hash_stably_and_over_every_group() {
        // Fixed values: the mapping of keys to groups must never change.
        assert_eq!(group_of(b"", 16), (0xcbf2_9ce4_8422_2325u64 % 16) as usize);
        assert_eq!(group_of(b"k1", 16), group_of(b"k1", 16));
        assert_eq!(group_of(b"anything", 1), 0);
        let mut seen = [0usize; 16];
        for k in 0..3000 {
            seen[group_of(format!("k{k}").as_bytes(), 16)] += 1;
        }
        assert!(seen.iter().all(|n| (100..300).contains(n)), "{seen:?}");
    }

    /// `assignment` with the same `voters` in each of `groups` groups, the voters not in
    /// `alive` silent.
    fn uniform(groups: usize, voters: &[u64], alive: &BTreeSet<u64>) -> Vec<u64> {
        let silent = voters.iter().copied().filter(|v| !alive.contains(v)).collect();
        assignment(&vec![voters.to_vec(); groups], &silent).into_iter().flatten().collect()
    }

    #[test]
    fn leaders_spread_within_one_over_the_live_voters() {
        let all = BTreeSet::from([1, 2, 3]);
        for groups in [1usize, 2, 3, 16, 17, 256] {
            let t = uniform(groups, &[3, 1, 2], &all);
            let c = counts(&t);
            let (lo, hi) = (c.values().min().copied(), c.values().max().copied());
            assert!(hi.unwrap() - lo.unwrap_or(0) <= 1, "{groups}: {c:?}");
            // With every voter live, group g goes to the g-th voter in id order.
            assert!(t.iter().enumerate().all(|(g, v)| *v == [1, 2, 3][g % 3]));
        }
        // Voter 3 gone: its groups spread over 1 and 2, within one.
        let t = uniform(16, &[1, 2, 3], &BTreeSet::from([1, 2]));
        let c = counts(&t);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[&1] + c[&2], 16);
        assert!(c[&1].abs_diff(c[&2]) <= 1, "{c:?}");
        // The groups of the live voters stay where they are (no needless transfer).
        assert!(
            t.iter().enumerate().filter(|(g, _)| g % 3 != 2).all(|(g, v)| *v == [1, 2, 3][g % 3])
        );
        assert!(uniform(4, &[1, 2], &BTreeSet::new()).is_empty());
    }

    /// `sets` after `plan`, each step checked against the sets it applies to.
    fn apply(mut sets: Vec<Vec<u64>>, plan: &[Step]) -> Vec<Vec<u64>> {
        for step in plan {
            let set = &mut sets[step.group as usize];
            assert!(step.group > 0, "group 0 never moves");
            if let Some(from) = step.from {
                assert!(set.contains(&from), "{step:?} on {set:?}");
                set.retain(|v| *v != from);
            }
            if let Some(to) = step.to {
                assert!(!set.contains(&to), "{step:?} on {set:?}");
                set.push(to);
            }
        }
        sets
    }

    fn held(sets: &[Vec<u64>], members: &[u64]) -> Vec<usize> {
        members.iter().map(|m| sets[1..].iter().filter(|s| s.contains(m)).count()).collect()
    }

    #[test]
    fn replicas_spread_over_new_members_and_leaders_follow() {
        for (groups, members) in [(16usize, 4u64), (16, 5), (16, 6), (8, 4), (64, 5)] {
            let mut sets = vec![vec![1, 2, 3]; groups];
            let all: Vec<u64> = (1..=members).collect();
            sets[0] = all.clone();
            let plan = replica_plan(&sets, &all, 3);
            assert!(plan.iter().all(|s| s.from.is_some() && s.to.is_some()), "moves only");
            let sets = apply(sets, &plan);
            let held = held(&sets, &all);
            let (lo, hi) = (held.iter().min().unwrap(), held.iter().max().unwrap());
            assert!(hi - lo <= 1, "{groups} groups on {members}: {held:?}");
            assert!(sets.iter().skip(1).all(|s| s.len() == 3), "three replicas each");
            assert!(replica_plan(&sets, &all, 3).is_empty(), "a spread plan is stable");
            // Leaders follow: each member leads about as many groups as any other.
            let t: Vec<u64> =
                assignment(&sets, &BTreeSet::new()).into_iter().map(Option::unwrap).collect();
            let c = counts(&t);
            let (lo, hi) = (c.values().min().unwrap(), c.values().max().unwrap());
            assert_eq!(c.len(), members as usize, "every member leads some: {c:?}");
            assert!(hi - lo <= 1, "{groups} groups on {members}: leaders {c:?}");
        }
        // Nothing to spread: the same members everywhere.
        assert!(replica_plan(&vec![vec![1, 2, 3]; 16], &[1, 2, 3], 3).is_empty());
    }

    #[test]
    fn a_removed_member_s_replicas_are_added_back_and_extra_ones_dropped() {
        // Node 4 of 1..=4 was removed: its groups have two replicas left.
        let mut sets = vec![vec![1, 2, 3, 4]; 16];
        for (g, set) in sets.iter_mut().enumerate().skip(1) {
            *set = [1u64, 2, 3, 4].iter().copied().filter(|m| *m != (g % 4) as u64 + 1).collect();
        }
        let members = [1u64, 2, 3];
        sets[0] = members.to_vec();
        for set in sets.iter_mut().skip(1) {
            set.retain(|m| *m != 4);
        }
        let plan = replica_plan(&sets, &members, 3);
        assert!(plan.iter().all(|s| s.from.is_none()), "additions only: {plan:?}");
        let sets = apply(sets, &plan);
        assert!(sets.iter().skip(1).all(|s| s.len() == 3));
        // Every group on every member (`cluster add` of a 4th): one replica each dropped.
        let all = vec![1u64, 2, 3, 4];
        let plan = replica_plan(&vec![all.clone(); 16], &all, 3);
        let sets = apply(vec![all.clone(); 16], &plan);
        assert!(sets.iter().skip(1).all(|s| s.len() == 3));
        let held = held(&sets, &all);
        assert!(held.iter().max().unwrap() - held.iter().min().unwrap() <= 1, "{held:?}");
    }

    #[test]
    fn group_headers_round_trip() {
        assert_eq!(parse_header(&header_value(7, 16)), Some((7, 16)));
        assert_eq!(parse_header("7"), None);
        assert_eq!(parse_header("a/16"), None);
    }
}
