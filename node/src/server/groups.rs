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
//! - Every group has the same members: a membership change runs on every group through its
//!   leader (`http::cluster::every_group`), group 0 last for a removal; the member checks
//!   (`member.rs`) read group 0's membership.
//! - Every Raft RPC names its group and the sender's G (`x-vellum-group: g/G`); a member with
//!   another G is refused (400 `groups_mismatch`): it would hash keys elsewhere.
//! - Leaders spread ([`assignment`]): the voters in id order, group g prefers voter g mod N;
//!   the groups of a voter its leaders do not hear from go to the live voter leading fewest,
//!   so each live voter leads G/N groups, within one. A leader hands a group it should not
//!   lead to the one that should (openraft's leader transfer), at most once per
//!   [`TRANSFER_PAUSE`] per group, so views that differ for a moment cannot make leadership
//!   flap.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vellum_raft_store::log::LogCore;
use vellum_raft_store::v010::openraft::Instant as _;
use vellum_raft_store::v010::openraft::ServerState;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::{KvBatcher, KvReader, KvStateMachine, LogStore, TypeConfig};

use super::KvRaft;

/// The header of a Raft RPC that names its group and the sender's group count: `g/G`.
pub const GROUP_HEADER: &str = "x-vellum-group";

/// A group's gauges: which groups this node leads, and how far each group's applied state
/// is behind its log here. Bounded by `--groups` (at most 256 series).
pub const GROUPS_LED: &str = "vellum_raft_groups_led";
pub const GROUP_APPLY_LAG: &str = "vellum_raft_group_apply_lag_entries";
/// Bytes a group's live entries take in the node's log.
pub const GROUP_LOG_BYTES: &str = "vellum_raft_group_log_bytes";

/// How often a node looks at the groups its log wants compacted, and the least time between
/// two snapshots it asks of one group for that.
const COMPACT_EVERY: Duration = Duration::from_secs(5);
const COMPACT_PAUSE: Duration = Duration::from_secs(60);

/// The least time between two leader transfers of one group by this node.
pub const TRANSFER_PAUSE: Duration = Duration::from_secs(3);
/// How often a node looks at the spread of the groups it leads.
const BALANCE_EVERY: Duration = Duration::from_secs(1);

/// One Raft group of this node.
#[derive(Clone)]
pub struct Group {
    pub id: u64,
    pub raft: KvRaft,
    /// Reads of this group's applied map.
    pub kv: KvReader,
    /// Client writes of this group's keys go through it.
    pub proposer: KvBatcher,
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
) -> Result<(), String> {
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
        return Err(format!(
            "the volume {} holds a cluster of {had} Raft group{} and --groups is {groups}: \
             the group count is fixed when the cluster is created; restart with --groups {had}",
            location.display(),
            if had == 1 { "" } else { "s" },
        ));
    }
    for g in have.difference(&want) {
        log.drop_group(*g).map_err(|e| format!("dropping group {g}: {e}"))?;
    }
    for g in want.difference(&have) {
        log.create_group(*g).map_err(|e| format!("creating group {g}: {e}"))?;
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

/// Which voter should lead each of `groups` groups: group g prefers `voters[g % N]` (voters
/// in id order); a group whose preferred voter is not `alive` goes to the live voter with the
/// fewest groups so far (the lowest id on a tie). Every live voter gets `groups / live` or
/// one more.
pub fn assignment(groups: u64, voters: &[u64], alive: &BTreeSet<u64>) -> Vec<u64> {
    let mut voters = voters.to_vec();
    voters.sort_unstable();
    voters.dedup();
    let live: Vec<u64> = voters.iter().copied().filter(|v| alive.contains(v)).collect();
    if live.is_empty() {
        return Vec::new();
    }
    let mut target: Vec<Option<u64>> = (0..groups)
        .map(|g| {
            let preferred = voters[usize::try_from(g).unwrap_or(0) % voters.len()];
            alive.contains(&preferred).then_some(preferred)
        })
        .collect();
    let mut load: BTreeMap<u64, u64> = live.iter().map(|v| (*v, 0)).collect();
    for t in target.iter().flatten() {
        *load.entry(*t).or_default() += 1;
    }
    for t in &mut target {
        if t.is_none() {
            let (least, _) = load
                .iter()
                .min_by_key(|(id, n)| (**n, **id))
                .map_or((live[0], 0), |(a, b)| (*a, *b));
            *load.entry(least).or_default() += 1;
            *t = Some(least);
        }
    }
    target.into_iter().map(|t| t.unwrap_or(live[0])).collect()
}

/// The voters a leader heard from within `window` (itself included), from its metrics.
fn heard_from(
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
    groups: Arc<[Group]>,
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
            for g in groups.iter() {
                if let Ok(handle) = log.group(g.id) {
                    let bytes = handle.live_bytes() as f64;
                    metrics::gauge!(GROUP_LOG_BYTES, "group" => g.id.to_string()).set(bytes);
                }
            }
            for id in log.compact_wanted() {
                let Some(group) = groups.iter().find(|g| g.id == id) else { continue };
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
    groups: Arc<[Group]>,
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
            balance_once(&groups, me, election_timeout * 2, &mut last).await;
        }
    });
}

