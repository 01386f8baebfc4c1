//! Member identity: a node never votes or acknowledges as a member whose state it lost
//! (docs/OPERATIONS.md, "A member that lost its volume").
//!
//! Every store has an incarnation, written once when the store is first used for a node, and
//! a peer book of the incarnations it has spoken with (`vellum_raft_store::member`). On the
//! wire, every Raft RPC names its sender and its target, and every answer its responder:
//!
//! - request headers `x-vellum-from: ID:INCARNATION` and `x-vellum-to: ID:INCARNATION`
//!   (`ID:-` while the sender has not heard from the target yet);
//! - answer header `x-vellum-member: ID:INCARNATION`.
//!
//! A receiver refuses (409, `{"error": "stale_member", "member": ID, ...}`) a request whose
//! sender presents another incarnation than its book holds, and a request addressed to
//! another incarnation of itself: then *it* is the member that lost its state, and it stops.
//! A sender drops an answer from another incarnation than its book holds, and stops when an
//! answer names it as the stale member. A first contact is recorded durably before the
//! request is handled or the answer used, so a peer that ever counted this member's vote
//! or acknowledgement remembers which incarnation gave it.
//!
//! At start-up, a store with no raft state at all (a fresh volume) starts as its member only
//! once every member it can learn of (`--initial-cluster`, and the current members any of
//! them reports) has answered that it never knew this node id: a member it cannot reach
//! might be the one that counted this node's old votes, so the node waits for it. If one
//! knows the id, the node refuses to start as that member.
//!
//! Raft authority comes from membership, not from the CA ([`authority`]), and per Raft group
//! (`groups.rs`: on a node of several groups, a group's replicas may sit on some members
//! only): `append` and `snapshot` of group g are taken only from a voter or learner of this
//! node's effective or committed membership of g (the union: a joint change in progress
//! locks out no member), `vote` only from a voter of either. A node that does not vote in g
//! as it sees it (g's membership here is empty, names it as a learner or leaves it out: a
//! replica being added, moved away or coming back) takes g's `append` and `snapshot` from a
//! member of the cluster (group 0's membership, which every member belongs to), as a leader
//! it has not heard of yet must reach it. A node that does not vote in the cluster (a fresh
//! joiner with no membership, or a learner catching up through entries older than the
//! member that now leads) takes them from any sender: it counts in no quorum meanwhile. Ids
//! on the
//! operator's deny list (`--deny-peer`) and ids removed from the cluster (recorded durably in
//! the peer book once they leave both memberships) are refused always. The check runs before
//! the sender is admitted, so a refused sender never enters the peer book.
//!
//! A claim that *this* node lost its state (a request addressed to another incarnation of
//! it, or a 409 answer naming it) is acted on (the node stops, exit code 3) only when one
//! peer cannot forge it ([`Guard::stale_claim`]): the claimants, distinct admitted peers, are
//! a majority of the voters of every configuration of the effective membership, or this
//! node's store holds no raft state at all (term 0, no log entry, no snapshot: it took part
//! in nothing since its identity was written, so stopping it loses nothing). Otherwise the
//! claimant is refused from then on (403 `claimed_stale`, logged once per peer) and the node
//! goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

use axum::http::HeaderMap;
use tokio::sync::watch;
use vellum_raft_store::Error as StoreError;
pub use vellum_raft_store::member::Incarnation;
use vellum_raft_store::member::{Identity, PeerBook};
use vellum_raft_store::v010::TypeConfig;
use vellum_raft_store::v010::openraft::RaftMetrics;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::openraft::type_config::alias::WatchReceiverOf;

/// Raft's metrics, as `Raft::metrics` hands them out.
pub type MetricsRx = WatchReceiverOf<TypeConfig, RaftMetrics<TypeConfig>>;

/// Request header: the sender and its incarnation.
pub const FROM: &str = "x-vellum-from";
/// Request header: the target and the incarnation the sender knows it as.
pub const TO: &str = "x-vellum-to";
/// Answer header: the responder and its incarnation.
pub const MEMBER: &str = "x-vellum-member";

