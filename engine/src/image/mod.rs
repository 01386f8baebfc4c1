//! The checkpoint image: every table of the namespace as chains of metadata blocks, rooted in
//! one root block that the superblock points to (FORMAT.md, "Image").
//!
//! `writer` turns the dirty part of the in-memory tables into new blocks (copy-on-write);
//! `reader` walks the chains from the superblock's root reference, verifying every checksum
//! link, and rebuilds the namespace, refusing anything that is not a valid tree.

pub mod reader;
pub mod writer;

// Root block payload, after the 40-byte metadata block header.
pub const NEXT_INO_AT: usize = crate::chain::PAYLOAD_AT;
pub const NEXT_ATTR_ID_AT: usize = NEXT_INO_AT + 8;
pub const TABLE_ROOTS_AT: usize = NEXT_ATTR_ID_AT + 8;
pub const TABLE_ROOT_LEN: usize = 32;
pub const ROOT_RESERVED_AT: usize = TABLE_ROOTS_AT + 4 * TABLE_ROOT_LEN;
const _: () = assert!(ROOT_RESERVED_AT == 184, "FORMAT.md: the root's reserved area starts at 184");
