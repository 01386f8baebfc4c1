//! Where each Raft group's leader is, for a member that holds no replica of some groups
//! (`groups.rs`: after `vellum cluster move`, a group's replicas sit on some members only).
//!
//! A member knows the groups it votes in from its own Raft; of the others it has only the
//! view it had when it last held a replica, or none. Every member answers `GET /raft/groups`
//! on its Raft port (mutual TLS authenticates the asker, as for `/raft/members`) with the
//! groups it votes in: term, leader (id and addresses), voters and learners ([`view`]). A
//! member that does not vote in every group asks every other member of the cluster (group
//! 0's members: every member belongs to group 0) every [`POLL_EVERY`], and keeps per group the
//! leader of the highest term (one naming a leader before one that names none) and the
//! members of the latest membership (by its log index: a membership change keeps the term).
//!
//! Invariants:
//! - The directory only routes: where a client's request is forwarded, which voters the
//!   status and the balancer name for a group this member holds no replica of. It never
//!   decides a Raft question (authority, votes and commits come from each group's own Raft).
//!   A stale entry sends a request to a node that no longer leads the group; that node
//!   answers 503 (a request is forwarded once only) and the client retries.
//! - For every group a member votes in, its own Raft wins over the directory.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use vellum_raft_store::v010::openraft::RaftMetrics;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;
use vellum_raft_store::v010::{KvNode, TypeConfig};

use super::transport::PeerClients;

/// How often a member that does not vote in every group asks the others.
pub const POLL_EVERY: Duration = Duration::from_secs(1);
/// The least time between two rounds, however often [`Directory::refresh`] asks: a status
/// request with `?fresh` cannot make a member ask the others more often than this.
const ROUND_GAP: Duration = Duration::from_millis(100);
/// How long one member's answer may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// One group as one of its voters sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    pub group: u64,
    pub term: u64,
    pub leader: Option<u64>,
    /// The leader's addresses, from the voter's membership of the group.
    pub leader_node: Option<KvNode>,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// The log index of the membership the voters and learners come from (a membership
    /// change does not change the term).
    #[serde(default)]
    pub config_index: Option<u64>,
}

/// The answer of `GET /raft/groups`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Views {
    pub groups: Vec<View>,
}

/// Whether node `me` votes in the effective membership that `m` reports.
pub fn votes_in(m: &RaftMetrics<TypeConfig>, me: u64) -> bool {
    m.membership_config.membership().voter_ids().any(|v| v == me)
}

/// Group `group` as `m` (this node's Raft of it) sees it, if node `me` votes in it.
pub fn view(group: u64, me: u64, m: &RaftMetrics<TypeConfig>) -> Option<View> {
    if !votes_in(m, me) {
        return None;
    }
    Some(local(group, m))
}

/// Group `group` as `m` sees it, voter or not.
pub fn local(group: u64, m: &RaftMetrics<TypeConfig>) -> View {
    let membership = m.membership_config.membership();
    View {
        group,
        term: m.current_term,
        leader: m.current_leader,
        leader_node: m.current_leader.and_then(|l| membership.get_node(&l).cloned()),
        voters: membership.voter_ids().collect(),
        learners: membership.learner_ids().collect(),
        config_index: m.membership_config.log_id().as_ref().map(|l| l.index),
    }
}

/// `old` updated with what `new` knows better: the leader of a higher term (or of the same
/// term where `old` names none), the members of a later membership.
fn fresher(old: &View, new: &View) -> View {
    let mut v = old.clone();
    if (new.term, new.leader.is_some()) > (old.term, old.leader.is_some()) {
        v.term = new.term;
        v.leader = new.leader;
        v.leader_node.clone_from(&new.leader_node);
    }
    if new.config_index > old.config_index {
        v.voters.clone_from(&new.voters);
        v.learners.clone_from(&new.learners);
        v.config_index = new.config_index;
    }
    v
}

/// The groups this member learned of from the others (see the module header).
#[derive(Debug)]
pub struct Directory {
    entries: RwLock<BTreeMap<u64, View>>,
    /// Asks the poll for a round now ([`Directory::refresh`]).
    kick: tokio::sync::Notify,
    /// Rounds of the poll done so far.
    rounds: tokio::sync::watch::Sender<u64>,
}

impl Default for Directory {
    fn default() -> Directory {
        Directory {
            entries: RwLock::default(),
            kick: tokio::sync::Notify::new(),
            rounds: tokio::sync::watch::channel(0).0,
        }
    }
}

/// How long [`Directory::refresh`] waits for a round.
const REFRESH_WAIT: Duration = Duration::from_secs(3);

