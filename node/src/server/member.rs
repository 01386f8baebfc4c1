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

use std::sync::Arc;

use axum::http::HeaderMap;
use tokio::sync::watch;
use vellum_raft_store::Error as StoreError;
pub use vellum_raft_store::member::Incarnation;
use vellum_raft_store::member::{Identity, PeerBook};

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

/// This node's identity, its peer book, and the way to stop the node when it learns that
/// it is the member that lost its state.
pub struct Guard {
    pub me: Identity,
    pub book: Arc<PeerBook>,
    fatal: watch::Sender<Option<String>>,
}

impl Guard {
    pub fn new(me: Identity, book: Arc<PeerBook>) -> (Arc<Guard>, watch::Receiver<Option<String>>) {
        let (fatal, rx) = watch::channel(None);
        (Arc::new(Guard { me, book, fatal }), rx)
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
    pub fn stale_self(&self, peer: u64, known: Incarnation) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
