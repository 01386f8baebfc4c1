//! bincode 2 over serde: the one encoding of everything the store writes, and of the RPC
//! bodies of the node.
//!
//! Decoding is bounded by the input's size. bincode allocates a string's or byte buffer's
//! claimed length before it reads the bytes, so without a limit a few forged bytes claiming
//! 2^62 bytes make the process try to allocate them (and abort). With bincode's limit, every
//! decoded value counts against it first and the decode fails with `LimitExceeded` past it:
//! a string or buffer counts its length (bytes that must follow in the input), every other
//! value its size in memory (a `u64` counts 8 even when its varint takes 1 byte, an enum tag
//! 4, a `u128` 16). So an input that decodes counts at most [`CLAIM_FACTOR`] times its own
//! length. bincode's limit is a compile-time constant: [`decode_bounded`] picks the
//! smallest power of two from 64 KiB up that holds `CLAIM_FACTOR` times the input, so a
//! forged input makes the decoder allocate at most `2 * CLAIM_FACTOR` times what it carries
//! (or 64 KiB), never what it claims.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;

use bincode::error::DecodeError;

/// Encodes `value` (bincode 2, standard configuration: varints).
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

/// The most an input that decodes can count against bincode's limit, per byte of it: a
/// 1-byte varint of a `u128`.
pub const CLAIM_FACTOR: usize = 16;

/// Decodes a value from the start of `bytes`, allocating at most the next power of two of
/// [`CLAIM_FACTOR`] times their length (at least 64 KiB) for what they claim to hold.
/// Inputs over 1 TiB are refused.
pub fn decode_bounded<T: DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, DecodeError> {
    decode_prefix(bytes).map(|(v, _)| v)
}

/// Decodes a value that must fill `bytes` exactly, within the bound of [`decode_bounded`]:
/// bytes after the value are refused (a message with a tail is not the message its sender
/// encoded, and a receiver must not act on a part of it).
pub fn decode_exact<T: DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, DecodeError> {
    let (value, used) = decode_prefix(bytes)?;
    if used != bytes.len() {
        return Err(DecodeError::OtherString(format!(
            "{} bytes after the end of the message",
            bytes.len() - used
        )));
    }
    Ok(value)
}

fn decode_within<T: DeserializeOwned, const LIMIT: usize>(
    bytes: &[u8],
) -> std::result::Result<(T, usize), DecodeError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard().with_limit::<LIMIT>())
}

fn decode_prefix<T: DeserializeOwned>(
    bytes: &[u8],
) -> std::result::Result<(T, usize), DecodeError> {
    let claimable = bytes.len().saturating_mul(CLAIM_FACTOR);
    macro_rules! classes {
        ($($shift:literal)*) => {
            $(if claimable <= 1 << $shift {
                return decode_within::<T, { 1 << $shift }>(bytes);
            })*
        };
    }
    classes!(16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44);
    Err(DecodeError::LimitExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_bytes_are_refused_by_decode_exact() {
        let mut bytes =
            bincode::serde::encode_to_vec(&(7u64, "x".to_string()), bincode::config::standard())
                .unwrap();
        assert_eq!(decode_exact::<(u64, String)>(&bytes).unwrap(), (7, "x".to_string()));
        bytes.push(0);
        assert!(decode_exact::<(u64, String)>(&bytes).is_err());
        assert!(decode_bounded::<(u64, String)>(&bytes).is_ok(), "a prefix decode reads past it");
    }

    #[test]
    fn a_claimed_length_beyond_the_input_is_refused_without_allocating_it() {
        // A string claiming u64::MAX / 2 bytes: varint tag 253 (u64 follows), then the length.
        let mut forged = vec![253u8];
        forged.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
        assert!(matches!(decode_bounded::<String>(&forged), Err(DecodeError::LimitExceeded)));
        // 3 MiB claimed by a 10-byte input: past the 64 KiB class, refused.
        let mut forged = vec![1u8, 253];
        forged.extend_from_slice(&(3u64 << 20).to_le_bytes());
        assert!(matches!(decode_bounded::<Vec<String>>(&forged), Err(DecodeError::LimitExceeded)));
    }

    #[test]
    fn inputs_that_decode_stay_within_the_bound() {
        for len in [0usize, 1, 4095, 4096, 4097, 1 << 20, (1 << 20) + 1, 5 << 20] {
            let value = ("k".repeat(len), vec![7u8; len / 2], vec![String::from("x"); 3]);
            let bytes = encode(&value).unwrap_or_default();
            let back: (String, Vec<u8>, Vec<String>) = decode(&bytes).unwrap_or_default();
            assert_eq!(back, value, "{len}");
        }
    }

    #[test]
    fn small_integers_count_their_size_in_memory_and_still_decode() {
        // Each element is 1 byte on the wire and counts 1 + 2 + 4 + 8 + 16 + 4 (the enum tag):
        // 35 bytes of claims for 6 bytes of input, near every power-of-two boundary.
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug, Default)]
        enum Tag {
            #[default]
            A,
        }
        for n in [1usize, 100, 680, 681, 682, 700, 2730, 2731, 11_000, 50_000] {
            let value: Vec<(u8, u16, u32, u64, u128, Tag)> =
                (0..n).map(|i| (1, 2, 3, (i % 100) as u64, 5, Tag::A)).collect();
            let bytes = encode(&value).unwrap_or_default();
            let back: Vec<(u8, u16, u32, u64, u128, Tag)> = decode(&bytes)
                .unwrap_or_else(|e| panic!("{n} elements, {} bytes: {e}", bytes.len()));
            assert_eq!(back, value);
        }
    }
}
