//! The log's small durable records: vote, committed log id, purged log id
//! (docs/RAFT-LOG.md, "Meta file").
//!
//! Two 4096-byte slots in one preallocated file, written alternately, each with a sequence
//! number and a checksum. A save writes the whole state into the slot *not* holding the
//! newest copy, with one write-through write: a torn write damages only that slot, and the
//! other still holds the previous state, so the last returned save is never lost.
//!
//! Save `seq` goes to slot `seq % 2`, and the first save has seq 1: slot 1 is written first,
//! and slot 0 only once slot 1 holds a save that returned. So a blank slot beside a damaged
//! one is a torn first save (nothing acknowledged) only when the blank one is slot 0; a blank
//! slot 1 beside a written slot 0 is impossible after any power cut (slot 1 was erased) and
//! refuses, as do two damaged slots. Recovery takes the valid slot with the higher sequence.

use crate::error::{Error, Result};

pub const SLOT_LEN: usize = 4096;
pub const FILE_LEN: u64 = 2 * SLOT_LEN as u64;
const MAGIC: [u8; 8] = *b"VLMMETA1";
/// Bytes each record may take.
pub const RECORD_MAX: usize = 1000;
const AREA: usize = 1024;
const FLAGS_AT: usize = 16;
const LENS_AT: usize = 20;
const VOTE_AT: usize = 32;
const COMMITTED_AT: usize = VOTE_AT + AREA;
const PURGED_AT: usize = COMMITTED_AT + AREA;
const CRC_AT: usize = SLOT_LEN - 4;
const PURGED_INDEX_AT: usize = PURGED_AT + AREA;
const PURGED_BATCH_AT: usize = PURGED_INDEX_AT + 8;
const COMMITTED_INDEX_AT: usize = PURGED_BATCH_AT + 8;
const _: () = assert!(COMMITTED_INDEX_AT + 8 <= CRC_AT);
/// Flag bits: vote, committed, purged records; purged index; committed index.
const KNOWN_FLAGS: u32 = 0b1_1111;

/// The state the meta file holds (opaque bytes: the openraft layer encodes them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaState {
    /// The save's sequence number (the newer of the two slots wins).
    pub seq: u64,
    /// The encoded vote.
    pub vote: Option<Vec<u8>>,
    /// The encoded committed log id.
    pub committed: Option<Vec<u8>>,
    /// The encoded last purged log id.
    pub purged: Option<Vec<u8>>,
    /// The purged index, kept decoded for recovery.
    pub purged_index: Option<u64>,
    /// The first log batch written after the purge: frames of earlier batches at or below
    /// the purged index are gone, later ones are live (an empty log may restart anywhere).
    pub purged_batch: u64,
    /// The index of `committed`, kept decoded so that recovery can tell which of this and
    /// the log's newest `Commit` frame is newer. `None` in slots written before it existed.
    pub committed_index: Option<u64>,
}