/// `ID:INCARNATION`, or `ID:-` with no incarnation.
pub fn format_member(id: u64, incarnation: Option<Incarnation>) -> String {
    match incarnation {
        Some(i) => format!("{id}:{i}"),
        None => format!("{id}:-"),
    }
}

/// Parses `ID:INCARNATION` or `ID:-`.
pub fn parse_member(value: &str) -> Option<(u64, Option<Incarnation>)> {
    let (id, inc) = value.split_once(':')?;
    let id = id.parse().ok()?;
    match inc {
        "-" => Some((id, None)),
        inc => Some((id, Some(inc.parse().ok()?))),
    }
}

/// Parses a member header of `headers`.
pub fn member_header(headers: &HeaderMap, name: &str) -> Option<(u64, Option<Incarnation>)> {
    parse_member(headers.get(name)?.to_str().ok()?)
}

/// Why a peer's message was not used.
#[derive(Debug)]
pub enum Refused {
    /// The peer presented another incarnation than the book holds: it lost its state.
    StalePeer { peer: u64, known: Incarnation, presented: Incarnation },
    /// Recording the first contact failed (the volume): the message is not used.
    Store(String),
}

/// The Raft RPCs, for [`authority`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcKind {
    Append,
    Vote,
    Snapshot,
}

/// Why a sender may not speak Raft to this node (403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unauthorized {
    /// On the operator's deny list (`--deny-peer`).
    Denied,
    /// Removed from the cluster: refused for good.
    Removed,
    /// In neither the effective nor the committed membership.
    NotMember,
    /// A learner asking for a vote.
    NotVoter,
    /// It claimed that this node lost its state, and was not believed: refused since.
    ClaimedStale,
}

impl Unauthorized {
    /// The `error` of the 403 answer.
    pub fn code(self) -> &'static str {
        match self {
            Unauthorized::Denied => "denied_peer",
            Unauthorized::Removed => "removed_member",
            Unauthorized::NotMember => "not_a_member",
            Unauthorized::NotVoter => "not_a_voter",
            Unauthorized::ClaimedStale => "claimed_stale",
        }
    }

    /// The `reason` of the 403 answer.
    pub fn reason(self) -> &'static str {
        match self {
            Unauthorized::Denied => "the sender is on this node's deny list (--deny-peer)",
            Unauthorized::Removed => {
                "the sender was removed from the cluster; removed ids never come back"
            }
            Unauthorized::NotMember => {
                "the sender is not a voter or learner of this node's membership"
            }
            Unauthorized::NotVoter => "only a voter may ask for a vote",
            Unauthorized::ClaimedStale => {
                "the sender claimed that this node lost its state, and no majority of voters agreed: this node refuses it"
            }
        }
    }
}

/// The membership a request is judged against: the union of this node's effective and
/// committed configurations.
#[derive(Debug, Default, Clone)]
pub struct Authority {
    pub voters: BTreeSet<u64>,
    pub learners: BTreeSet<u64>,
}

impl Authority {
    /// From Raft's metrics: the effective and the committed membership.
    pub fn of(m: &RaftMetrics<TypeConfig>) -> Authority {
        let mut a = Authority::default();
        for stored in [&m.membership_config, &m.committed_membership_config] {
            let membership = stored.membership();
            a.voters.extend(membership.voter_ids());
            a.learners.extend(membership.learner_ids());
        }
        a.learners.retain(|l| !a.voters.contains(l));
        a
    }

    /// Every member id.
    pub fn all(&self) -> BTreeSet<u64> {
        self.voters.union(&self.learners).copied().collect()
    }
}

