//! Who a store belongs to, and which incarnation of each peer it has spoken with
//! (docs/RAFT-LOG.md, "Member identity").
//!
//! A Raft member must never come back without its state: a member whose volume was lost,
//! replaced or left unmounted would vote a second time in a term and count toward quorums
//! for entries it no longer holds. So every store gets an *incarnation*, a random 128-bit id
//! written once when the store is first used for a node (`DIR/member`), and every member
//! keeps a *peer book* (`DIR/peers`): the incarnation of each peer it has exchanged a Raft
//! RPC with, learned on first contact and made durable before that contact is acted on.
//! A peer that presents another incarnation than the book holds lost its state (or is a
//! second process under its id): its requests and answers are refused. See the node's Raft
//! RPC (`vellum serve`) for the checks on the wire.
//!
//! The book also keeps the ids *removed* from the cluster (etcd's rule: a removed id never
//! comes back): the node refuses their Raft RPCs and the API refuses to add them again.
//!
//! Invariants: a store's identity never changes once written (opening it for another node
//! id refuses); a peer's recorded incarnation never changes; a record is durable before the
//! caller uses what the peer said; a removed id stays removed (the set only grows).
//!
//! Format (little endian; both files are rewritten whole):
//! - `member`: 4096 bytes: magic `VLMMEMB1`, node id u64, incarnation 16 bytes, created
//!   (unix ns) u64, zeros, crc32c of the bytes before it (last 4 bytes).
//! - `peers`: magic `VLMPEER1`, count u32, then `count` records of node id u64 +
//!   incarnation 16 bytes, then crc32c of everything before it; written as `peers.new`, renamed
//!   over `peers` and committed.
//! - `removed` (absent in books written before it existed: none removed): magic `VLMRMVD1`,
//!   count u32, then `count` node ids u64 (ascending), then crc32c of everything before it;
//!   written as `removed.new`, renamed over `removed` and committed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Mutex, RwLock};

use vellum_engine::Uuid;
use vellum_engine::Volume;

use crate::error::{Error, Result};

const MEMBER_MAGIC: [u8; 8] = *b"VLMMEMB1";
const PEERS_MAGIC: [u8; 8] = *b"VLMPEER1";
const REMOVED_MAGIC: [u8; 8] = *b"VLMRMVD1";
const MEMBER_LEN: usize = 4096;
const NODE_AT: usize = 8;
const INCARNATION_AT: usize = NODE_AT + 8;
const CREATED_AT: usize = INCARNATION_AT + 16;
const MEMBER_CRC_AT: usize = MEMBER_LEN - 4;
const _: () = assert!(CREATED_AT + 8 <= MEMBER_CRC_AT);
const PEER_RECORD_LEN: usize = 24;
/// More peers than any cluster has; a larger count in the file is damage.
const MAX_PEERS: usize = 65_536;

/// A store's incarnation: random, written once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Incarnation(pub [u8; 16]);

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Incarnation {
    type Err = &'static str;

    fn from_str(s: &str) -> std::result::Result<Incarnation, &'static str> {
        let bad = "an incarnation is 32 hexadecimal digits";
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad);
        }
        let mut out = [0u8; 16];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad)?;
        }
        Ok(Incarnation(out))
    }
}

/// The node a store belongs to, and its incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The member's node id.
    pub node_id: u64,
    /// Random, drawn when the store was created: a member that lost its state comes back
    /// with another.
    pub incarnation: Incarnation,
}

fn member_path(dir: &str) -> Vec<u8> {
    format!("{}/member", dir.trim_end_matches('/')).into_bytes()
}

fn peers_path(dir: &str, name: &str) -> Vec<u8> {
    format!("{}/{name}", dir.trim_end_matches('/')).into_bytes()
}

