//! crc32c checksums, seeded so that a structure only verifies where it belongs.
//!
//! A superblock's checksum is seeded with its slot number and the volume UUID, and a metadata
//! block's with its block address and the volume UUID (ZFS seeds labels with their offset the
//! same way): a superblock written to the wrong slot, a block written to the wrong address,
//! or a structure copied from another volume fails its checksum instead of being misread.

use crate::format::consts::Uuid;

/// Domain-separation tags, so a superblock seed can never equal a block seed.
const SUPERBLOCK_DOMAIN: &[u8; 8] = b"VLM-SB\0\0";
const BLOCK_DOMAIN: &[u8; 8] = b"VLM-BLK\0";
const JOURNAL_DOMAIN: &[u8; 8] = b"VLM-JNL\0";

/// crc32c of `bytes` seeded with `(slot, uuid)`; FORMAT.md "Superblock checksum".
pub fn superblock(slot: u8, uuid: &Uuid, bytes: &[u8]) -> u32 {
    let mut seed = crc32c::crc32c(SUPERBLOCK_DOMAIN);
    seed = crc32c::crc32c_append(seed, &u32::from(slot).to_le_bytes());
    seed = crc32c::crc32c_append(seed, &uuid.0);
    crc32c::crc32c_append(seed, bytes)
}

/// crc32c of `bytes` seeded with `(block address, uuid)`; FORMAT.md "Metadata blocks".
pub fn block(address: u64, uuid: &Uuid, bytes: &[u8]) -> u32 {
    let mut seed = crc32c::crc32c(BLOCK_DOMAIN);
    seed = crc32c::crc32c_append(seed, &address.to_le_bytes());
    seed = crc32c::crc32c_append(seed, &uuid.0);
    crc32c::crc32c_append(seed, bytes)
}

/// crc32c of a journal block's `header` then `body`, seeded with `(block address, uuid)`;
/// FORMAT.md "Journal blocks". A block written to another ring position, or a stale block of
/// another volume, does not verify.
pub fn journal(address: u64, uuid: &Uuid, header: &[u8], body: &[u8]) -> u32 {
    let mut seed = crc32c::crc32c(JOURNAL_DOMAIN);
    seed = crc32c::crc32c_append(seed, &address.to_le_bytes());
    seed = crc32c::crc32c_append(seed, &uuid.0);
    seed = crc32c::crc32c_append(seed, header);
    crc32c::crc32c_append(seed, body)
}

/// Plain crc32c (the bitmap checksum of a clean volume).
pub fn plain(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// [`plain`] of the concatenation of what `crc` covers and `bytes` (the bitmap checksum over
/// every member's region, one member at a time).
pub fn plain_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_separate_slots_addresses_and_volumes() {
        let a = Uuid([1; 16]);
        let b = Uuid([2; 16]);
        let data = [0x5Au8; 64];
        assert_ne!(superblock(0, &a, &data), superblock(1, &a, &data));
        assert_ne!(superblock(0, &a, &data), superblock(0, &b, &data));
        assert_ne!(block(10, &a, &data), block(11, &a, &data));
        assert_ne!(block(10, &a, &data), block(10, &b, &data));
        assert_ne!(block(0, &a, &data), superblock(0, &a, &data));
        assert_ne!(journal(10, &a, &data, &[]), block(10, &a, &data));
        assert_ne!(journal(10, &a, &data, &[]), journal(11, &a, &data, &[]));
    }
}