/// Whether `from` may send `kind` of a group to node `me`, whose membership of that group
/// is `group` and of group 0 (the cluster's) is `cluster` (see the module header).
/// `denied`/`removed`: whether the id is on the deny list / removed for good.
pub fn authority(
    kind: RpcKind,
    from: u64,
    (denied, removed): (bool, bool),
    me: u64,
    group: &Authority,
    cluster: &Authority,
) -> Result<(), Unauthorized> {
    if denied {
        return Err(Unauthorized::Denied);
    }
    if removed {
        return Err(Unauthorized::Removed);
    }
    let member_of = |a: &Authority| a.voters.contains(&from) || a.learners.contains(&from);
    // A learner's view of a group may be one the group left behind (a replica moved away
    // keeps its learner seat until it is dropped, and may not hear that): only a voter's
    // view holds back senders it does not name.
    let replica_here = group.voters.contains(&me);
    match kind {
        RpcKind::Vote if group.voters.contains(&from) => Ok(()),
        RpcKind::Vote if group.learners.contains(&from) => Err(Unauthorized::NotVoter),
        RpcKind::Vote => Err(Unauthorized::NotMember),
        RpcKind::Append | RpcKind::Snapshot if member_of(group) => Ok(()),
        // A node that does not vote in the cluster yet (no membership at all, or a learner
        // catching up through memberships older than its leader): the leader that is adding
        // it may be one it has not heard of. It counts in no quorum meanwhile.
        RpcKind::Append | RpcKind::Snapshot if !cluster.voters.contains(&me) => Ok(()),
        // No replica of this group here (yet, or any more): a member of the cluster that
        // leads the group now may be one this node's view of the group does not name.
        RpcKind::Append | RpcKind::Snapshot if !replica_here && member_of(cluster) => Ok(()),
        RpcKind::Append | RpcKind::Snapshot => Err(Unauthorized::NotMember),
    }
}

/// Whether `claimants` (distinct peers, never this node) are a majority of the voters of
/// every configuration of `joint` (one for a uniform membership, two during a joint change).
pub fn majority_claims(claimants: &BTreeSet<u64>, joint: &[BTreeSet<u64>]) -> bool {
    !joint.is_empty()
        && joint.iter().all(|voters| {
            !voters.is_empty() && voters.intersection(claimants).count() * 2 > voters.len()
        })
}

/// Whether Raft holds no state at all: term 0, no log entry (nor a purged one), no snapshot,
/// nothing applied.
pub fn holds_no_raft_state(m: &RaftMetrics<TypeConfig>) -> bool {
    m.current_term == 0
        && m.last_log_index.is_none()
        && m.snapshot.is_none()
        && m.purged.is_none()
        && m.last_applied.is_none()
}

/// What a claim that this node lost its state came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Believed: the node stops.
    Stopping,
    /// Not believed: the claimant is refused from now on.
    Refused,
}

/// This node's identity, its peer book, and the way to stop the node when it learns that
/// it is the member that lost its state.
pub struct Guard {
    pub me: Identity,
    pub book: Arc<PeerBook>,
    /// `--deny-peer`.
    deny: BTreeSet<u64>,
    fatal: watch::Sender<Option<String>>,
    /// Each Raft group's metrics (by group id), once Raft runs: membership and state for the
    /// checks. Group 0's membership is the cluster's.
    metrics: OnceLock<Vec<std::sync::RwLock<MetricsRx>>>,
    /// The peers that claimed this node lost its state, with the incarnation they named.
    claims: Mutex<BTreeMap<u64, Incarnation>>,
}

impl Guard {
    pub fn new(
        me: Identity,
        book: Arc<PeerBook>,
        deny: BTreeSet<u64>,
    ) -> (Arc<Guard>, watch::Receiver<Option<String>>) {
        let (fatal, rx) = watch::channel(None);
        let guard =
            Guard { me, book, deny, fatal, metrics: OnceLock::new(), claims: Mutex::default() };
        (Arc::new(guard), rx)
    }

    /// Judges requests against the groups' memberships from now on (`groups[g]`: group g's
    /// metrics; at least group 0).
    pub fn attach(&self, groups: Vec<MetricsRx>) {
        assert!(!groups.is_empty(), "a node runs at least one Raft group");
        let _ = self.metrics.set(groups.into_iter().map(std::sync::RwLock::new).collect());
    }

