//! Recovery's segment scan on a segment whose frames are partly valid: the input's first
//! bytes choose how many sealed frames to lay down, the rest is XORed over the segment, so
//! the scan meets real frames, torn ones, skip frames, votes, purges and garbage. It returns a
//! scan or an error, never panics, and every frame it reports lies inside the segment.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vellum_raft_store::log::internals::{
    ALIGN, FrameHeader, FrameKind, SEGMENT_HEADER_LEN, Seal, encode, scan_segment,
};

const SEGMENT: usize = 64 << 10;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let seal = Seal { salt: 0x5EA1, version: 1 + n % 9 };
    let mut seg = vec![0u8; SEGMENT_HEADER_LEN];
    let mut index = 1;
    for batch in 1..=u64::from(n % 12) {
        for _ in 0..(1 + batch % 3) {
            let kind = match index % 7 {
                0 => FrameKind::Truncate,
                // Format 7 on: rewrite copies among the entries.
                5 if seal.version >= 7 => FrameKind::Rewrite,
                // Format 8 on: votes too.
                3 if seal.version >= 8 => FrameKind::Vote,
                // Format 9 on: purge points too.
                6 if seal.version >= 9 => FrameKind::Purge,
                _ => FrameKind::Entry,
            };
            let payload = vec![index as u8; (index as usize * 37) % 900];
            // Format 6 on: frames of three groups interleaved.
            let group = if seal.version >= 6 { index % 3 } else { 0 };
            let payload_len = payload.len() as u32;
            let term = if matches!(kind, FrameKind::Vote | FrameKind::Purge) { 0 } else { 1 };
            let h = FrameHeader { kind, payload_len, index, term, batch, group };
            let at = seg.len() as u64;
            encode(&mut seg, seal, at, &h, &payload);
            index += 1;
        }
        seg.resize(seg.len().next_multiple_of(ALIGN), 0);
    }
    seg.resize(SEGMENT, 0);
    for (i, b) in rest.iter().enumerate() {
        // Spread the damage over the frame area.
        let at = SEGMENT_HEADER_LEN + (i * 131) % (SEGMENT - SEGMENT_HEADER_LEN);
        seg[at] ^= b;
    }
    if let Ok(scan) = scan_segment(&seg, seal, "fuzz", 0, &[]) {
        for f in &scan.frames {
            assert!(f.offset as usize + f.len as usize <= SEGMENT);
        }
        assert!(scan.next_write as usize <= SEGMENT + ALIGN);
    }
});
