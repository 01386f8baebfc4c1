//! Checks of a decoded Raft RPC before openraft sees it: refused with 400 what no
//! protocol-following leader or candidate of this cluster sends.
//!
//! openraft 0.10 (`=0.10.0-alpha.37`, an alpha) trusts its RPCs: `install_full_snapshot`
//! panics (in release builds too) on a snapshot whose last log id is beyond its sender's
//! vote, or that is newer than the locally committed log id at an index not past it; a
//! snapshot whose data does not decode is a storage error; an append whose entries are not
//! consecutive, or larger than one log entry of this volume, reaches the log store, whose
//! refusal is a storage error too; its `debug_assert`s (on in debug builds) expect appends
//! with a committed vote, entries that follow `prev_log_id`, and log ids in order; and a
//! membership decoded from the wire is never validated, while the core, once it leads,
//! unwraps the node of every voter (a voter without a node entry panics it) and counts a
//! quorum of an empty config as reached. Each of these stops the Raft core for good, while
//! the process stays up. What a member sends is checked here first.
//!
//! Invariants: every check is a pure function of the request (and, for the snapshot's
//! committed-index rule, of this node's metrics at the time of the check); a refusal
//! leaves every state untouched; nothing here panics, whatever the input. A check that
//! depends on this node's state is as good as that state's snapshot in the metrics: the
//! committed log id only grows, so a snapshot refused stays refused, and one that passed
//! may still meet a committed id that grew meanwhile (then openraft's own check decides;
//! the Raft core watch, `metrics.rs`, stops the node if the core stops).

use vellum_raft_store::v010::openraft::EntryPayload;
use vellum_raft_store::v010::openraft::entry::RaftEntry;
use vellum_raft_store::v010::openraft::raft::{AppendEntriesRequest, VoteRequest};
use vellum_raft_store::v010::openraft::type_config::alias::{SnapshotMetaOf, VoteOf};
use vellum_raft_store::v010::openraft::vote::{RaftLeaderId, RaftVote};
use vellum_raft_store::v010::{Entry, KvNode, KvStateMachine, LogId, TypeConfig};

/// A membership config of this cluster.
type KvMembership = vellum_raft_store::v010::openraft::Membership<u64, KvNode>;

/// Why an RPC is refused: one line for the sender's log and ours.
pub type Refusal = String;

/// The leader id a vote names, in the form log ids carry it.
type CommittedLeader = <<VoteOf<TypeConfig> as RaftVote>::LeaderId as RaftLeaderId>::Committed;

fn leader_of(vote: &VoteOf<TypeConfig>) -> CommittedLeader {
    vote.leader_id().to_committed()
}

/// `log_id` (named `what`) is not beyond the leadership of `vote`: no leader holds a log id
/// of a later leader.
fn within_vote(
    what: &str,
    log_id: Option<&LogId>,
    vote: &VoteOf<TypeConfig>,
) -> Result<(), Refusal> {
    match log_id {
        Some(l) if l.leader_id > leader_of(vote) => {
            Err(format!("{what} {l} is beyond the sender's vote {vote}"))
        }
        _ => Ok(()),
    }
}

/// A leader's RPC carries its committed vote.
fn committed(vote: &VoteOf<TypeConfig>) -> Result<(), Refusal> {
    if vote.is_committed() {
        Ok(())
    } else {
        Err(format!("the vote {vote} is not a leader's (not committed)"))
    }
}

/// A snapshot from the leader: its vote, its meta, its data; `local_committed` is this
/// node's committed log id (from its metrics).
pub fn snapshot(
    vote: &VoteOf<TypeConfig>,
    meta: &SnapshotMetaOf<TypeConfig>,
    data: &[u8],
    local_committed: Option<&LogId>,
) -> Result<(), Refusal> {
    committed(vote)?;
    let last = meta.last_log_id.as_ref();
    within_vote("the snapshot's last log id", last, vote)?;
    let membership = meta.last_membership.log_id().as_ref();
    if membership > last {
        return Err(format!(
            "the snapshot's membership log id {} is after its last log id {}",
            display(membership),
            display(last)
        ));
    }
    if let (Some(last), Some(c)) = (last, local_committed)
        && last > c
        && last.index <= c.index
    {
        return Err(format!(
            "the snapshot's last log id {last} is newer than this node's committed log id {c} \
             but not at a later index: it contradicts the committed log"
        ));
    }
    if membership.is_some() || !meta.last_membership.membership().get_joint_config().is_empty() {
        well_formed_membership("the snapshot's membership", meta.last_membership.membership())?;
    }
    KvStateMachine::check_snapshot(data)
        .map_err(|e| format!("the snapshot's data does not decode as the state machine's: {e}"))
}

