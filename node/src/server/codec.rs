//! bincode 2 over serde for Raft RPC bodies: the store's encoding, decoded with a limit set
//! from the body's size (`vellum_raft_store::codec`: a forged length cannot make the node
//! allocate what it claims, at most 32 times what the body carries, or 64 KiB). A body with
//! bytes after its message is refused: it is not the message its sender encoded.

use serde::Serialize;
use serde::de::DeserializeOwned;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    vellum_raft_store::codec::decode_exact(bytes)
}
