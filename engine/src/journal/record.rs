//! Journal records: one per logical operation of the namespace (FORMAT.md, "Journal records").
//!
//! A record names what the live path did in the terms replay needs to do it again on the
//! checkpoint's namespace: inode numbers and attribute ids as the live path assigned them
//! (replay must not invent other ones), paths for removal and rename (resolved again), and the
//! physical run an extent maps. Encoding: a tag byte, then fixed little-endian fields, then
//! length-prefixed byte strings. A batch's payload is a `u32` record count followed by that
//! many records and nothing else.
//!
//! Decoding never panics and never allocates more than the input holds: every length is
//! checked against the bytes left before anything is copied.

use crate::error::{Corruption, Error, Region, Result, Unsupported};
use crate::format::codec::Reader;
use crate::records::InodeKind;

/// One logical operation, as recorded by the live path and replayed at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `Namespace::create`: a file or directory `name` in `parent`, numbered `ino`.
    Create { parent: u64, ino: u64, kind: InodeKind, now_ns: u64, name: Vec<u8> },
    /// `Namespace::remove` of `path`.
    Remove { now_ns: u64, path: Vec<u8> },
    /// `Namespace::rename` of `from` to `to`.
    Rename { now_ns: u64, from: Vec<u8>, to: Vec<u8> },
    /// `Namespace::set_size`.
    SetSize { ino: u64, size: u64, now_ns: u64 },
    /// `Namespace::attach_extent`: logical blocks `[logical, logical + len)` of `ino` map the
    /// physical run `[start, start + len)`, whose data reached the carrier first.
    Attach { ino: u64, logical: u64, start: u64, len: u64 },
    /// `Namespace::truncate_blocks`: unmap every block of `ino` at or past `keep`.
    Truncate { ino: u64, keep: u64 },
    /// `Namespace::set_attr`, with the attribute id the live path assigned.
    SetAttr { ino: u64, id: u64, key: Vec<u8>, value: Vec<u8> },
    /// `Namespace::remove_attr`.
    RemoveAttr { ino: u64, key: Vec<u8> },
}

// Record tags (FORMAT.md's table repeats them).
const CREATE: u8 = 1;
const REMOVE: u8 = 2;
const RENAME: u8 = 3;
const SET_SIZE: u8 = 4;
const ATTACH: u8 = 5;
const TRUNCATE: u8 = 6;
const SET_ATTR: u8 = 7;
const REMOVE_ATTR: u8 = 8;

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    let len = u32::try_from(b.len()).expect("byte strings of records fit u32 (checked upstream)");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(b);
}

impl Op {
    /// Appends the encoding of this record to `out` (exactly [`Op::encoded_len`] bytes:
    /// asserted, since a record shorter or longer than its length says would shift every
    /// record after it in the batch).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let before = out.len();
        self.encode_fields(out);
        assert_eq!(out.len() - before, self.encoded_len(), "record {self:?} encoded wrong");
    }

    fn encode_fields(&self, out: &mut Vec<u8>) {
        match self {
            Op::Create { parent, ino, kind, now_ns, name } => {
                out.push(CREATE);
                put_u64(out, *parent);
                put_u64(out, *ino);
                out.push(*kind as u8);
                put_u64(out, *now_ns);
                put_bytes(out, name);
            }
            Op::Remove { now_ns, path } => {
                out.push(REMOVE);
                put_u64(out, *now_ns);
                put_bytes(out, path);
            }
            Op::Rename { now_ns, from, to } => {
                out.push(RENAME);
                put_u64(out, *now_ns);
                put_bytes(out, from);
                put_bytes(out, to);
            }
            Op::SetSize { ino, size, now_ns } => {
                out.push(SET_SIZE);
                put_u64(out, *ino);
                put_u64(out, *size);
                put_u64(out, *now_ns);
            }
            Op::Attach { ino, logical, start, len } => {
                out.push(ATTACH);
                for v in [ino, logical, start, len] {
                    put_u64(out, *v);
                }
            }
            Op::Truncate { ino, keep } => {
                out.push(TRUNCATE);
                put_u64(out, *ino);
                put_u64(out, *keep);
            }
            Op::SetAttr { ino, id, key, value } => {
                out.push(SET_ATTR);
                put_u64(out, *ino);
                put_u64(out, *id);
                put_bytes(out, key);
                put_bytes(out, value);
            }
            Op::RemoveAttr { ino, key } => {
                out.push(REMOVE_ATTR);
                put_u64(out, *ino);
                put_bytes(out, key);
            }
        }
    }

    /// Bytes of the encoding.
    pub fn encoded_len(&self) -> usize {
        let strings = |bs: &[&[u8]]| bs.iter().map(|b| 4 + b.len()).sum::<usize>();
        1 + match self {
            Op::Create { name, .. } => 8 + 8 + 1 + 8 + strings(&[name]),
            Op::Remove { path, .. } => 8 + strings(&[path]),
            Op::Rename { from, to, .. } => 8 + strings(&[from, to]),
            Op::SetSize { .. } => 24,
            Op::Attach { .. } => 32,
            Op::Truncate { .. } => 16,
            Op::SetAttr { key, value, .. } => 16 + strings(&[key, value]),
            Op::RemoveAttr { key, .. } => 8 + strings(&[key]),
        }
    }
}

/// The payload of a batch of `ops`.
pub fn encode_batch(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + ops.iter().map(Op::encoded_len).sum::<usize>());
    let count = u32::try_from(ops.len()).expect("fewer than 2^32 records in one batch");
    out.extend_from_slice(&count.to_le_bytes());
    for op in ops {
        op.encode(&mut out);
    }
    out
}

