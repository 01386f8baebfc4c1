//! The openraft type configuration of the KV store and its requests.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// One KV operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvOp {
    Put { key: String, value: Vec<u8> },
    Delete { key: String },
}

/// A client proposal: several operations applied together, in order (the node batches
/// concurrent client writes into one entry).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KvRequest {
    pub ops: Vec<KvOp>,
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
    pub raft_addr: String,
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

openraft::declare_raft_types!(
    /// The KV store's openraft types.
    pub TypeConfig:
        D = KvRequest,
        R = KvResponse,
        NodeId = u64,
        Node = KvNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type StorageError = openraft::StorageError<NodeId>;
