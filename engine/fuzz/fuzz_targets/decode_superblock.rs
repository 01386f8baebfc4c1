//! Superblock decoding on arbitrary bytes, in both slots, must return, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vellum_engine::superblock::Superblock;

fuzz_target!(|data: &[u8]| {
    let mut block = [0u8; 4096];
    let n = data.len().min(4096);
    block[..n].copy_from_slice(&data[..n]);
    // Seal the checksum for slot 0 on odd first bytes, so the rules behind it get reached.
    if data.first().is_some_and(|b| b & 1 == 1) {
        block[..8].copy_from_slice(b"VELLUMSB");
        let mut uuid = vellum_engine::format::consts::Uuid::default();
        uuid.0.copy_from_slice(&block[56..72]);
        let crc = vellum_engine::format::checksum::superblock(0, &uuid, &block[..4092]);
        block[4092..].copy_from_slice(&crc.to_le_bytes());
    }
    for slot in 0..2 {
        if let Ok(sb) = Superblock::decode(&block, slot) {
            // Whatever decodes must re-encode to bytes that decode to the same value.
            assert_eq!(Superblock::decode(&sb.encode(slot), slot).ok(), Some(sb));
        }
    }
    let _ = Superblock::decode(data, 0);
});
