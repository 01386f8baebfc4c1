//! bincode 2 over serde: the one encoding of everything the store writes, and of the RPC
//! bodies of the node.
//!
//! Decoding is bounded by the input's size. bincode allocates a string's or byte buffer's
//! claimed length before it reads the bytes, so without a limit a few forged bytes claiming
//! 2^62 bytes make the process try to allocate them (and abort). With bincode's limit, every
//! such claim counts against it first and fails with `LimitExceeded` past it. Through serde
//! only strings and byte buffers claim, and the bytes claimed must follow in the input, so an
//! input that decodes never claims more than its own length. bincode's limit is a
//! compile-time constant: [`decode_bounded`] picks the smallest power of two from 4 KiB up
//! that holds the input, so decoding allocates at most twice what the input carries (or
//! 4 KiB) for what it claims.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;

use bincode::error::DecodeError;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    Ok(bincode::serde::encode_to_vec(value, bincode::config::standard())?)
}

/// Decodes all of `bytes` (trailing bytes are an error), bounded by their size.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let (value, used) = decode_prefix(bytes)?;
    if used != bytes.len() {
        return Err(crate::error::Error::Decode(DecodeError::OtherString(format!(
            "{} trailing bytes",
            bytes.len() - used
        ))));
    }
    Ok(value)
}

/// Decodes a value from the start of `bytes`, allocating at most the next power of two of
/// their length (at least 4 KiB) for the strings and buffers it claims to hold. Inputs over
/// 2^40 bytes are refused.
pub fn decode_bounded<T: DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, DecodeError> {
    decode_prefix(bytes).map(|(v, _)| v)
}

fn decode_within<T: DeserializeOwned, const LIMIT: usize>(
    bytes: &[u8],
) -> std::result::Result<(T, usize), DecodeError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard().with_limit::<LIMIT>())
}

fn decode_prefix<T: DeserializeOwned>(
    bytes: &[u8],
) -> std::result::Result<(T, usize), DecodeError> {
    macro_rules! classes {
        ($($shift:literal)*) => {
            $(if bytes.len() <= 1 << $shift {
                return decode_within::<T, { 1 << $shift }>(bytes);
            })*
        };
    }
    classes!(12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40);
    Err(DecodeError::LimitExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_length_beyond_the_input_is_refused_without_allocating_it() {
        // A string claiming u64::MAX / 2 bytes: varint tag 253 (u64 follows), then the length.
        let mut forged = vec![253u8];
        forged.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
        assert!(matches!(decode_bounded::<String>(&forged), Err(DecodeError::LimitExceeded)));
        // 3 MiB claimed by a 10-byte input: past the 4 KiB class, refused.
        let mut forged = vec![1u8, 253];
        forged.extend_from_slice(&(3u64 << 20).to_le_bytes());
        assert!(matches!(decode_bounded::<Vec<String>>(&forged), Err(DecodeError::LimitExceeded)));
    }

    #[test]
    fn inputs_that_decode_stay_within_their_own_size() {
        for len in [0usize, 1, 4095, 4096, 4097, 1 << 20, (1 << 20) + 1, 5 << 20] {
            let value = ("k".repeat(len), vec![7u8; len / 2], vec![String::from("x"); 3]);
            let bytes = encode(&value).unwrap_or_default();
            let back: (String, Vec<u8>, Vec<String>) = decode(&bytes).unwrap_or_default();
            assert_eq!(back, value, "{len}");
        }
    }
}
