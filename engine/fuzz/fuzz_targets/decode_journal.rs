//! Journal blocks and batch payloads on arbitrary bytes: the block decoder (with the checksum
//! made to verify, so the header rules are reached) and the record decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vellum_engine::format::{checksum, consts::Uuid};
use vellum_engine::journal::block::{self, CHECKSUM_AT, HEADER_LEN};
use vellum_engine::journal::record;

fuzz_target!(|data: &[u8]| {
    let _ = record::decode_batch(data, 0);
    let uuid = Uuid([7; 16]);
    let _ = block::open_block(data, 42, &uuid);
    if data.len() >= 4096 {
        let mut block = data[..4096].to_vec();
        block[..8].copy_from_slice(&block::MAGIC);
        let crc = checksum::journal(42, &uuid, &block[..CHECKSUM_AT], &block[HEADER_LEN..]);
        block[CHECKSUM_AT..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        if let Ok(Some(view)) = block::open_block(&block, 42, &uuid) {
            let _ = record::decode_batch(view.payload, 0);
        }
    }
});
