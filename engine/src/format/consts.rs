//! Constants of format v1 that several regions share (FORMAT.md, "Conventions").

use std::fmt;

/// The format version this build writes and the highest one it reads.
pub const FORMAT_VERSION: u32 = 1;

/// Bytes of one superblock slot. Slot A is at byte 0, slot B at byte 4096, whatever the
/// block size.
pub const SUPERBLOCK_LEN: usize = 4096;

/// Both superblock slots together.
pub const SUPERBLOCKS_LEN: u64 = 2 * SUPERBLOCK_LEN as u64;

/// Smallest and largest block sizes (powers of two).
pub const MIN_BLOCK_SIZE: u32 = 4096;
pub const MAX_BLOCK_SIZE: u32 = 65536;

/// The sector that the fault model and torn-write reasoning use: writes tear at this grain.
pub const SECTOR_LEN: usize = 512;

/// Members in the superblock's member table (only member 0 is used in v1).
pub const MAX_MEMBERS: usize = 16;

/// A member's capacity is a multiple of this many blocks, so no bitmap word spans members.
pub const MEMBER_ALIGN_BLOCKS: u64 = 64;

/// Longest directory entry name, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// Longest attribute key, in bytes.
pub const MAX_ATTR_KEY_LEN: usize = 255;

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;

/// Largest file size, in bytes (logical block numbers stay far from u64 overflow).
pub const MAX_FILE_SIZE: u64 = 1 << 52;

/// A 128-bit identifier (volume and member UUIDs), stored as 16 raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// A random (version 4) UUID from the OS's random source.
    pub fn random() -> std::io::Result<Uuid> {
        let mut bytes = [0u8; 16];
        getrandom(&mut bytes)?;
        bytes[6] = (bytes[6] & 0x0F) | 0x40;
        bytes[8] = (bytes[8] & 0x3F) | 0x80;
        Ok(Uuid(bytes))
    }

    /// Whether this is the all-zero UUID (no volume, or an unset member field).
    pub fn is_nil(&self) -> bool {
        self.0 == [0; 16]
    }
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