/// An append from the leader; `max_entry_bytes`: the largest entry this node's log holds.
pub fn append(
    req: &AppendEntriesRequest<TypeConfig>,
    max_entry_bytes: usize,
) -> Result<(), Refusal> {
    committed(&req.vote)?;
    within_vote("prev_log_id", req.prev_log_id.as_ref(), &req.vote)?;
    within_vote("leader_commit", req.leader_commit.as_ref(), &req.vote)?;
    let mut prev = req.prev_log_id;
    for entry in &req.entries {
        let id = entry.log_id();
        let expected = prev.as_ref().map_or(0, |p| p.index + 1);
        if id.index != expected {
            return Err(format!(
                "entry {id} does not follow {} (expected index {expected})",
                display(prev.as_ref())
            ));
        }
        if let Some(p) = &prev
            && id.leader_id < p.leader_id
        {
            return Err(format!("entry {id} has an earlier leader than the entry before it, {p}"));
        }
        within_vote("entry", Some(&id), &req.vote)?;
        if let EntryPayload::Membership(m) = &entry.payload {
            well_formed_membership(&format!("the membership of entry {id}"), m)?;
        }
        let bytes = encoded_len(entry);
        if bytes > max_entry_bytes {
            return Err(format!(
                "entry {id} takes {bytes} bytes; one log entry of this node holds {max_entry_bytes}"
            ));
        }
        prev = Some(id);
    }
    Ok(())
}

/// A candidate's vote request: its last log id is not beyond its own vote.
pub fn vote(req: &VoteRequest<TypeConfig>) -> Result<(), Refusal> {
    within_vote("the candidate's last log id", req.last_log_id.as_ref(), &req.vote)
}

/// A membership openraft can use (its own `ensure_valid`, which decoding skips): at least
/// one config, none empty, and a node for every voter.
fn well_formed_membership(what: &str, m: &KvMembership) -> Result<(), Refusal> {
    let configs = m.get_joint_config();
    if configs.is_empty() || configs.iter().any(std::collections::BTreeSet::is_empty) {
        return Err(format!("{what} has an empty voter set"));
    }
    if let Some(voter) = m.voter_ids().find(|v| m.get_node(v).is_none()) {
        return Err(format!("{what} names voter {voter} without its node"));
    }
    Ok(())
}

/// The bytes `entry` takes in the log (its encoding), counted without allocating them.
fn encoded_len(entry: &Entry) -> usize {
    struct Count(usize);
    impl bincode::enc::write::Writer for Count {
        fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
            self.0 += bytes.len();
            Ok(())
        }
    }
    let mut count = Count(0);
    match bincode::serde::encode_into_writer(entry, &mut count, bincode::config::standard()) {
        Ok(()) => count.0,
        // Not encodable: the log store could not store it either.
        Err(_) => usize::MAX,
    }
}

