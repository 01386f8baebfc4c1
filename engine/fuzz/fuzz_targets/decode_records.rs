//! Metadata block headers and every record decoder on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vellum_engine::chain;
use vellum_engine::format::{checksum, consts::Uuid};
use vellum_engine::records::{AttrPart, DirentRecord, ExtentRecord, InodeRecord};
use vellum_engine::superblock::BlockRef;

fuzz_target!(|data: &[u8]| {
    let _ = InodeRecord::decode(data, 0);
    let _ = DirentRecord::decode(data, 0);
    let _ = ExtentRecord::decode(data, 0);
    let _ = AttrPart::decode(data, 0);
    if data.len() >= 4096 {
        let block = &data[..4096];
        let uuid = Uuid([7; 16]);
        // Give the header decoder a block whose checksum verifies, so it gets past it.
        let at = BlockRef { block: 42, checksum: checksum::block(42, &uuid, &block[..4092]) };
        let mut sealed = block.to_vec();
        sealed[4092..].copy_from_slice(&at.checksum.to_le_bytes());
        let _ = chain::open_block(&sealed, at, &uuid, 0);
    }
});
