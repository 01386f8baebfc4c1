//! The fixed-length metadata records of format v1 (FORMAT.md, "Records").
//!
//! Each record starts with a non-zero `u16` tag; an all-zero slot is free, and a free slot with
//! any non-zero byte refuses the image. Unknown tags and flag bits refuse (unknown means
//! refuse, never misread). Decoders return `Err` on every input they do not accept.

use crate::error::Region;
use crate::error::{Error, Result, Unsupported};
use crate::format::codec::{Reader, Writer};
use crate::format::consts::{MAX_ATTR_KEY_LEN, MAX_FILE_SIZE, MAX_NAME_LEN};

/// Bytes of payload in one attribute record.
pub const ATTR_CHUNK_LEN: usize = 96;
/// Bytes reserved for a name inside a directory entry record.
pub const DIRENT_NAME_LEN: usize = 264;
const _: () = assert!(DIRENT_NAME_LEN >= MAX_NAME_LEN);
const _: () = assert!(24 + DIRENT_NAME_LEN == 288);
const _: () = assert!(32 + ATTR_CHUNK_LEN == 128);

/// Block addresses keep bits 48..63 for the member index (0 in v1).
pub const MEMBER_SHIFT: u32 = 48;

fn reader(bytes: &[u8], offset: u64) -> Reader<'_> {
    Reader::new(bytes, Region::Image, offset)
}

fn unknown(table: &'static str, tag: u64) -> Error {
    Error::Unsupported(Unsupported::RecordKind { table, tag })
}

/// A free slot must be all zeros.
pub fn check_free(bytes: &[u8], table: &'static str) -> Result<()> {
    if bytes.iter().all(|&b| b == 0) {
        Ok(())
    } else {
        Err(Error::Unsupported(Unsupported::ReservedNonZero { field: table }))
    }
}

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InodeKind {
    File = 1,
    Directory = 2,
}

/// Inode record: 128 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeRecord {
    pub kind: InodeKind,
    pub ino: u64,
    pub size: u64,
    pub created_ns: u64,
    pub modified_ns: u64,
}

impl InodeRecord {
    pub fn encode_into(&self, out: &mut [u8]) {
        let mut w = Writer::new(out);
        w.u16_le(self.kind as u16);
        w.u16_le(0); // flags: none defined in v1
        w.u32_le(0);
        w.u64_le(self.ino);
        w.u64_le(self.size);
        w.u64_le(self.created_ns);
        w.u64_le(self.modified_ns);
        w.zeros(128 - 40);
    }

    pub fn decode(bytes: &[u8], offset: u64) -> Result<InodeRecord> {
        let mut r = reader(bytes, offset);
        let kind = match r.u16_le()? {
            1 => InodeKind::File,
            2 => InodeKind::Directory,
            tag => return Err(unknown("inode", u64::from(tag))),
        };
        let flags = r.u16_le()?;
        if flags != 0 {
            return Err(unknown("inode flags", u64::from(flags)));
        }
        r.expect_zero(4, "inode")?;
        let ino = r.u64_le()?;
        let size = r.u64_le()?;
        if ino == 0 {
            return Err(r.bad_value("ino", 0));
        }
        if size > MAX_FILE_SIZE || (kind == InodeKind::Directory && size != 0) {
            return Err(r.bad_value("size", size));
        }
        let created_ns = r.u64_le()?;
        let modified_ns = r.u64_le()?;
        r.expect_zero(128 - 40, "inode")?;
        Ok(InodeRecord { kind, ino, size, created_ns, modified_ns })
    }
}

/// Directory entry record: 288 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirentRecord {
    pub parent: u64,
    pub child: u64,
    pub name: Vec<u8>,
}