fn string(r: &mut Reader<'_>) -> Result<Vec<u8>> {
    let len = r.u32_le()? as usize;
    Ok(r.bytes(len)?.to_vec())
}

fn decode_op(r: &mut Reader<'_>) -> Result<Op> {
    let tag = r.u8()?;
    Ok(match tag {
        CREATE => {
            let parent = r.u64_le()?;
            let ino = r.u64_le()?;
            let kind = match r.u8()? {
                1 => InodeKind::File,
                2 => InodeKind::Directory,
                other => {
                    return Err(Error::Unsupported(Unsupported::RecordKind {
                        table: "journal create",
                        tag: u64::from(other),
                    }));
                }
            };
            let now_ns = r.u64_le()?;
            Op::Create { parent, ino, kind, now_ns, name: string(r)? }
        }
        REMOVE => Op::Remove { now_ns: r.u64_le()?, path: string(r)? },
        RENAME => Op::Rename { now_ns: r.u64_le()?, from: string(r)?, to: string(r)? },
        SET_SIZE => Op::SetSize { ino: r.u64_le()?, size: r.u64_le()?, now_ns: r.u64_le()? },
        ATTACH => Op::Attach {
            ino: r.u64_le()?,
            logical: r.u64_le()?,
            start: r.u64_le()?,
            len: r.u64_le()?,
        },
        TRUNCATE => Op::Truncate { ino: r.u64_le()?, keep: r.u64_le()? },
        SET_ATTR => {
            Op::SetAttr { ino: r.u64_le()?, id: r.u64_le()?, key: string(r)?, value: string(r)? }
        }
        REMOVE_ATTR => Op::RemoveAttr { ino: r.u64_le()?, key: string(r)? },
        other => {
            return Err(Error::Unsupported(Unsupported::RecordKind {
                table: "journal",
                tag: u64::from(other),
            }));
        }
    })
}

/// Decodes a batch payload; `offset` locates it in errors. Refuses trailing bytes.
pub fn decode_batch(payload: &[u8], offset: u64) -> Result<Vec<Op>> {
    let mut r = Reader::new(payload, Region::Journal, offset);
    let count = r.u32_le()?;
    // Every record is at least 17 bytes: a count past that is damage, not a reason to
    // reserve memory.
    let mut ops = Vec::with_capacity((count as usize).min(payload.len() / 17));
    for _ in 0..count {
        ops.push(decode_op(&mut r)?);
    }
    if r.position() != payload.len() {
        return Err(Error::corrupt(
            Region::Journal,
            offset + r.position() as u64,
            Corruption::BadValue {
                field: "batch trailing bytes",
                value: (payload.len() - r.position()) as u64,
            },
        ));
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..64)
    }

    fn op() -> impl Strategy<Value = Op> {
        let kind = prop_oneof![Just(InodeKind::File), Just(InodeKind::Directory)];
        prop_oneof![
            (any::<u64>(), any::<u64>(), kind, any::<u64>(), bytes()).prop_map(
                |(parent, ino, kind, now_ns, name)| Op::Create { parent, ino, kind, now_ns, name }
            ),
            (any::<u64>(), bytes()).prop_map(|(now_ns, path)| Op::Remove { now_ns, path }),
            (any::<u64>(), bytes(), bytes())
                .prop_map(|(now_ns, from, to)| Op::Rename { now_ns, from, to }),
            (any::<u64>(), any::<u64>(), any::<u64>())
                .prop_map(|(ino, size, now_ns)| Op::SetSize { ino, size, now_ns }),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>())
                .prop_map(|(ino, logical, start, len)| Op::Attach { ino, logical, start, len }),
            (any::<u64>(), any::<u64>()).prop_map(|(ino, keep)| Op::Truncate { ino, keep }),
            (any::<u64>(), any::<u64>(), bytes(), bytes())
                .prop_map(|(ino, id, key, value)| Op::SetAttr { ino, id, key, value }),
            (any::<u64>(), bytes()).prop_map(|(ino, key)| Op::RemoveAttr { ino, key }),
        ]
    }

    proptest! {
        #[test]
        fn batches_round_trip(ops in proptest::collection::vec(op(), 0..20)) {
            let payload = encode_batch(&ops);
            prop_assert_eq!(payload.len(), 4 + ops.iter().map(Op::encoded_len).sum::<usize>());
            prop_assert_eq!(decode_batch(&payload, 0).unwrap(), ops);
        }

        #[test]
        fn damaged_payloads_never_panic(ops in proptest::collection::vec(op(), 1..8),
                                        cut in any::<usize>(), flip in any::<(usize, u8)>()) {
            let mut payload = encode_batch(&ops);
            let at = flip.0 % payload.len();
            payload[at] ^= flip.1;
            let _ = decode_batch(&payload, 0);
            let _ = decode_batch(&payload[..cut % payload.len()], 0);
        }

        #[test]
        fn random_bytes_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_batch(&payload, 0);
        }
    }

    #[test]
    fn unknown_tags_and_trailing_bytes_refuse() {
        let mut p = encode_batch(&[Op::Truncate { ino: 2, keep: 0 }]);
        p[4] = 99;
        assert!(matches!(
            decode_batch(&p, 0),
            Err(Error::Unsupported(Unsupported::RecordKind { tag: 99, .. }))
        ));
        let mut p = encode_batch(&[Op::Truncate { ino: 2, keep: 0 }]);
        p.push(0);
        assert!(matches!(decode_batch(&p, 0), Err(Error::Corrupt { .. })));
    }
}