impl Directory {
    /// Asks the other members now and waits (at most [`REFRESH_WAIT`]) until they answered:
    /// for an answer that must not lag a change just made (`vellum cluster spread` plans
    /// from the status).
    pub async fn refresh(&self) {
        let mut rx = self.rounds.subscribe();
        let seen = *rx.borrow_and_update();
        self.kick.notify_one();
        let _ = tokio::time::timeout(REFRESH_WAIT, rx.wait_for(|n| *n > seen)).await;
    }

    /// The freshest view of `group` heard from its voters, if any.
    pub fn get(&self, group: u64) -> Option<View> {
        self.entries.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(&group).cloned()
    }

    /// Keeps what each of `views` knows better than the entry held for its group.
    pub fn merge(&self, views: impl IntoIterator<Item = View>) {
        let mut entries = self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for v in views {
            let merged = match entries.get(&v.group) {
                Some(old) => fresher(old, &v),
                None => v,
            };
            entries.insert(merged.group, merged);
        }
    }

    /// Group `group` as this member should see it: its own Raft's view when it votes in the
    /// group (or knows nothing better), the directory's otherwise.
    pub fn resolve(&self, group: u64, me: u64, m: &RaftMetrics<TypeConfig>) -> View {
        if group == 0 || votes_in(m, me) {
            return local(group, m);
        }
        self.get(group).unwrap_or_else(|| local(group, m))
    }
}

/// Asks the other members of the cluster for the groups they vote in, every [`POLL_EVERY`],
/// while this member does not vote in every group of `groups`. Ends with `stop`.
pub fn spawn_poll(
    directory: Arc<Directory>,
    groups: Arc<super::groups::Table>,
    me: u64,
    peers: PeerClients,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if groups.len() < 2 {
        return;
    }
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(ROUND_GAP).await;
            tokio::select! {
                () = tokio::time::sleep(POLL_EVERY.saturating_sub(ROUND_GAP)) => {}
                () = directory.kick.notified() => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            let rafts = groups.rafts();
            if rafts.iter().all(|r| votes_in(&r.metrics().borrow_watched(), me)) {
                directory.rounds.send_modify(|n| *n += 1);
                continue;
            }
            let members: Vec<(u64, KvNode)> = {
                let m = rafts[0].metrics().borrow_watched().clone();
                m.membership_config
                    .membership()
                    .nodes()
                    .filter(|(id, _)| **id != me)
                    .map(|(id, n)| (*id, n.clone()))
                    .collect()
            };
            let mut asks = tokio::task::JoinSet::new();
            for (id, node) in members {
                let peers = peers.clone();
                asks.spawn(async move { ask(&peers, id, &node.raft_addr).await });
            }
            while let Some(answer) = asks.join_next().await {
                if let Ok(Some(views)) = answer {
                    directory.merge(views.groups);
                }
            }
            directory.rounds.send_modify(|n| *n += 1);
        }
    });
}

/// The groups member `id` (Raft port at `raft_addr`) votes in, if it answers.
async fn ask(peers: &PeerClients, id: u64, raft_addr: &str) -> Option<Views> {
    let (client, base) = peers.client(id, raft_addr).ok()?;
    let resp = client.get(format!("{base}/raft/groups")).timeout(ASK_TIMEOUT).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json::<Views>().await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(group: u64, term: u64, leader: Option<u64>) -> View {
        let voters = vec![1, 2, 3];
        View {
            group,
            term,
            leader,
            leader_node: None,
            voters,
            learners: vec![],
            config_index: None,
        }
    }

    #[test]
    fn the_freshest_view_of_each_group_wins() {
        let d = Directory::default();
        d.merge([v(1, 3, Some(2)), v(2, 5, None)]);
        assert_eq!(d.get(1).unwrap().leader, Some(2));
        // An older term never replaces a newer one, whatever order the answers come in.
        d.merge([v(1, 2, Some(1))]);
        assert_eq!(d.get(1).unwrap().leader, Some(2));
        // The same term with a leader replaces one without; a newer term replaces any.
        d.merge([v(2, 5, Some(3))]);
        assert_eq!(d.get(2).unwrap().leader, Some(3));
        d.merge([v(1, 4, None)]);
        assert_eq!(d.get(1).unwrap(), v(1, 4, None));
        assert!(d.get(7).is_none());
        // A membership change keeps the term: the later membership's members win, whatever
        // the term of the answer that carries it.
        let moved = View { voters: vec![2, 3, 4], config_index: Some(9), ..v(1, 4, None) };
        d.merge([moved.clone(), v(1, 4, Some(2))]);
        assert_eq!(d.get(1).unwrap().voters, vec![2, 3, 4]);
        assert_eq!(d.get(1).unwrap().leader, Some(2));
        d.merge([View { config_index: Some(5), ..v(1, 5, Some(3)) }]);
        assert_eq!(d.get(1).unwrap().voters, vec![2, 3, 4], "an older membership never wins");
        assert_eq!(d.get(1).unwrap().leader, Some(3));
    }
}
