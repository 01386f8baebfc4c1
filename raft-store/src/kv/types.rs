//! The KV store's requests, responses and members: the application data both adapters'
//! type configurations name (`v010::TypeConfig`, and `v09::TypeConfig` with feature
//! `openraft-v09`).

use serde::{Deserialize, Serialize};

/// One KV operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvOp {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
    },
    /// Removes `key` (nothing happens when it is absent).
    Delete {
        /// The key.
        key: String,
    },
}

/// A client proposal: several operations applied together, in order (the node batches
/// concurrent client writes into one entry).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KvRequest {
    /// The operations, applied in order.
    pub ops: Vec<KvOp>,
}

/// What an entry's encoding adds to its [`KvRequest`]'s ops at most: the log id (term,
/// node id, index: three varints of up to 9 bytes), the payload's variant tag (up to 5) and
/// the ops' count (up to 9). The same for the 0.9 and the 0.10 entry.
pub const ENTRY_ENVELOPE_BYTES: usize = 27 + 5 + 9;

/// bincode's varint length of `n`.
fn varint_len(n: usize) -> usize {
    match n as u64 {
        0..=250 => 1,
        251..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

impl KvOp {
    /// Bytes this operation takes in an encoded entry, exactly.
    pub fn encoded_bytes(&self) -> usize {
        match self {
            KvOp::Put { key, value } => {
                1 + varint_len(key.len()) + key.len() + varint_len(value.len()) + value.len()
            }
            KvOp::Delete { key } => 1 + varint_len(key.len()) + key.len(),
        }
    }
}

impl KvRequest {
    /// The encoded size of a log entry carrying this request, at most: compare it with the
    /// log store's `max_entry_bytes()` before a direct `client_write` (an append the log
    /// refuses stops openraft 0.10's core). At most [`ENTRY_ENVELOPE_BYTES`] more than the
    /// entry takes.
    ///
    /// ```
    /// use vellum_raft_store::{KvOp, KvRequest};
    ///
    /// let request = KvRequest { ops: vec![KvOp::Put { key: "k".into(), value: vec![0; 1000] }] };
    /// assert!(request.entry_bytes() >= 1000 && request.entry_bytes() < 1100);
    /// ```
    pub fn entry_bytes(&self) -> usize {
        ENTRY_ENVELOPE_BYTES + self.ops.iter().map(KvOp::encoded_bytes).sum::<usize>()
    }
}

impl std::fmt::Display for KvRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Logged by openraft 0.10: counts only, never keys or values.
        let bytes: usize = self
            .ops
            .iter()
            .map(|op| match op {
                KvOp::Put { key, value } => key.len() + value.len(),
                KvOp::Delete { key } => key.len(),
            })
            .sum();
        write!(f, "{} ops, {bytes} bytes", self.ops.len())
    }
}

/// A cluster member: where its peers reach its Raft RPC, and where clients reach its API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KvNode {
    /// Where peers reach this member's Raft RPC (`host:port`).
    pub raft_addr: String,
    /// Where clients reach this member's API (`host:port`).
    pub api_addr: String,
}

impl std::fmt::Display for KvNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "raft {} / api {}", self.raft_addr, self.api_addr)
    }
}

impl std::fmt::Display for KvResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} applied", self.applied)
    }
}

/// The result of applying one entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KvResponse {
    /// Operations applied.
    pub applied: usize,
}

/// A member's id.
pub type NodeId = u64;