    /// Judges group `group`'s requests against `rx` from now on: the metrics of the group's
    /// new Raft instance after its replica here was released (`release.rs`).
    pub fn replace(&self, group: u64, rx: MetricsRx) {
        let slot = self.metrics.get().and_then(|all| all.get(usize::try_from(group).ok()?));
        if let Some(slot) = slot {
            *slot.write().unwrap_or_else(std::sync::PoisonError::into_inner) = rx;
        }
    }

    /// Group `g`'s metrics receiver, once Raft runs.
    fn group_rx(&self, g: usize) -> Option<MetricsRx> {
        let slot = self.metrics.get()?.get(g)?;
        Some(slot.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }

    /// Group 0's metrics (the cluster's membership), once Raft runs.
    fn cluster(&self) -> Option<MetricsRx> {
        self.group_rx(0)
    }

    fn claims(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Incarnation>> {
        self.claims.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this node neither sends to nor hears from `peer`: on the deny list, or removed
    /// (its answers would count toward quorums as much as its requests).
    pub fn shuns(&self, peer: u64) -> bool {
        self.deny.contains(&peer) || self.book.is_removed(peer)
    }

    /// Whether `from` may send `kind` of group `group` now (see [`authority`]); before Raft
    /// runs nobody may. A group this node does not run is judged as group 0 (its RPC is
    /// refused as `unknown_group` after that).
    pub fn authorize(&self, kind: RpcKind, from: u64, group: u64) -> Result<(), Unauthorized> {
        let Some(rx) = self.cluster() else { return Err(Unauthorized::NotMember) };
        let cluster = Authority::of(&rx.borrow_watched());
        let of_group = usize::try_from(group)
            .ok()
            .filter(|g| *g > 0)
            .and_then(|g| self.group_rx(g))
            .map(|rx| Authority::of(&rx.borrow_watched()));
        let flags = (self.deny.contains(&from), self.book.is_removed(from));
        let me = self.me.node_id;
        authority(kind, from, flags, me, of_group.as_ref().unwrap_or(&cluster), &cluster)?;
        if self.claims().contains_key(&from) {
            return Err(Unauthorized::ClaimedStale);
        }
        Ok(())
    }

    /// Admitted peer `peer` says it knows this node as incarnation `known`: this node lost
    /// its state, if one peer alone cannot forge that (see the module header). Stops the
    /// node, or refuses `peer` from now on (logged once per peer).
    pub fn stale_claim(&self, peer: u64, known: Incarnation) -> Verdict {
        let (no_state, joint) = match self.cluster() {
            Some(rx) => {
                let m = rx.borrow_watched();
                (
                    holds_no_raft_state(&m),
                    m.membership_config.membership().get_joint_config().clone(),
                )
            }
            None => (false, Vec::new()),
        };
        let claimants: BTreeSet<u64> = {
            let mut claims = self.claims();
            if claims.insert(peer, known).is_none() {
                tracing::warn!(
                    peer,
                    %known,
                    mine = %self.me.incarnation,
                    "a peer claims this node lost its state (it knows another incarnation of \
                     it); not believed unless a majority of voters says so: refusing that \
                     peer's Raft RPCs from now on"
                );
            }
            claims.keys().copied().filter(|p| *p != self.me.node_id).collect()
        };
        if no_state || majority_claims(&claimants, &joint) {
            self.stale_self(peer, known);
            return Verdict::Stopping;
        }
        Verdict::Refused
    }

    /// The value of this node's `from` / `member` headers.
    pub fn me_header(&self) -> String {
        format_member(self.me.node_id, Some(self.me.incarnation))
    }

    /// The value of the `to` header for `target`.
    pub fn to_header(&self, target: u64) -> String {
        format_member(target, self.book.get(target))
    }

    /// Checks `peer`'s incarnation against the book, recording a first contact durably (off
    /// the async runtime's workers) before the caller acts on the message.
    pub async fn admit(&self, peer: u64, incarnation: Incarnation) -> Result<(), Refused> {
        if let Some(known) = self.book.get(peer) {
            if known == incarnation {
                return Ok(());
            }
            return Err(Refused::StalePeer { peer, known, presented: incarnation });
        }
        let book = Arc::clone(&self.book);
        match tokio::task::spawn_blocking(move || book.admit(peer, incarnation)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(StoreError::PeerConflict { peer, known, presented })) => {
                Err(Refused::StalePeer { peer, known, presented })
            }
            Ok(Err(e)) => Err(Refused::Store(e.to_string())),
            Err(e) => Err(Refused::Store(e.to_string())),
        }
    }

    /// This node learned that it is not the member its peers know: it must stop serving
    /// as that member. The first reason wins; `serve` exits with it.
    fn stale_self(&self, peer: u64, known: Incarnation) {
        let id = self.me.node_id;
        let why = stale_line(id, peer, known, Some(self.me.incarnation));
        self.fatal.send_if_modified(|slot| {
            if slot.is_some() {
                return false;
            }
            tracing::error!("{why}");
            *slot = Some(why);
            true
        });
    }
}

/// The one line a member that lost its state is stopped with: `peer` knows node `id` as
/// incarnation `known`, and this node has `mine` (`None`: a volume with no raft state yet).
pub fn stale_line(id: u64, peer: u64, known: Incarnation, mine: Option<Incarnation>) -> String {
    let this = match mine {
        Some(m) => format!("this volume is incarnation {m}"),
        None => "this volume holds no raft state".to_string(),
    };
    format!(
        "node {peer} knows node {id} as incarnation {known}, but {this}: node {id} lost its \
         raft state (a missing mount, a replaced disk, a deleted carrier?) and must not \
         rejoin as that member; remove it (vellum cluster remove {id}), then start this \
         machine as a new member on a new volume, with a new --id and --join"
    )
}

/// What a member knows about a node id (`GET /raft/member/{id}`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Knowledge {
    /// The incarnation it recorded for the asked node, if any.
    pub knows: Option<String>,
}

/// The current members of a member's configuration (`GET /raft/members`): id → Raft
/// address. Served on the Raft port, so that a node starting on a fresh volume learns of
/// members added since bootstrap without a client token (mutual TLS authenticates it).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Members {
    pub members: std::collections::BTreeMap<u64, String>,
}