fn corrupt(file: &[u8], offset: u64, reason: &'static str) -> Error {
    Error::Corrupt { file: String::from_utf8_lossy(file).into_owned(), offset, reason }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Identity {
    /// Encodes the `member` file.
    pub fn encode(&self, created_unix_ns: u64) -> [u8; MEMBER_LEN] {
        let mut b = [0u8; MEMBER_LEN];
        b[..8].copy_from_slice(&MEMBER_MAGIC);
        b[NODE_AT..INCARNATION_AT].copy_from_slice(&self.node_id.to_le_bytes());
        b[INCARNATION_AT..CREATED_AT].copy_from_slice(&self.incarnation.0);
        b[CREATED_AT..CREATED_AT + 8].copy_from_slice(&created_unix_ns.to_le_bytes());
        let crc = crc32c::crc32c(&b[..MEMBER_CRC_AT]);
        b[MEMBER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the `member` file; `Ok(None)` for an empty one (a creation a power cut
    /// interrupted before its bytes were attached).
    pub fn decode(b: &[u8], file: &[u8]) -> Result<Option<Identity>> {
        if b.is_empty() {
            return Ok(None);
        }
        if b.len() != MEMBER_LEN {
            return Err(corrupt(file, 0, "a member file of the wrong size"));
        }
        if b[..7] == MEMBER_MAGIC[..7] && b[7] != MEMBER_MAGIC[7] {
            return Err(Error::Unsupported {
                file: String::from_utf8_lossy(file).into_owned(),
                what: "a member record version",
                found: u64::from(b[7]),
            });
        }
        let crc = u32::from_le_bytes([b[MEMBER_CRC_AT], b[4093], b[4094], b[4095]]);
        if b[..8] != MEMBER_MAGIC || crc32c::crc32c(&b[..MEMBER_CRC_AT]) != crc {
            return Err(corrupt(file, 0, "a damaged member record"));
        }
        if b[CREATED_AT + 8..MEMBER_CRC_AT].iter().any(|&x| x != 0) {
            return Err(corrupt(file, (CREATED_AT + 8) as u64, "non-zero reserved bytes"));
        }
        let mut inc = [0u8; 16];
        inc.copy_from_slice(&b[INCARNATION_AT..CREATED_AT]);
        Ok(Some(Identity { node_id: u64_at(b, NODE_AT), incarnation: Incarnation(inc) }))
    }

    /// The identity of the store under `dir`, if it has one.
    pub fn load(volume: &Volume, dir: &str) -> Result<Option<Identity>> {
        let path = member_path(dir);
        if !volume.exists(&path)? {
            return Ok(None);
        }
        Identity::decode(&volume.open_file(&path)?.read_to_end()?, &path)
    }

    /// Gives the store under `dir` to `node_id` with a new random incarnation, durably (one
    /// metadata commit). Refuses when it belongs to a node already.
    pub fn create(volume: &Volume, dir: &str, node_id: u64) -> Result<Identity> {
        if let Some(existing) = Identity::load(volume, dir)? {
            return Err(Error::WrongMember { volume_node: existing.node_id, asked: node_id });
        }
        let path = member_path(dir);
        if volume.exists(&path)? {
            volume.remove(&path)?; // an empty one from an interrupted creation
        }
        let uuid = Uuid::random()
            .map_err(|_| Error::Config("no randomness (/dev/urandom) for an incarnation"))?;
        let identity = Identity { node_id, incarnation: Incarnation(uuid.0) };
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        volume.create_dir_all(dir)?;
        let file = volume.create_file(&path)?;
        file.write_at(&identity.encode(created), 0)?;
        drop(file);
        volume.commit()?;
        Ok(identity)
    }

    /// The identity of the store under `dir` for `node_id`: the one it has (refusing one
    /// of another node), or a new one.
    pub fn open_or_create(volume: &Volume, dir: &str, node_id: u64) -> Result<Identity> {
        match Identity::load(volume, dir)? {
            Some(id) if id.node_id == node_id => Ok(id),
            Some(id) => Err(Error::WrongMember { volume_node: id.node_id, asked: node_id }),
            None => Identity::create(volume, dir, node_id),
        }
    }
}

/// Whether a peer's incarnation was known already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// The book held this incarnation.
    Known,
    /// First contact: recorded (durably) now.
    Recorded,
}

/// The incarnations of the peers this member has spoken with.
///
/// Lookups take a read lock for a moment; a first contact writes the book under a mutex of
/// its own (held across the volume IO) and swaps the new map in after the commit, so readers
/// on an async runtime never wait for the disk.
#[derive(Debug)]
pub struct PeerBook {
    volume: Volume,
    dir: String,
    known: RwLock<BTreeMap<u64, Incarnation>>,
    removed: RwLock<BTreeSet<u64>>,
    writing: Mutex<()>,
}

fn encode_peers(peers: &BTreeMap<u64, Incarnation>) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + PEER_RECORD_LEN * peers.len());
    b.extend_from_slice(&PEERS_MAGIC);
    b.extend_from_slice(&(peers.len() as u32).to_le_bytes());
    for (id, inc) in peers {
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&inc.0);
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes the `peers` file (never panics on its bytes).
pub fn decode_peers(b: &[u8], file: &[u8]) -> Result<BTreeMap<u64, Incarnation>> {
    if b.len() < 16 || b[..8] != PEERS_MAGIC {
        if b.len() >= 8 && b[..7] == PEERS_MAGIC[..7] {
            return Err(Error::Unsupported {
                file: String::from_utf8_lossy(file).into_owned(),
                what: "a peer book version",
                found: u64::from(b[7]),
            });
        }
        return Err(corrupt(file, 0, "a damaged peer book"));
    }
    let count = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
    if count > MAX_PEERS || b.len() != 12 + count * PEER_RECORD_LEN + 4 {
        return Err(corrupt(file, 8, "a peer book of the wrong size"));
    }
    let body = b.len() - 4;
    let crc = u32::from_le_bytes([b[body], b[body + 1], b[body + 2], b[body + 3]]);
    if crc32c::crc32c(&b[..body]) != crc {
        return Err(corrupt(file, 0, "a damaged peer book"));
    }
    let mut peers = BTreeMap::new();
    for rec in b[12..body].chunks_exact(PEER_RECORD_LEN) {
        let mut inc = [0u8; 16];
        inc.copy_from_slice(&rec[8..]);
        if peers.insert(u64_at(rec, 0), Incarnation(inc)).is_some() {
            return Err(corrupt(file, 12, "a peer appears twice in the peer book"));
        }
    }
    Ok(peers)
}

fn encode_removed(removed: &BTreeSet<u64>) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + 8 * removed.len());
    b.extend_from_slice(&REMOVED_MAGIC);
    b.extend_from_slice(&(removed.len() as u32).to_le_bytes());
    for id in removed {
        b.extend_from_slice(&id.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes the `removed` file (never panics on its bytes).
pub fn decode_removed(b: &[u8], file: &[u8]) -> Result<BTreeSet<u64>> {
    if b.len() < 16 || b[..8] != REMOVED_MAGIC {
        if b.len() >= 8 && b[..7] == REMOVED_MAGIC[..7] {
            return Err(Error::Unsupported {
                file: String::from_utf8_lossy(file).into_owned(),
                what: "a removed-ids record version",
                found: u64::from(b[7]),
            });
        }
        return Err(corrupt(file, 0, "a damaged removed-ids record"));
    }
    let count = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
    if count > MAX_PEERS || b.len() != 12 + count * 8 + 4 {
        return Err(corrupt(file, 8, "a removed-ids record of the wrong size"));
    }
    let body = b.len() - 4;
    let crc = u32::from_le_bytes([b[body], b[body + 1], b[body + 2], b[body + 3]]);
    if crc32c::crc32c(&b[..body]) != crc {
        return Err(corrupt(file, 0, "a damaged removed-ids record"));
    }
    Ok(b[12..body].chunks_exact(8).map(|rec| u64_at(rec, 0)).collect())
}

impl PeerBook {
    /// Opens the peer book of the store under `dir` (empty when there is none yet; no
    /// removed ids when the book predates them).
    pub fn open(volume: &Volume, dir: &str) -> Result<PeerBook> {
        let path = peers_path(dir, "peers");
        let known = if volume.exists(&path)? {
            decode_peers(&volume.open_file(&path)?.read_to_end()?, &path)?
        } else {
            BTreeMap::new()
        };
        let path = peers_path(dir, "removed");
        let removed = if volume.exists(&path)? {
            decode_removed(&volume.open_file(&path)?.read_to_end()?, &path)?
        } else {
            BTreeSet::new()
        };
        if !volume.info().read_only {
            let mut cleaned = false;
            for leftover in ["peers.new", "removed.new"] {
                let leftover = peers_path(dir, leftover);
                if volume.exists(&leftover)? {
                    volume.remove(&leftover)?;
                    cleaned = true;
                }
            }
            if cleaned {
                volume.commit()?;
            }
        }
        Ok(PeerBook {
            volume: volume.clone(),
            dir: dir.into(),
            known: RwLock::new(known),
            removed: RwLock::new(removed),
            writing: Mutex::new(()),
        })
    }

    /// Whether `peer` was removed from the cluster (for good).
    pub fn is_removed(&self, peer: u64) -> bool {
        self.removed.read().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&peer)
    }

    /// Every removed id.
    pub fn removed(&self) -> BTreeSet<u64> {
        self.removed.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Records `ids` as removed for good, durably when this returns (blocking IO: call it off
    /// an async runtime's workers); the ids newly recorded.
    pub fn record_removed(&self, ids: &BTreeSet<u64>) -> Result<BTreeSet<u64>> {
        let _writing = self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = self.removed();
        let new: BTreeSet<u64> = ids.difference(&now).copied().collect();
        if new.is_empty() {
            return Ok(new);
        }
        let mut next = now;
        next.extend(new.iter().copied());
        if next.len() > MAX_PEERS {
            return Err(Error::Config("the removed-ids record is full"));
        }
        self.write_whole("removed", &encode_removed(&next))?;
        *self.removed.write().unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        Ok(new)
    }

    /// Writes `name` whole: `name.new`, renamed over `name`, committed.
    fn write_whole(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let tmp = peers_path(&self.dir, &format!("{name}.new"));
        self.volume.create_dir_all(&self.dir)?;
        if self.volume.exists(&tmp)? {
            self.volume.remove(&tmp)?;
        }
        let file = self.volume.create_file(&tmp)?;
        file.write_at(bytes, 0)?;
        drop(file);
        self.volume.rename(&tmp, peers_path(&self.dir, name))?;
        self.volume.commit()?;
        Ok(())
    }

    /// The incarnation recorded for `peer`.
    pub fn get(&self, peer: u64) -> Option<Incarnation> {
        self.read().get(&peer).copied()
    }

    /// Every recorded peer.
    pub fn all(&self) -> BTreeMap<u64, Incarnation> {
        self.read().clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<u64, Incarnation>> {
        self.known.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn check(&self, peer: u64, incarnation: Incarnation) -> Result<Option<Admitted>> {
        match self.read().get(&peer) {
            Some(k) if *k == incarnation => Ok(Some(Admitted::Known)),
            Some(k) => Err(Error::PeerConflict { peer, known: *k, presented: incarnation }),
            None => Ok(None),
        }
    }

    /// Checks `peer`'s incarnation against the book: known, or recorded now (durable when
    /// this returns: blocking IO, call it off an async runtime's workers), or
    /// `PeerConflict` when the book holds another one.
    pub fn admit(&self, peer: u64, incarnation: Incarnation) -> Result<Admitted> {
        if let Some(known) = self.check(peer, incarnation)? {
            return Ok(known);
        }
        // One first contact at a time writes the book; another one may have recorded this
        // peer while we waited.
        let _writing = self.writing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = self.check(peer, incarnation)? {
            return Ok(known);
        }
        let mut next = self.all();
        if next.len() >= MAX_PEERS {
            return Err(Error::Config("the peer book is full"));
        }
        next.insert(peer, incarnation);
        self.write_whole("peers", &encode_peers(&next))?;
        *self.known.write().unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        tracing::info!(peer, %incarnation, "recorded a peer's incarnation (first contact)");
        Ok(Admitted::Recorded)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use vellum_engine::testing::MemoryCarrier;
    use vellum_engine::{FormatOptions, VolumeOptions};

    use super::*;

    fn volume() -> (std::sync::Arc<MemoryCarrier>, Volume) {
        let c = std::sync::Arc::new(MemoryCarrier::new(4 << 20));
        let v = Volume::format(
            Box::new(std::sync::Arc::clone(&c)),
            &FormatOptions::default(),
            VolumeOptions::default(),
        )
        .unwrap();
        (c, v)
    }

    #[test]
    fn an_identity_is_written_once_and_never_changes_owner() {
        let (c, v) = volume();
        assert_eq!(Identity::load(&v, "/raft").unwrap(), None);
        let id = Identity::create(&v, "/raft", 3).unwrap();
        assert_eq!(Identity::open_or_create(&v, "/raft", 3).unwrap(), id);
        let e = Identity::open_or_create(&v, "/raft", 4).unwrap_err();
        assert!(matches!(e, Error::WrongMember { volume_node: 3, asked: 4 }), "{e:?}");
        v.close().unwrap();
        let v = Volume::open(
            Box::new(MemoryCarrier::from_bytes(&c.to_bytes())),
            VolumeOptions::default(),
        )
        .unwrap();
        assert_eq!(Identity::load(&v, "/raft").unwrap(), Some(id));
        let text = id.incarnation.to_string();
        assert_eq!(text.parse::<Incarnation>().unwrap(), id.incarnation);
    }

    #[test]
    fn the_peer_book_records_first_contacts_durably_and_refuses_another_incarnation() {
        let (c, v) = volume();
        let book = PeerBook::open(&v, "/raft").unwrap();
        let (a, b) = (Incarnation([1; 16]), Incarnation([2; 16]));
        assert_eq!(book.admit(2, a).unwrap(), Admitted::Recorded);
        assert_eq!(book.admit(2, a).unwrap(), Admitted::Known);
        assert_eq!(book.admit(3, b).unwrap(), Admitted::Recorded);
        let e = book.admit(2, b).unwrap_err();
        assert!(matches!(e, Error::PeerConflict { peer: 2, .. }), "{e:?}");
        // Durable: a copy of the carrier (a power cut now) holds both records.
        let v2 = Volume::open(
            Box::new(MemoryCarrier::from_bytes(&c.to_bytes())),
            VolumeOptions::default(),
        )
        .unwrap();
        let again = PeerBook::open(&v2, "/raft").unwrap();
        assert_eq!(again.all(), BTreeMap::from([(2, a), (3, b)]));
        assert!(again.removed().is_empty(), "a book written before removed ids has none");
    }

    #[test]
    fn removed_ids_are_recorded_durably_and_stay_removed() {
        let (c, v) = volume();
        let book = PeerBook::open(&v, "/raft").unwrap();
        book.admit(2, Incarnation([1; 16])).unwrap();
        assert!(!book.is_removed(2));
        assert_eq!(book.record_removed(&BTreeSet::from([2, 9])).unwrap(), BTreeSet::from([2, 9]));
        assert_eq!(book.record_removed(&BTreeSet::from([2])).unwrap(), BTreeSet::new());
        assert!(book.is_removed(2) && book.is_removed(9) && !book.is_removed(3));
        let v2 = Volume::open(
            Box::new(MemoryCarrier::from_bytes(&c.to_bytes())),
            VolumeOptions::default(),
        )
        .unwrap();
        let again = PeerBook::open(&v2, "/raft").unwrap();
        assert_eq!(again.removed(), BTreeSet::from([2, 9]));
        assert_eq!(again.get(2), Some(Incarnation([1; 16])), "the peers file is untouched");
        let mut bytes = encode_removed(&BTreeSet::from([4, 5]));
        assert_eq!(decode_removed(&bytes, b"r").unwrap(), BTreeSet::from([4, 5]));
        bytes[13] ^= 1;
        assert!(decode_removed(&bytes, b"r").is_err());
        assert!(decode_removed(&[], b"r").is_err());
        let mut newer = encode_removed(&BTreeSet::new());
        newer[7] = b'2';
        assert!(matches!(decode_removed(&newer, b"r"), Err(Error::Unsupported { .. })));
    }

    #[test]
    fn decoders_refuse_damage_and_newer_versions() {
        let id = Identity { node_id: 7, incarnation: Incarnation([9; 16]) };
        let mut bytes = id.encode(1);
        assert_eq!(Identity::decode(&bytes, b"m").unwrap(), Some(id));
        bytes[20] ^= 1;
        assert!(matches!(Identity::decode(&bytes, b"m"), Err(Error::Corrupt { .. })));
        let mut newer = id.encode(1);
        newer[7] = b'2';
        assert!(matches!(Identity::decode(&newer, b"m"), Err(Error::Unsupported { .. })));
        let peers = BTreeMap::from([(1, Incarnation([1; 16]))]);
        let mut book = encode_peers(&peers);
        assert_eq!(decode_peers(&book, b"p").unwrap(), peers);
        book[13] ^= 1;
        assert!(decode_peers(&book, b"p").is_err());
        assert!(decode_peers(&[], b"p").is_err());
        let mut huge = encode_peers(&peers);
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_peers(&huge, b"p").is_err());
    }
}