fn display(l: Option<&LogId>) -> String {
    l.map_or_else(|| "none".into(), ToString::to_string)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use vellum_raft_store::v010::openraft::impls::leader_id_adv::LeaderId;
    use vellum_raft_store::v010::openraft::type_config::alias::StoredMembershipOf;
    use vellum_raft_store::v010::openraft::{Membership, StoredMembership, Vote};
    use vellum_raft_store::v010::{KvNode, KvOp, KvRequest};

    use super::*;

    fn log_id(term: u64, node: u64, index: u64) -> LogId {
        LogId::new(LeaderId { term, node_id: node }, index)
    }

    fn leader_vote(term: u64, node: u64) -> VoteOf<TypeConfig> {
        Vote::new_committed(term, node)
    }

    fn membership(at: Option<LogId>) -> StoredMembershipOf<TypeConfig> {
        let nodes: BTreeMap<u64, KvNode> = (1..=3).map(|i| (i, KvNode::default())).collect();
        let voters = nodes.keys().copied().collect::<std::collections::BTreeSet<_>>();
        StoredMembership::new(at, Membership::new(vec![voters], nodes).unwrap())
    }

    fn meta(last: Option<LogId>, at: Option<LogId>) -> SnapshotMetaOf<TypeConfig> {
        SnapshotMetaOf::<TypeConfig> { last_log_id: last, last_membership: membership(at) }
    }

    /// Bytes of the state machine's snapshot (its fields in order, as bincode encodes a
    /// struct).
    fn data(last: Option<LogId>, at: Option<LogId>) -> Vec<u8> {
        let map = BTreeMap::from([("k".to_string(), b"v".to_vec())]);
        vellum_raft_store::codec::encode(&(last, membership(at), map)).unwrap()
    }

    #[test]
    fn a_snapshot_a_leader_sends_passes() {
        let (last, at) = (Some(log_id(2, 1, 40)), Some(log_id(1, 1, 1)));
        let r =
            snapshot(&leader_vote(3, 2), &meta(last, at), &data(last, at), Some(&log_id(2, 1, 30)));
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn a_snapshot_whose_data_does_not_decode_is_refused() {
        let (last, at) = (Some(log_id(2, 1, 40)), Some(log_id(1, 1, 1)));
        for garbage in [vec![], vec![0xff; 7], b"not a snapshot at all".to_vec()] {
            let r = snapshot(&leader_vote(2, 1), &meta(last, at), &garbage, None);
            assert!(r.as_ref().is_err_and(|e| e.contains("does not decode")), "{r:?}");
        }
        let mut trailing = data(last, at);
        trailing.push(0);
        assert!(snapshot(&leader_vote(2, 1), &meta(last, at), &trailing, None).is_err());
    }

    #[test]
    fn a_snapshot_beyond_its_vote_is_refused() {
        let (last, at) = (Some(log_id(5, 1, 40)), Some(log_id(1, 1, 1)));
        let r = snapshot(&leader_vote(3, 2), &meta(last, at), &data(last, at), None);
        assert!(r.as_ref().is_err_and(|e| e.contains("beyond the sender's vote")), "{r:?}");
        // Same term, a later leader id (leader ids order by term, then node).
        let last = Some(log_id(3, 3, 40));
        assert!(snapshot(&leader_vote(3, 2), &meta(last, at), &data(last, at), None).is_err());
    }

    #[test]
    fn a_snapshot_of_an_uncommitted_vote_is_refused() {
        let (last, at) = (Some(log_id(2, 1, 40)), Some(log_id(1, 1, 1)));
        let r = snapshot(&Vote::new(3, 2), &meta(last, at), &data(last, at), None);
        assert!(r.as_ref().is_err_and(|e| e.contains("not committed")), "{r:?}");
    }

    #[test]
    fn a_snapshot_whose_membership_is_after_its_last_log_id_is_refused() {
        let (last, at) = (Some(log_id(2, 1, 40)), Some(log_id(2, 1, 41)));
        let r = snapshot(&leader_vote(3, 2), &meta(last, at), &data(last, at), None);
        assert!(r.as_ref().is_err_and(|e| e.contains("membership")), "{r:?}");
        let r = snapshot(&leader_vote(3, 2), &meta(None, at), &data(None, at), None);
        assert!(r.is_err(), "a membership with no last log id");
    }

    #[test]
    fn a_snapshot_with_a_membership_openraft_cannot_use_is_refused() {
        let (last, at) = (Some(log_id(2, 1, 40)), Some(log_id(1, 1, 1)));
        let nodes: BTreeMap<u64, KvNode> = (1..=2).map(|i| (i, KvNode::default())).collect();
        // Built as decoding builds them: unvalidated.
        let no_node: KvMembership = serde_json::from_value(serde_json::json!({
            "configs": [[1, 2, 3]],
            "nodes": serde_json::to_value(&nodes).unwrap(),
        }))
        .unwrap();
        let empty: KvMembership =
            serde_json::from_value(serde_json::json!({ "configs": [[]], "nodes": {} })).unwrap();
        for (what, m) in [("voter without node", no_node), ("empty voter set", empty)] {
            let mut bad = meta(last, at);
            bad.last_membership = StoredMembership::new(at, m);
            let r = snapshot(&leader_vote(3, 2), &bad, &data(last, at), None);
            assert!(r.is_err(), "{what}: {r:?}");
        }
    }

    #[test]
    fn a_snapshot_that_contradicts_the_committed_log_is_refused() {
        let (last, at) = (Some(log_id(3, 1, 40)), Some(log_id(1, 1, 1)));
        let committed = log_id(2, 1, 40);
        let r = snapshot(&leader_vote(3, 1), &meta(last, at), &data(last, at), Some(&committed));
        assert!(r.as_ref().is_err_and(|e| e.contains("committed")), "{r:?}");
        // An older snapshot is fine: openraft ignores it.
        let last = Some(log_id(2, 1, 30));
        assert_eq!(
            snapshot(&leader_vote(3, 1), &meta(last, at), &data(last, at), Some(&committed)),
            Ok(())
        );
    }

    fn entry(id: LogId) -> Entry {
        let op = KvOp::Put { key: "k".into(), value: vec![1; 100] };
        Entry::new_normal(id, KvRequest { ops: vec![op] })
    }

    fn append_req(prev: Option<LogId>, entries: Vec<Entry>) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: leader_vote(3, 1),
            prev_log_id: prev,
            entries,
            leader_commit: prev,
        }
    }

    #[test]
    fn appends_a_leader_sends_pass() {
        let ok =
            append_req(Some(log_id(2, 1, 9)), (10..13).map(|i| entry(log_id(3, 1, i))).collect());
        assert_eq!(append(&ok, 4096), Ok(()));
        assert_eq!(append(&append_req(None, vec![entry(log_id(1, 1, 0))]), 4096), Ok(()));
        assert_eq!(append(&append_req(Some(log_id(3, 1, 9)), vec![]), 4096), Ok(()));
    }

    #[test]
    fn malformed_appends_are_refused() {
        let prev = Some(log_id(2, 1, 9));
        let gap = append_req(prev, vec![entry(log_id(3, 1, 10)), entry(log_id(3, 1, 12))]);
        assert!(append(&gap, 4096).is_err(), "a gap");
        let behind = append_req(prev, vec![entry(log_id(3, 1, 9))]);
        assert!(append(&behind, 4096).is_err(), "an entry at prev_log_id's index");
        let beyond = append_req(prev, vec![entry(log_id(4, 1, 10))]);
        assert!(append(&beyond, 4096).is_err(), "an entry beyond the vote");
        let back = append_req(prev, vec![entry(log_id(3, 1, 10)), entry(log_id(2, 1, 11))]);
        assert!(append(&back, 4096).is_err(), "leader ids going back");
        let before_prev = append_req(prev, vec![entry(log_id(1, 1, 10))]);
        assert!(append(&before_prev, 4096).is_err(), "an entry of a leader before prev's");
        let prev_beyond = append_req(Some(log_id(5, 1, 9)), vec![]);
        assert!(append(&prev_beyond, 4096).is_err(), "prev_log_id beyond the vote");
        let mut commit_beyond = append_req(prev, vec![]);
        commit_beyond.leader_commit = Some(log_id(9, 9, 1));
        assert!(append(&commit_beyond, 4096).is_err(), "leader_commit beyond the vote");
        let mut candidate = append_req(prev, vec![]);
        candidate.vote = Vote::new(3, 1);
        assert!(append(&candidate, 4096).is_err(), "an uncommitted vote");
        let big = append_req(prev, vec![entry(log_id(3, 1, 10))]);
        assert!(append(&big, 64).is_err(), "an entry larger than the log holds");
    }

    #[test]
    fn a_vote_request_beyond_its_vote_is_refused() {
        let ok = VoteRequest::new(Vote::new(4, 2), Some(log_id(3, 1, 9)));
        assert_eq!(vote(&ok), Ok(()));
        let bad = VoteRequest::new(Vote::new(4, 2), Some(log_id(5, 1, 9)));
        assert!(vote(&bad).is_err());
    }
}