/// The current members the member whose Raft port is at `base` reports, if it answers.
pub async fn members(client: &reqwest::Client, base: &str) -> Option<Vec<(u64, String)>> {
    let request = client.get(format!("{base}/raft/members")).timeout(ASK_TIMEOUT);
    let resp = request.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    Some(resp.json::<Members>().await.ok()?.members.into_iter().collect())
}

/// A member's answer to "do you know node `id`?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Knows(Incarnation),
    NeverKnew,
    /// No answer (down, not started, not ready yet).
    Silent,
}

/// How long a start-up question may take.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Asks the member whose Raft port is at `base` (a URL) what it knows about node `id`.
pub async fn ask(client: &reqwest::Client, base: &str, id: u64) -> Answer {
    let request = client.get(format!("{base}/raft/member/{id}")).timeout(ASK_TIMEOUT);
    let Ok(resp) = request.send().await else {
        return Answer::Silent;
    };
    if !resp.status().is_success() {
        return Answer::Silent;
    }
    match resp.json::<Knowledge>().await {
        Ok(Knowledge { knows: Some(inc) }) => inc.parse().map_or(Answer::Silent, Answer::Knows),
        Ok(Knowledge { knows: None }) => Answer::NeverKnew,
        Err(_) => Answer::Silent,
    }
}