impl DirentRecord {
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(
            !self.name.is_empty() && self.name.len() <= MAX_NAME_LEN,
            "name of {} bytes",
            self.name.len()
        );
        let mut w = Writer::new(out);
        w.u16_le(1);
        w.u16_le(self.name.len() as u16);
        w.u32_le(0);
        w.u64_le(self.parent);
        w.u64_le(self.child);
        w.put(&self.name);
        w.zeros(DIRENT_NAME_LEN - self.name.len());
    }

    pub fn decode(bytes: &[u8], offset: u64) -> Result<DirentRecord> {
        let mut r = reader(bytes, offset);
        let tag = r.u16_le()?;
        if tag != 1 {
            return Err(unknown("dirent", u64::from(tag)));
        }
        let name_len = usize::from(r.u16_le()?);
        if name_len == 0 || name_len > MAX_NAME_LEN {
            return Err(r.bad_value("name_len", name_len as u64));
        }
        r.expect_zero(4, "dirent")?;
        let parent = r.u64_le()?;
        let child = r.u64_le()?;
        let name = r.bytes(name_len)?.to_vec();
        if name.iter().any(|&b| b == b'/' || b == 0) || name == b"." || name == b".." {
            return Err(r.bad_value("name", name_len as u64));
        }
        r.expect_zero(DIRENT_NAME_LEN - name_len, "dirent name padding")?;
        Ok(DirentRecord { parent, child, name })
    }
}

/// Extent record: 32 bytes. Maps `len` blocks of a file, from logical block `logical`, to
/// the member blocks starting at `physical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentRecord {
    pub ino: u64,
    pub logical: u64,
    pub physical: u64,
    pub len: u32,
}

impl ExtentRecord {
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(self.len > 0, "empty extent");
        assert_eq!(self.physical >> MEMBER_SHIFT, 0, "v1 addresses member 0 only");
        let mut w = Writer::new(out);
        w.u16_le(1);
        w.u16_le(0);
        w.u32_le(self.len);
        w.u64_le(self.ino);
        w.u64_le(self.logical);
        w.u64_le(self.physical);
    }

    pub fn decode(bytes: &[u8], offset: u64) -> Result<ExtentRecord> {
        let mut r = reader(bytes, offset);
        let tag = r.u16_le()?;
        if tag != 1 {
            return Err(unknown("extent", u64::from(tag)));
        }
        let flags = r.u16_le()?;
        if flags != 0 {
            return Err(unknown("extent flags", u64::from(flags)));
        }
        let len = r.u32_le()?;
        let ino = r.u64_le()?;
        let logical = r.u64_le()?;
        let physical = r.u64_le()?;
        if len == 0 {
            return Err(r.bad_value("extent len", 0));
        }
        if physical >> MEMBER_SHIFT != 0 {
            return Err(Error::Unsupported(Unsupported::MultiCarrier {
                index: (physical >> MEMBER_SHIFT) as u32,
                count: 1,
            }));
        }
        if logical.checked_add(u64::from(len)).is_none_or(|end| end > MAX_FILE_SIZE / 4096) {
            return Err(r.bad_value("extent logical", logical));
        }
        Ok(ExtentRecord { ino, logical, physical, len })
    }
}

/// One part of an attribute record chain: 128 bytes. The parts of one attribute (same `ino`
/// and `attr_id`, parts 0..n) carry the key followed by the value, 96 bytes at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrPart {
    pub ino: u64,
    pub attr_id: u64,
    pub part: u32,
    /// Key and value lengths: set on part 0, zero on continuations.
    pub key_len: u16,
    pub value_len: u32,
    pub chunk: Vec<u8>,
}

impl AttrPart {
    pub fn encode_into(&self, out: &mut [u8]) {
        assert!(self.chunk.len() <= ATTR_CHUNK_LEN);
        let mut w = Writer::new(out);
        w.u16_le(if self.part == 0 { 1 } else { 2 });
        w.u16_le(self.key_len);
        w.u32_le(self.part);
        w.u64_le(self.ino);
        w.u64_le(self.attr_id);
        w.u32_le(self.value_len);
        w.u16_le(self.chunk.len() as u16);
        w.u16_le(0);
        w.put(&self.chunk);
        w.zeros(ATTR_CHUNK_LEN - self.chunk.len());
    }

