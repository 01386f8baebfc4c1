//! Journal blocks: the unit of the ring (FORMAT.md, "Journal blocks").
//!
//! ```text
//! [magic 8][sequence u64][index u32][count u32][used u32][checksum u32][payload: used][zeros]
//! ```
//!
//! The checksum covers the header before it and everything after it, seeded with the
//! block's own address and the volume UUID (`checksum::journal`): a block written to another
//! ring position, torn, or left by another volume is *not a block* here (`Ok(None)`), never a
//! misread one. A block that verifies but breaks a rule was made by a newer or broken writer
//! and refuses the volume.
//!
//! Invariants (asserted when sealing, checked when opening): `count >= 1`, `index < count`,
//! `used <= B - 32`, padding zero; a filler is sequence 0, index 0, count 1, used 0.

use crate::error::{Corruption, Error, Region, Result};
use crate::format::checksum;
use crate::format::codec::{Reader, Writer};
use crate::format::consts::Uuid;

/// `VLMJRNL\0`: the first 8 bytes of every journal block.
pub const MAGIC: [u8; 8] = *b"VLMJRNL\0";

// Header fields, each derived from the one before (FORMAT.md's table).
pub const SEQUENCE_AT: usize = MAGIC.len();
pub const INDEX_AT: usize = SEQUENCE_AT + 8;
pub const COUNT_AT: usize = INDEX_AT + 4;
pub const USED_AT: usize = COUNT_AT + 4;
pub const CHECKSUM_AT: usize = USED_AT + 4;
/// Bytes of a journal block's header; the payload follows.
pub const HEADER_LEN: usize = CHECKSUM_AT + 4;
const _: () = assert!(HEADER_LEN == 32);

/// Payload bytes one block of `block_size` carries.
pub fn payload_per_block(block_size: u32) -> usize {
    block_size as usize - HEADER_LEN
}

/// Blocks a batch payload of `len` bytes takes.
pub fn blocks_for(len: usize, block_size: u32) -> u64 {
    len.div_ceil(payload_per_block(block_size)).max(1) as u64
}

/// Where a block sits in its batch: `(index, count)`.
pub type Position = (u32, u32);

/// Seals block `index` of `count` of batch `sequence` into `out` (one whole block), for the
/// block at `address`.
pub fn seal_block(
    out: &mut [u8],
    address: u64,
    uuid: &Uuid,
    sequence: u64,
    (index, count): Position,
    payload: &[u8],
) {
    assert!(payload.len() <= out.len() - HEADER_LEN, "journal payload overflows its block");
    assert!(count >= 1 && index < count, "block {index} of a batch of {count}");
    assert!(sequence > 0 || (index, count, payload.len()) == (0, 1, 0), "a filler carries nothing");
    let used = u32::try_from(payload.len()).expect("a block's payload fits u32");
    let padding = out.len() - HEADER_LEN - payload.len();
    {
        let mut w = Writer::new(out);
        w.put(&MAGIC);
        w.assert_at(SEQUENCE_AT);
        w.u64_le(sequence);
        w.assert_at(INDEX_AT);
        w.u32_le(index);
        w.u32_le(count);
        w.assert_at(USED_AT);
        w.u32_le(used);
        w.u32_le(0); // the checksum, below
        w.assert_at(HEADER_LEN);
        w.put(payload);
        w.zeros(padding);
    }
    let crc = checksum::journal(address, uuid, &out[..CHECKSUM_AT], &out[HEADER_LEN..]);
    Writer::new(&mut out[CHECKSUM_AT..HEADER_LEN]).u32_le(crc);
}

/// A journal block that verified at its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockView<'a> {
    pub sequence: u64,
    pub index: u32,
    pub count: u32,
    pub payload: &'a [u8],
}

