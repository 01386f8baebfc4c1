//! Crafted Raft RPCs, as a peer (or an impostor) would send them: a client presenting a
//! given certificate posts a bincode body (the node's encoding: bincode 2, standard config,
//! over openraft 0.10's serde) to `/raft/{append,vote,snapshot}` with the member headers it
//! chooses, and gets the status and body back. Generic on purpose: any test that needs to
//! say something to a node's Raft port builds its body with the helpers here, or its own.

use std::path::Path;

use serde::Serialize;
use vellum_raft_store::v010::openraft::StoredMembership;
use vellum_raft_store::v010::openraft::raft::{AppendEntriesRequest, VoteRequest};
use vellum_raft_store::v010::openraft::type_config::alias::{SnapshotMetaOf, VoteOf};
use vellum_raft_store::v010::{TypeConfig, Vote};

/// The node's encoding of an RPC body.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).unwrap()
}

/// A blocking mTLS client trusting `ca` and presenting `cert`/`key`.
pub fn client(ca: &Path, cert: &Path, key: &Path) -> reqwest::blocking::Client {
    crate::t110_mtls::tls_client(ca, Some((cert, key)))
}

/// The answer to a crafted RPC: its status, its `x-vellum-member` header, its body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub member: Option<String>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (refusals are JSON), or `Null`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    /// The `error` of a JSON refusal, or "".
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_string()
    }
}

/// POSTs `body` to `https://127.0.0.1:{raft}/raft/{path}` with `x-vellum-from: from` and
/// `x-vellum-to: to` (raw header values, e.g. `9:-`, `2:<32 hex digits>`).
pub fn post_raw(
    client: &reqwest::blocking::Client,
    raft: u16,
    path: &str,
    from: &str,
    to: &str,
    body: Vec<u8>,
) -> reqwest::Result<Answer> {
    let resp = client
        .post(format!("https://127.0.0.1:{raft}/raft/{path}"))
        .header("x-vellum-from", from)
        .header("x-vellum-to", to)
        .body(body)
        .send()?;
    let status = resp.status().as_u16();
    let member =
        resp.headers().get("x-vellum-member").and_then(|v| v.to_str().ok()).map(str::to_string);
    Ok(Answer { status, member, body: resp.bytes()?.to_vec() })
}

/// A vote of `leader` in `term`, committed (as a leader's) or not (as a candidate's).
pub fn vote_of(term: u64, leader: u64, committed: bool) -> Vote {
    if committed {
        VoteOf::<TypeConfig>::new_committed(term, leader)
    } else {
        Vote::new(term, leader)
    }
}

/// A vote request of candidate `from` in `term`, optionally as a leadership transfer (which
/// a voter processes even inside a leader's lease).
pub fn vote_body(from: u64, term: u64, transfer: bool) -> Vec<u8> {
    let mut req = VoteRequest::<TypeConfig>::new(vote_of(term, from, false), None);
    req.leadership_transfer = transfer;
    encode(&req)
}

/// An append (no entries: a heartbeat) from leader `from` of `term`.
pub fn append_body(from: u64, term: u64) -> Vec<u8> {
    let req = AppendEntriesRequest::<TypeConfig> {
        vote: vote_of(term, from, true),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    encode(&req)
}

/// A whole-snapshot RPC from leader `from` of `term`: its vote, an empty meta, `data`.
pub fn snapshot_body(from: u64, term: u64, data: Vec<u8>) -> Vec<u8> {
    let meta = SnapshotMetaOf::<TypeConfig> {
        last_log_id: None,
        last_membership: StoredMembership::default(),
    };
    encode(&(vote_of(term, from, true), meta, data))
}