/// One look at the groups this node leads; transfers those that another voter should lead.
async fn balance_once(
    groups: &[Group],
    me: u64,
    window: Duration,
    last: &mut BTreeMap<u64, Instant>,
) {
    let metrics: Vec<_> =
        groups.iter().map(|g| g.raft.metrics().borrow_watched().clone()).collect();
    let led: Vec<usize> =
        (0..groups.len()).filter(|i| metrics[*i].state == ServerState::Leader).collect();
    metrics::gauge!(GROUPS_LED).set(led.len() as f64);
    for (g, m) in groups.iter().zip(&metrics) {
        let lag =
            m.last_log_index.unwrap_or(0).saturating_sub(m.last_applied.map_or(0, |l| l.index));
        metrics::gauge!(GROUP_APPLY_LAG, "group" => g.id.to_string()).set(lag as f64);
    }
    let Some(&first) = led.first() else { return };
    // The groups share their members; the live ones are those any group led here hears.
    let membership = metrics[first].membership_config.membership().clone();
    let voters: Vec<u64> = membership.voter_ids().collect();
    let mut alive = BTreeSet::new();
    for i in &led {
        alive.extend(heard_from(&metrics[*i], me, window));
    }
    let target = assignment(groups.len() as u64, &voters, &alive);
    for i in led {
        let Some(&to) = target.get(i) else { continue };
        let group = &groups[i];
        if to == me || last.get(&group.id).is_some_and(|t| t.elapsed() < TRANSFER_PAUSE) {
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

    #[test]
    fn leaders_spread_within_one_over_the_live_voters() {
        let all = BTreeSet::from([1, 2, 3]);
        for groups in [1u64, 2, 3, 16, 17, 256] {
            let t = assignment(groups, &[3, 1, 2], &all);
            let c = counts(&t);
            let (lo, hi) = (c.values().min().copied(), c.values().max().copied());
            assert!(hi.unwrap() - lo.unwrap_or(0) <= 1, "{groups}: {c:?}");
            // With every voter live, group g goes to the g-th voter in id order.
            assert!(t.iter().enumerate().all(|(g, v)| *v == [1, 2, 3][g % 3]));
        }
        // Voter 3 gone: its groups spread over 1 and 2, within one.
        let t = assignment(16, &[1, 2, 3], &BTreeSet::from([1, 2]));
        let c = counts(&t);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[&1] + c[&2], 16);
        assert!(c[&1].abs_diff(c[&2]) <= 1, "{c:?}");
        // The groups of the live voters stay where they are (no needless transfer).
        assert!(
            t.iter().enumerate().filter(|(g, _)| g % 3 != 2).all(|(g, v)| *v == [1, 2, 3][g % 3])
        );
        assert!(assignment(4, &[1, 2], &BTreeSet::new()).is_empty());
    }

    #[test]
    fn group_headers_round_trip() {
        assert_eq!(parse_header(&header_value(7, 16)), Some((7, 16)));
        assert_eq!(parse_header("7"), None);
        assert_eq!(parse_header("a/16"), None);
    }
}