/// Records durably, as removed for good, every id that was in this node's committed
/// membership and has left both the effective and the committed one (this node itself
/// aside), as long as Raft runs.
pub fn spawn_removal_watch(guard: Arc<Guard>, mut rx: MetricsRx) {
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        loop {
            let (committed, current) = {
                let m = rx.borrow_watched();
                let committed: BTreeSet<u64> =
                    m.committed_membership_config.membership().nodes().map(|(id, _)| *id).collect();
                (committed, Authority::of(&m).all())
            };
            seen.extend(committed);
            let gone: BTreeSet<u64> = seen
                .iter()
                .filter(|id| !current.contains(id) && **id != guard.me.node_id)
                .copied()
                .collect();
            if !gone.is_empty() {
                let book = Arc::clone(&guard.book);
                let ids = gone.clone();
                // Recorded, they leave `seen`; not (the volume failed), they are tried again
                // at the next change (meanwhile they are refused as non-members anyway).
                match tokio::task::spawn_blocking(move || book.record_removed(&ids)).await {
                    Ok(Ok(new)) => {
                        if !new.is_empty() {
                            tracing::info!(removed = ?new, "recorded removed members: their ids are refused for good");
                        }
                        seen.retain(|id| !gone.contains(id));
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, "could not record removed members"),
                    Err(e) => tracing::warn!(error = %e, "could not record removed members"),
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use vellum_raft_store::v010::KvNode;
    use vellum_raft_store::v010::openraft::async_runtime::WatchSender;
    use vellum_raft_store::v010::openraft::type_config::TypeConfigExt;
    use vellum_raft_store::v010::openraft::{Membership, StoredMembership};

    use super::*;

    /// A guard for node 1 whose Raft reports voters 1, 2, 3, with a term of 3 (some raft
    /// state) or none at all; and the metrics' sender, to keep them alive.
    fn guard(with_state: bool) -> (Arc<Guard>, watch::Receiver<Option<String>>, impl Sized) {
        let volume = crate::server::tests::memory_volume(4 << 20);
        let book = Arc::new(PeerBook::open(&volume, "/raft").unwrap());
        let me = Identity { node_id: 1, incarnation: Incarnation([1; 16]) };
        let (guard, fatal) = Guard::new(me, book, BTreeSet::from([7]));
        let mut m = RaftMetrics::<TypeConfig>::new_initial(1);
        let nodes: BTreeMap<u64, KvNode> = (1..=3).map(|id| (id, KvNode::default())).collect();
        let membership = Membership::new(vec![set(&[1, 2, 3])], nodes).unwrap();
        m.membership_config = Arc::new(StoredMembership::new(None, membership));
        if with_state {
            m.current_term = 3;
            m.last_log_index = Some(10);
        }
        let (tx, rx) = TypeConfig::watch_channel(m);
        guard.attach(vec![rx]);
        (guard, fatal, tx)
    }

    #[tokio::test]
    async fn one_peers_claim_refuses_that_peer_a_majority_stops_the_node() {
        let (guard, fatal, _tx) = guard(true);
        assert_eq!(guard.authorize(RpcKind::Append, 2, 0), Ok(()));
        assert_eq!(guard.authorize(RpcKind::Append, 7, 0), Err(Unauthorized::Denied));
        assert_eq!(guard.authorize(RpcKind::Vote, 9, 0), Err(Unauthorized::NotMember));
        let other = Incarnation([9; 16]);
        assert_eq!(guard.stale_claim(2, other), Verdict::Refused);
        assert!(fatal.borrow().is_none(), "one peer's word stopped the node");
        assert_eq!(guard.authorize(RpcKind::Append, 2, 0), Err(Unauthorized::ClaimedStale));
        assert_eq!(guard.authorize(RpcKind::Append, 3, 0), Ok(()));
        assert_eq!(guard.stale_claim(2, other), Verdict::Refused, "the same peer again");
        assert!(fatal.borrow().is_none());
        assert_eq!(guard.stale_claim(3, other), Verdict::Stopping);
        assert!(fatal.borrow().as_deref().is_some_and(|why| why.contains("lost its raft state")));
    }

    /// Raft metrics of a group whose voters are `voters`.
    fn group_metrics(voters: &[u64]) -> RaftMetrics<TypeConfig> {
        let mut m = RaftMetrics::<TypeConfig>::new_initial(1);
        let nodes: BTreeMap<u64, KvNode> =
            voters.iter().map(|id| (*id, KvNode::default())).collect();
        let membership = Membership::new(vec![set(voters)], nodes).unwrap();
        m.membership_config = Arc::new(StoredMembership::new(None, membership));
        m
    }

    #[tokio::test]
    async fn the_guard_judges_each_rpc_by_its_group() {
        let volume = crate::server::tests::memory_volume(4 << 20);
        let book = Arc::new(PeerBook::open(&volume, "/raft").unwrap());
        let me = Identity { node_id: 1, incarnation: Incarnation([1; 16]) };
        let (guard, _fatal) = Guard::new(me, book, BTreeSet::new());
        // Group 0 (the cluster): 1..=4; group 1's replicas on 1, 2, 4; group 2's on 2, 3, 4
        // (none here).
        let (tx0, rx0) = TypeConfig::watch_channel(group_metrics(&[1, 2, 3, 4]));
        let (tx1, rx1) = TypeConfig::watch_channel(group_metrics(&[1, 2, 4]));
        let (tx2, rx2) = TypeConfig::watch_channel(group_metrics(&[2, 3, 4]));
        guard.attach(vec![rx0, rx1, rx2]);
        assert_eq!(guard.authorize(RpcKind::Vote, 3, 0), Ok(()));
        assert_eq!(guard.authorize(RpcKind::Vote, 3, 1), Err(Unauthorized::NotMember));
        assert_eq!(guard.authorize(RpcKind::Append, 3, 1), Err(Unauthorized::NotMember));
        assert_eq!(guard.authorize(RpcKind::Vote, 4, 1), Ok(()));
        // No replica of group 2 here: a member of the cluster may append (it may lead the
        // group as this node's stale view does not say); a vote only from the group's voters
        // as this node sees them; never a sender outside the cluster.
        assert_eq!(guard.authorize(RpcKind::Append, 3, 2), Ok(()));
        assert_eq!(guard.authorize(RpcKind::Vote, 3, 2), Ok(()));
        tx2.send(group_metrics(&[2, 4])).unwrap();
        assert_eq!(guard.authorize(RpcKind::Vote, 3, 2), Err(Unauthorized::NotMember));
        assert_eq!(guard.authorize(RpcKind::Append, 3, 2), Ok(()));
        assert_eq!(guard.authorize(RpcKind::Append, 9, 2), Err(Unauthorized::NotMember));
        // A group this node does not run is judged as group 0 (the handler refuses it).
        assert_eq!(guard.authorize(RpcKind::Vote, 3, 7), Ok(()));
        assert_eq!(guard.authorize(RpcKind::Vote, 9, 7), Err(Unauthorized::NotMember));
        drop((tx0, tx1, tx2));
    }

    #[tokio::test]
    async fn a_node_with_no_raft_state_believes_one_claim() {
        let (guard, fatal, _tx) = guard(false);
        assert_eq!(guard.stale_claim(2, Incarnation([9; 16])), Verdict::Stopping);
        assert!(fatal.borrow().is_some());
    }

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    const OK: (bool, bool) = (false, false);

    #[test]
    fn raft_authority_comes_from_membership() {
        let members = Authority { voters: set(&[1, 2, 3]), learners: set(&[4]) };
        let judge = |kind, from, flags| authority(kind, from, flags, 1, &members, &members);
        for kind in [RpcKind::Append, RpcKind::Snapshot, RpcKind::Vote] {
            assert_eq!(judge(kind, 2, OK), Ok(()));
            assert_eq!(judge(kind, 9, OK), Err(Unauthorized::NotMember));
            assert_eq!(judge(kind, 2, (true, false)), Err(Unauthorized::Denied));
            assert_eq!(judge(kind, 2, (false, true)), Err(Unauthorized::Removed));
        }
        assert_eq!(judge(RpcKind::Append, 4, OK), Ok(()));
        assert_eq!(judge(RpcKind::Vote, 4, OK), Err(Unauthorized::NotVoter));
        // A node with no membership yet takes appends and snapshots from anyone, no vote.
        let none = Authority::default();
        let fresh = |kind, from, flags| authority(kind, from, flags, 1, &none, &none);
        assert_eq!(fresh(RpcKind::Append, 9, OK), Ok(()));
        assert_eq!(fresh(RpcKind::Snapshot, 9, OK), Ok(()));
        assert_eq!(fresh(RpcKind::Vote, 9, OK), Err(Unauthorized::NotMember));
        assert_eq!(fresh(RpcKind::Append, 9, (true, false)), Err(Unauthorized::Denied));
    }

    #[test]
    fn raft_authority_is_per_group() {
        // Node 1 of a cluster of 1..=5; group g's replicas are on 1, 4 and 5 only.
        let cluster = Authority { voters: set(&[1, 2, 3, 4, 5]), learners: set(&[]) };
        let g = Authority { voters: set(&[1, 4, 5]), learners: set(&[]) };
        let judge = |kind, from| authority(kind, from, OK, 1, &g, &cluster);
        assert_eq!(judge(RpcKind::Vote, 4), Ok(()));
        assert_eq!(judge(RpcKind::Append, 5), Ok(()));
        // A member of the cluster that holds no replica of g speaks no Raft of g here.
        assert_eq!(judge(RpcKind::Vote, 2), Err(Unauthorized::NotMember));
        assert_eq!(judge(RpcKind::Append, 2), Err(Unauthorized::NotMember));
        assert_eq!(judge(RpcKind::Snapshot, 3), Err(Unauthorized::NotMember));
        // Node 2 holds no replica of g (being added, or moved away): g's leader may be one
        // its view does not name, so a member of the cluster may append; no vote, and never
        // a sender outside the cluster.
        let on_2 = |kind, from| authority(kind, from, OK, 2, &g, &cluster);
        assert_eq!(on_2(RpcKind::Append, 3), Ok(()));
        assert_eq!(on_2(RpcKind::Snapshot, 3), Ok(()));
        assert_eq!(on_2(RpcKind::Vote, 3), Err(Unauthorized::NotMember));
        assert_eq!(on_2(RpcKind::Append, 9), Err(Unauthorized::NotMember));
        let empty = Authority::default();
        let unheard = |kind, from| authority(kind, from, OK, 2, &empty, &cluster);
        assert_eq!(unheard(RpcKind::Append, 4), Ok(()));
        assert_eq!(unheard(RpcKind::Append, 9), Err(Unauthorized::NotMember));
        assert_eq!(unheard(RpcKind::Vote, 4), Err(Unauthorized::NotMember));
        // A learner of the cluster (node 6, joining) takes appends from a leader its view of
        // the membership may not name yet; it never takes a vote from outside.
        let joining = Authority { voters: set(&[1, 2, 3]), learners: set(&[6]) };
        let on_6 = |kind, from| authority(kind, from, OK, 6, &joining, &joining);
        assert_eq!(on_6(RpcKind::Append, 5), Ok(()));
        assert_eq!(on_6(RpcKind::Vote, 5), Err(Unauthorized::NotMember));
    }

    #[test]
    fn one_peer_is_no_majority_of_voters() {
        let three = vec![set(&[1, 2, 3])];
        assert!(!majority_claims(&set(&[2]), &three));
        assert!(majority_claims(&set(&[2, 3]), &three));
        assert!(!majority_claims(&set(&[9, 8]), &three), "non-voters do not count");
        // A joint change: a majority of each configuration.
        let joint = vec![set(&[1, 2, 3]), set(&[1, 4, 5])];
        assert!(!majority_claims(&set(&[2, 3]), &joint));
        assert!(majority_claims(&set(&[2, 3, 4, 5]), &joint));
        assert!(!majority_claims(&set(&[2, 3]), &[]), "no membership: no majority");
    }

    #[test]
    fn member_headers_round_trip() {
        let inc = Incarnation([0xAB; 16]);
        assert_eq!(parse_member(&format_member(3, Some(inc))), Some((3, Some(inc))));
        assert_eq!(parse_member(&format_member(3, None)), Some((3, None)));
        assert_eq!(parse_member("x:-"), None);
        assert_eq!(parse_member("3:zz"), None);
        assert_eq!(parse_member("3"), None);
    }
}