impl MetaState {
    /// Encodes the slot for `self.seq`.
    pub fn encode(&self) -> Result<[u8; SLOT_LEN]> {
        let mut b = [0u8; SLOT_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        let mut flags = 0u32;
        for (i, (rec, at)) in
            [(&self.vote, VOTE_AT), (&self.committed, COMMITTED_AT), (&self.purged, PURGED_AT)]
                .into_iter()
                .enumerate()
        {
            if let Some(bytes) = rec {
                if bytes.len() > RECORD_MAX {
                    return Err(Error::Config("a vote or log id encodes to more than 1000 bytes"));
                }
                flags |= 1 << i;
                b[LENS_AT + 4 * i..LENS_AT + 4 * i + 4]
                    .copy_from_slice(&(bytes.len() as u32).to_le_bytes());
                b[at..at + bytes.len()].copy_from_slice(bytes);
            }
        }
        if let Some(p) = self.purged_index {
            flags |= 1 << 3;
            b[PURGED_INDEX_AT..PURGED_BATCH_AT].copy_from_slice(&p.to_le_bytes());
        }
        if let Some(c) = self.committed_index {
            flags |= 1 << 4;
            b[COMMITTED_INDEX_AT..COMMITTED_INDEX_AT + 8].copy_from_slice(&c.to_le_bytes());
        }
        b[FLAGS_AT..FLAGS_AT + 4].copy_from_slice(&flags.to_le_bytes());
        b[PURGED_BATCH_AT..COMMITTED_INDEX_AT].copy_from_slice(&self.purged_batch.to_le_bytes());
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        Ok(b)
    }

    /// Decodes one slot: `None` for an all-zero or damaged slot.
    pub fn decode(b: &[u8]) -> Option<MetaState> {
        if b.len() != SLOT_LEN || b[..8] != MAGIC {
            return None;
        }
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if crc32c::crc32c(&b[..CRC_AT]) != word(CRC_AT) {
            return None;
        }
        let flags = word(FLAGS_AT);
        if flags & !KNOWN_FLAGS != 0 {
            return None;
        }
        let rec = |i: usize, at: usize| -> Option<Option<Vec<u8>>> {
            if flags & (1 << i) == 0 {
                return Some(None);
            }
            let len = word(LENS_AT + 4 * i) as usize;
            (len <= RECORD_MAX).then(|| Some(b[at..at + len].to_vec()))
        };
        let long = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        Some(MetaState {
            seq: long(8),
            vote: rec(0, VOTE_AT)?,
            committed: rec(1, COMMITTED_AT)?,
            purged: rec(2, PURGED_AT)?,
            purged_index: (flags & (1 << 3) != 0).then(|| long(PURGED_INDEX_AT)),
            purged_batch: long(PURGED_BATCH_AT),
            committed_index: (flags & (1 << 4) != 0).then(|| long(COMMITTED_INDEX_AT)),
        })
    }

    /// The newest valid slot of the file. Refuses (`Error::Corrupt`) what no sequence of
    /// saves and one power cut can leave: both slots damaged (a save writes one slot at a
    /// time), and slot 1 blank beside a written slot 0 (slot 0 is written only after slot 1
    /// held the first save). Slot 0 blank beside a damaged slot 1 is a torn first save: a
    /// save returns only after its write, so nothing acknowledged is lost.
    pub fn recover(file: &[u8], name: &str) -> Result<MetaState> {
        let slots: Vec<&[u8]> = file.chunks(SLOT_LEN).take(2).collect();
        let decoded: Vec<Option<MetaState>> = slots.iter().map(|s| MetaState::decode(s)).collect();
        let blank = |s: &[u8]| s.iter().all(|&b| b == 0);
        let corrupt = |offset: u64, reason| Error::Corrupt { file: name.into(), offset, reason };
        match (&decoded[..], &slots[..]) {
            // Nothing saved yet.
            (_, [a, b]) if blank(a) && blank(b) => Ok(MetaState::default()),
            (_, [_, b]) if blank(b) => Err(corrupt(
                SLOT_LEN as u64,
                "meta slot 1 (written first) is blank beside a written slot 0",
            )),
            // The very first save was the write in flight.
            ([None, None], [a, _]) if blank(a) => Ok(MetaState::default()),
            ([None, None], _) => Err(corrupt(0, "both meta slots are damaged")),
            _ => Ok(decoded.into_iter().flatten().max_by_key(|m| m.seq).unwrap_or_default()),
        }
    }

    /// Byte offset of the slot this state's `seq` is written to.
    pub fn slot_offset(&self) -> u64 {
        (self.seq % 2) * SLOT_LEN as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_and_the_newest_wins() {
        let a = MetaState {
            seq: 1,
            vote: Some(vec![1, 2, 3]),
            committed: None,
            purged: Some(vec![9]),
            purged_index: Some(7),
            purged_batch: 3,
            committed_index: Some(5),
        };
        let b = MetaState { seq: 2, vote: Some(vec![4]), ..a.clone() };
        assert_eq!(MetaState::decode(&a.encode().unwrap()), Some(a.clone()));
        let mut file = vec![0u8; FILE_LEN as usize];
        file[a.slot_offset() as usize..][..SLOT_LEN].copy_from_slice(&a.encode().unwrap());
        assert_eq!(MetaState::recover(&file, "m").unwrap(), a);
        file[b.slot_offset() as usize..][..SLOT_LEN].copy_from_slice(&b.encode().unwrap());
        assert_eq!(MetaState::recover(&file, "m").unwrap(), b);
        // A torn save of slot b leaves a.
        file[b.slot_offset() as usize + 100] ^= 1;
        assert_eq!(MetaState::recover(&file, "m").unwrap(), a);
        assert_eq!(
            MetaState::recover(&vec![0u8; FILE_LEN as usize], "m").unwrap(),
            MetaState::default()
        );
        let mut junk = vec![0u8; FILE_LEN as usize];
        junk[5000] = 1;
        assert_eq!(
            MetaState::recover(&junk, "m").unwrap(),
            MetaState::default(),
            "a torn first save"
        );
        junk[10] = 1;
        assert!(MetaState::recover(&junk, "m").is_err(), "two damaged slots are damage");
    }

    fn file_with(slot0: Option<&[u8]>, slot1: Option<&[u8]>) -> Vec<u8> {
        let mut file = vec![0u8; FILE_LEN as usize];
        if let Some(b) = slot0 {
            file[..SLOT_LEN].copy_from_slice(b);
        }
        if let Some(b) = slot1 {
            file[SLOT_LEN..].copy_from_slice(b);
        }
        file
    }

    #[test]
    fn a_blank_slot_beside_a_damaged_one_is_a_torn_first_save_only_in_slot_order() {
        let first = MetaState { seq: 1, vote: Some(vec![7]), ..MetaState::default() };
        assert_eq!(first.slot_offset(), SLOT_LEN as u64, "the first save goes to slot 1");
        let second = MetaState { seq: 2, vote: Some(vec![8]), ..first.clone() };
        let (one, two) = (first.encode().unwrap(), second.encode().unwrap());
        let mut torn = one;
        torn[3000..].fill(0xEE);
        // The first save, whole or torn, beside a blank slot 0.
        assert_eq!(MetaState::recover(&file_with(None, Some(&one)), "m").unwrap(), first);
        assert_eq!(
            MetaState::recover(&file_with(None, Some(&torn)), "m").unwrap(),
            MetaState::default()
        );
        // Slot 0 is written only after slot 1 held the first save: a blank slot 1 beside a
        // written slot 0 (damaged or valid) was erased, and the newest save may have been in it.
        let mut damaged = two;
        damaged[100] ^= 1;
        for slot0 in [&damaged, &two] {
            let e = MetaState::recover(&file_with(Some(slot0), None), "m").unwrap_err();
            assert!(matches!(e, Error::Corrupt { offset: 4096, .. }), "{e:?}");
        }
        assert_eq!(MetaState::recover(&file_with(Some(&two), Some(&one)), "m").unwrap(), second);
        assert_eq!(MetaState::recover(&file_with(Some(&damaged), Some(&one)), "m").unwrap(), first);
    }
}