/// Decodes one block read at `address`. `Ok(None)`: not a journal block of this volume at
/// this address (bad magic or checksum: never written, torn, stale from elsewhere). `Err`:
/// the block verifies but breaks a rule, which only a newer or broken writer produces.
pub fn open_block<'a>(bytes: &'a [u8], address: u64, uuid: &Uuid) -> Result<Option<BlockView<'a>>> {
    if bytes.len() <= HEADER_LEN || bytes[..MAGIC.len()] != MAGIC {
        return Ok(None);
    }
    let offset = address.saturating_mul(bytes.len() as u64);
    let mut r = Reader::new(bytes, Region::Journal, offset);
    r.bytes(MAGIC.len())?;
    let sequence = r.u64_le()?;
    let index = r.u32_le()?;
    let count = r.u32_le()?;
    let used = r.u32_le()? as usize;
    let stored = r.u32_le()?;
    if stored != checksum::journal(address, uuid, &bytes[..CHECKSUM_AT], &bytes[HEADER_LEN..]) {
        return Ok(None);
    }
    let bad = |field: &'static str, value: u64| {
        Err(Error::corrupt(Region::Journal, offset, Corruption::BadValue { field, value }))
    };
    if sequence == 0 && (index, count, used) != (0, 1, 0) {
        return bad("journal filler", u64::from(count));
    }
    if count == 0 || index >= count {
        return bad("journal block index", u64::from(index));
    }
    if used > bytes.len() - HEADER_LEN {
        return bad("journal block used", used as u64);
    }
    let payload = r.bytes(used)?;
    r.expect_zero(bytes.len() - HEADER_LEN - used, "journal block padding")?;
    Ok(Some(BlockView { sequence, index, count, payload }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_verify_only_at_their_address() {
        let uuid = Uuid([3; 16]);
        let mut b = vec![0u8; 4096];
        seal_block(&mut b, 10, &uuid, 5, (0, 1), b"records");
        let v = open_block(&b, 10, &uuid).unwrap().unwrap();
        assert_eq!((v.sequence, v.index, v.count, v.payload), (5, 0, 1, &b"records"[..]));
        assert_eq!(open_block(&b, 11, &uuid).unwrap(), None);
        assert_eq!(open_block(&b, 10, &Uuid([4; 16])).unwrap(), None);
        let mut torn = b.clone();
        torn[2048] ^= 1;
        assert_eq!(open_block(&torn, 10, &uuid).unwrap(), None);
    }

    #[test]
    fn a_verified_block_that_breaks_a_rule_refuses() {
        let uuid = Uuid([3; 16]);
        let mut b = vec![0u8; 4096];
        seal_block(&mut b, 10, &uuid, 5, (0, 2), b"x");
        // Rewrite the index past the count and seal the checksum again by hand.
        b[INDEX_AT..COUNT_AT].copy_from_slice(&7u32.to_le_bytes());
        let crc = checksum::journal(10, &uuid, &b[..CHECKSUM_AT], &b[HEADER_LEN..]);
        b[CHECKSUM_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        assert!(open_block(&b, 10, &uuid).is_err(), "index past count");
    }

    #[test]
    fn the_layout_matches_the_spec() {
        let uuid = Uuid([1; 16]);
        let mut b = vec![0xAAu8; 4096];
        seal_block(&mut b, 3, &uuid, 0x0102_0304, (1, 2), b"pay");
        assert_eq!(&b[..8], b"VLMJRNL\0");
        assert_eq!(b[SEQUENCE_AT..SEQUENCE_AT + 8], 0x0102_0304u64.to_le_bytes());
        assert_eq!(b[INDEX_AT..INDEX_AT + 4], 1u32.to_le_bytes());
        assert_eq!(b[COUNT_AT..COUNT_AT + 4], 2u32.to_le_bytes());
        assert_eq!(b[USED_AT..USED_AT + 4], 3u32.to_le_bytes());
        assert_eq!(&b[HEADER_LEN..HEADER_LEN + 3], b"pay");
        assert!(b[HEADER_LEN + 3..].iter().all(|&x| x == 0), "padding is zero");
    }
}
