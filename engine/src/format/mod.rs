//! Byte-level building blocks of format v1: bounds-checked little-endian codecs, the seeded
//! crc32c checksum, and the constants every region shares (FORMAT.md, "Conventions").

pub mod checksum;
pub mod codec;
pub mod consts;
