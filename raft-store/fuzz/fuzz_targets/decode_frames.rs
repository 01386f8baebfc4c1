//! Frame and segment-header decoders on arbitrary bytes, in every segment format and at any
//! offset: they return a verdict, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vellum_raft_store::log::internals::{Parsed, Seal, SegmentHeader, parse};

fuzz_target!(|data: &[u8]| {
    let (offset, salt) = match data {
        [a, b, rest @ ..] if rest.len() >= 8 => {
            let mut s = [0u8; 8];
            s.copy_from_slice(&rest[..8]);
            (u64::from(*a) * 8 + u64::from(*b) * 4096, u64::from_le_bytes(s))
        }
        _ => (4096, 0),
    };
    for version in [1, 2, 3, 4, 5, 6, 7, 8] {
        if let Parsed::Valid { header, len } = parse(data, Seal { salt, version }, offset) {
            assert!(len <= data.len(), "a valid frame lies inside its buffer");
            assert_eq!(len % 8, 0);
            assert!(header.payload_len as usize + Seal { salt, version }.header_len() <= len);
        }
    }
    let _ = SegmentHeader::decode(data, "fuzz");
});
