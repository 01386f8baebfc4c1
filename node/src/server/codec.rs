//! bincode 2 over serde for Raft RPC bodies, decoded with a limit bound to the body's size.
//!
//! A bincode string or byte buffer is a length followed by its bytes, and bincode allocates
//! the length before it reads the bytes: without a limit, a body of a few bytes that claims
//! a string of 2^60 bytes makes the node try to allocate them (and abort). With bincode's
//! limit, a decode claims every string's and buffer's length first and fails with
//! `LimitExceeded` past the limit. Through serde, only strings and byte buffers claim, and
//! the bytes claimed must follow in the body, so a body that decodes never claims more than
//! its own length. The limit is a compile-time constant in bincode: [`decode`] picks the
//! smallest power of two from 4 KiB up that holds the body, so a body makes the decoder
//! allocate at most twice what it carries (or 4 KiB).

use serde::Serialize;
use serde::de::DeserializeOwned;

use bincode::error::DecodeError;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
}

fn decode_within<T: DeserializeOwned, const LIMIT: usize>(bytes: &[u8]) -> Result<T, DecodeError> {
    let config = bincode::config::standard().with_limit::<LIMIT>();
    bincode::serde::decode_from_slice(bytes, config).map(|(v, _)| v)
}

/// Decodes `bytes`, allocating at most the next power of two of their length (at least
/// 4 KiB) for the strings and buffers they claim to hold. Bodies over 1 GiB (the snapshot
/// RPC's bound) are refused.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    macro_rules! classes {
        ($($shift:literal)*) => {
            $(if bytes.len() <= 1 << $shift {
                return decode_within::<T, { 1 << $shift }>(bytes);
            })*
        };
    }
    classes!(12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30);
    Err(DecodeError::LimitExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_length_beyond_the_body_is_refused_without_allocating_it() {
        // A string claiming u64::MAX / 2 bytes: varint tag 253 (u64 follows), then the length.
        let mut forged = vec![253u8];
        forged.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
        assert!(matches!(decode::<String>(&forged), Err(DecodeError::LimitExceeded)));
        // 3 MiB claimed by a 9-byte body: past the 4 KiB class, refused.
        let mut forged = vec![253u8];
        forged.extend_from_slice(&(3u64 << 20).to_le_bytes());
        assert!(matches!(
            decode::<Vec<String>>(&[&[1u8][..], &forged].concat()),
            Err(DecodeError::LimitExceeded)
        ));
    }

    #[test]
    fn bodies_that_decode_stay_within_their_own_size() {
        for len in [0usize, 1, 4095, 4096, 4097, 1 << 20, (1 << 20) + 1, 5 << 20] {
            let value = ("k".repeat(len), vec![7u8; len / 2], vec![String::from("x"); 3]);
            let bytes = encode(&value).unwrap_or_default();
            let back: (String, Vec<u8>, Vec<String>) = decode(&bytes).unwrap_or_default();
            assert_eq!(back, value, "{len}");
        }
    }
}
