//! bincode 2 over serde for Raft RPC bodies: the store's encoding, decoded with a limit set
//! from the body's size (`vellum_raft_store::codec`: a forged length cannot make the node
//! allocate what it claims, at most 32 times what the body carries, or 64 KiB). A body with
//! bytes after its message is refused: it is not the message its sender encoded.
//!
//! The sizes of the wire both ends agree on live here too: how many bytes of entries an
//! append carries ([`APPEND_BYTES`]) and the largest snapshot body ([`MAX_SNAPSHOT_BYTES`]).

use serde::Serialize;
use serde::de::DeserializeOwned;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    vellum_raft_store::codec::decode_exact(bytes)
}

/// Bytes of entries one AppendEntries RPC carries (at least one entry). openraft bounds a
/// payload by its number of entries only (`max_payload_entries`), and Vellum gives an
/// AppendEntries one heartbeat interval (openraft's `hard_ttl`) before it counts it as failed
/// and openraft sends it again: a payload of many large entries would fail every time. A
/// larger payload is sent as a prefix instead.
pub const APPEND_BYTES: usize = 2 << 20;

/// Largest snapshot RPC body: the whole snapshot travels in one POST (openraft 0.10 leaves
/// chunking to the application), and both ends hold it in memory, as they hold the state
/// machine. A node also refuses one larger than its volume (which must hold it), see
/// `raft_api::snapshot_body_limit`. A follower behind a larger snapshot cannot catch up (the leader
/// says so in its log).
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 30;