    pub fn decode(bytes: &[u8], offset: u64) -> Result<AttrPart> {
        let mut r = reader(bytes, offset);
        let tag = r.u16_le()?;
        let key_len = r.u16_le()?;
        let part = r.u32_le()?;
        let ino = r.u64_le()?;
        let attr_id = r.u64_le()?;
        let value_len = r.u32_le()?;
        let chunk_len = usize::from(r.u16_le()?);
        r.expect_zero(2, "attribute")?;
        match (tag, part) {
            (1, 0) => {
                if key_len == 0 || usize::from(key_len) > MAX_ATTR_KEY_LEN {
                    return Err(r.bad_value("key_len", u64::from(key_len)));
                }
            }
            (2, p) if p > 0 => {
                if key_len != 0 || value_len != 0 {
                    return Err(Error::Unsupported(Unsupported::ReservedNonZero {
                        field: "attribute continuation",
                    }));
                }
            }
            (1 | 2, p) => return Err(r.bad_value("attribute part", u64::from(p))),
            (t, _) => return Err(unknown("attribute", u64::from(t))),
        }
        if chunk_len == 0 || chunk_len > ATTR_CHUNK_LEN {
            return Err(r.bad_value("chunk_len", chunk_len as u64));
        }
        let chunk = r.bytes(chunk_len)?.to_vec();
        r.expect_zero(ATTR_CHUNK_LEN - chunk_len, "attribute padding")?;
        Ok(AttrPart { ino, attr_id, part, key_len, value_len, chunk })
    }

    /// Splits `key ‖ value` into parts.
    pub fn split(ino: u64, attr_id: u64, key: &[u8], value: &[u8]) -> Vec<AttrPart> {
        let mut stream = Vec::with_capacity(key.len() + value.len());
        stream.extend_from_slice(key);
        stream.extend_from_slice(value);
        stream
            .chunks(ATTR_CHUNK_LEN)
            .enumerate()
            .map(|(i, chunk)| AttrPart {
                ino,
                attr_id,
                part: i as u32,
                key_len: if i == 0 { key.len() as u16 } else { 0 },
                value_len: if i == 0 { value.len() as u32 } else { 0 },
                chunk: chunk.to_vec(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut buf = [0u8; 288];
        let i = InodeRecord {
            kind: InodeKind::File,
            ino: 9,
            size: 12345,
            created_ns: 1,
            modified_ns: 2,
        };
        i.encode_into(&mut buf[..128]);
        assert_eq!(InodeRecord::decode(&buf[..128], 0).unwrap(), i);
        let d = DirentRecord { parent: 1, child: 9, name: b"caf\xc3\xa9 \x01 name".to_vec() };
        d.encode_into(&mut buf);
        assert_eq!(DirentRecord::decode(&buf, 0).unwrap(), d);
        let e = ExtentRecord { ino: 9, logical: 3, physical: 1000, len: 7 };
        e.encode_into(&mut buf[..32]);
        assert_eq!(ExtentRecord::decode(&buf[..32], 0).unwrap(), e);
        for p in AttrPart::split(9, 4, b"key", &[5u8; 200]) {
            p.encode_into(&mut buf[..128]);
            assert_eq!(AttrPart::decode(&buf[..128], 0).unwrap(), p);
        }
    }

    #[test]
    fn unknown_tags_and_flags_refuse() {
        let mut buf = [0u8; 128];
        InodeRecord { kind: InodeKind::File, ino: 9, size: 1, created_ns: 0, modified_ns: 0 }
            .encode_into(&mut buf);
        buf[0] = 7;
        assert!(matches!(InodeRecord::decode(&buf, 0), Err(Error::Unsupported(_))));
        buf[0] = 1;
        buf[2] = 1;
        assert!(matches!(InodeRecord::decode(&buf, 0), Err(Error::Unsupported(_))));
        buf[2] = 0;
        buf[100] = 1;
        assert!(matches!(InodeRecord::decode(&buf, 0), Err(Error::Unsupported(_))));
    }

    #[test]
    fn bad_names_refuse() {
        let mut buf = [0u8; 288];
        DirentRecord { parent: 1, child: 2, name: b"ok".to_vec() }.encode_into(&mut buf);
        buf[24] = b'/';
        assert!(DirentRecord::decode(&buf, 0).is_err());
        buf[24] = b'.';
        buf[25] = b'.';
        assert!(DirentRecord::decode(&buf, 0).is_err());
    }
}
