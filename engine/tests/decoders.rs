//! Decoders never panic, on any bytes: random and mutated superblocks, metadata blocks and
//! records, and the whole open path. Mutations inside the image are re-sealed up the checksum
//! chain, so they reach the record decoders and the namespace checks instead of stopping at
//! the first checksum.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use proptest::prelude::*;
use vellum_engine::carrier::{Carrier, MemoryCarrier};
use vellum_engine::chain::{self, BlockKind};
use vellum_engine::format::checksum;
use vellum_engine::records::{AttrPart, DirentRecord, ExtentRecord, InodeRecord};
use vellum_engine::superblock::{self, BlockRef, Superblock};
use vellum_engine::{FormatOptions, MemberCarrier, Volume, VolumeOptions, check};

const BS: usize = 4096;

/// A small closed volume with some of everything.
fn sample_volume() -> Vec<u8> {
    let carrier = Arc::new(MemoryCarrier::new(2 << 20));
    let fmt = FormatOptions { image_blocks: Some(32), ..FormatOptions::default() };
    let v = Volume::format(Box::new(Arc::clone(&carrier)), &fmt, VolumeOptions::default()).unwrap();
    v.create_dir_all("/a/b").unwrap();
    for i in 0..40 {
        let f = v.create_file(format!("/a/f{i}")).unwrap();
        f.write_at(&vec![i as u8; 100 * i], 0).unwrap();
        if i % 3 == 0 {
            f.set_attr(b"k", &[1u8; 150]).unwrap();
        }
    }
    v.create_file("/a/b/sparse").unwrap().write_at(b"end", 50_000).unwrap();
    v.close().unwrap();
    carrier.to_bytes()
}

/// The adopted superblock and every (block, kind) of its image, root first. The walk stops
/// at addresses outside the volume (a mutation may have put them there).
fn image_blocks(bytes: &[u8]) -> (Superblock, Vec<(u64, BlockKind)>) {
    let sb = Superblock::decode(&bytes[..4096], 0).unwrap();
    let mut out = vec![(sb.root.block, BlockKind::Root)];
    let root = block(bytes, sb.root.block).expect("root inside the volume");
    for t in 0..4 {
        let at = vellum_engine::image::TABLE_ROOTS_AT + t * vellum_engine::image::TABLE_ROOT_LEN;
        let mut next = u64::from_le_bytes(root[at..at + 8].try_into().unwrap());
        let mut hops = 0;
        while next != 0 && hops < 64 {
            hops += 1;
            let Some(spine) = block(bytes, next) else { break };
            out.push((next, BlockKind::Spine));
            let count =
                u32::from_le_bytes(spine[chain::COUNT_AT..chain::COUNT_AT + 4].try_into().unwrap())
                    as usize;
            for e in 0..count.min(chain::entries_per_spine(BS)) {
                let p = chain::PAYLOAD_AT + e * chain::SPINE_ENTRY_LEN;
                let r = u64::from_le_bytes(spine[p..p + 8].try_into().unwrap());
                if block(bytes, r).is_some() {
                    out.push((r, BlockKind::Records));
                }
            }
            next =
                u64::from_le_bytes(spine[chain::NEXT_AT..chain::NEXT_AT + 8].try_into().unwrap());
        }
    }
    (sb, out)
}

fn block(bytes: &[u8], b: u64) -> Option<&[u8]> {
    let start = usize::try_from(b).ok()?.checked_mul(BS)?;
    bytes.get(start..start.checked_add(BS)?)
}

fn reseal_block(bytes: &mut [u8], b: u64, uuid: &vellum_engine::format::consts::Uuid) -> u32 {
    let blk = &mut bytes[b as usize * BS..(b as usize + 1) * BS];
    let crc = checksum::block(b, uuid, &blk[..BS - 4]);
    blk[BS - 4..].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// After editing block `target`, recomputes every checksum link from it up to both superblocks.
fn reseal(bytes: &mut [u8], target: u64) {
    let (mut sb, blocks) = image_blocks(bytes);
    let mut hops = 0;
    let uuid = sb.uuid;
    let mut crc = reseal_block(bytes, target, &uuid);
    let mut child = target;
    // Walk up: find the block referencing `child`, patch its link, reseal, repeat.
    'up: loop {
        hops += 1;
        if child == sb.root.block || hops > 16 {
            sb.root.checksum = crc;
            break;
        }
        for &(b, kind) in &blocks {
            let blk = &mut bytes[b as usize * BS..(b as usize + 1) * BS];
            let mut patched = false;
            if kind == BlockKind::Spine {
                let next =
                    u64::from_le_bytes(blk[chain::NEXT_AT..chain::NEXT_AT + 8].try_into().unwrap());
                if next == child {
                    blk[chain::NEXT_CHECKSUM_AT..chain::NEXT_CHECKSUM_AT + 4]
                        .copy_from_slice(&crc.to_le_bytes());
                    patched = true;
                }
                for e in 0..chain::entries_per_spine(BS) {
                    let p = chain::PAYLOAD_AT + e * chain::SPINE_ENTRY_LEN;
                    if u64::from_le_bytes(blk[p..p + 8].try_into().unwrap()) == child {
                        blk[p + 8..p + 12].copy_from_slice(&crc.to_le_bytes());
                        patched = true;
                    }
                }
            } else if kind == BlockKind::Root {
                for t in 0..4 {
                    let at = vellum_engine::image::TABLE_ROOTS_AT
                        + t * vellum_engine::image::TABLE_ROOT_LEN;
                    if u64::from_le_bytes(blk[at..at + 8].try_into().unwrap()) == child {
                        blk[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
                        patched = true;
                    }
                }
            }
            if patched {
                crc = reseal_block(bytes, b, &uuid);
                child = b;
                continue 'up;
            }
        }
        return;
    }
    for slot in 0..2u8 {
        let at = superblock::slot_offset(slot) as usize;
        bytes[at..at + 4096].copy_from_slice(&sb.encode(slot));
    }
}

/// Opens `bytes` (no panic allowed), and exercises what opened.
fn open_must_not_panic(bytes: &[u8]) {
    let _ = check(&MemoryCarrier::from_bytes(bytes));
    if let Ok(v) =
        Volume::open(Box::new(MemoryCarrier::from_bytes(bytes)), VolumeOptions::default())
    {
        v.check_invariants();
        let _ = v.list("/");
        let _ = v.create_file("/new").and_then(|f| f.write_at(b"x", 0));
        let _ = v.commit();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn superblock_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 4096), slot in 0u8..2) {
        let _ = Superblock::decode(&bytes, slot);
    }

    #[test]
    fn resealed_superblock_mutations_never_panic(at in 0usize..4092, value in any::<u8>()) {
        let vol = sample_volume_cached();
        let sb = Superblock::decode(&vol[..4096], 0).unwrap();
        let mut b = sb.encode(0);
        b[at] = value;
        let crc = checksum::superblock(0, &sb.uuid, &b[..4092]);
        b[4092..].copy_from_slice(&crc.to_le_bytes());
        let _ = Superblock::decode(&b, 0);
        let mut whole = vol.clone();
        whole[..4096].copy_from_slice(&b);
        whole[4096..8192].copy_from_slice(&b);
        // Slot B now holds slot A's bytes: its checksum seed differs, so it is refused too.
        open_must_not_panic(&whole);
    }

    #[test]
    fn metadata_block_and_record_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 4096), addr in any::<u64>()) {
        let at = BlockRef { block: addr, checksum: checksum::block(addr, &vellum_engine::format::consts::Uuid([1; 16]), &bytes[..4092]) };
        let _ = chain::open_block(&bytes, at, &vellum_engine::format::consts::Uuid([1; 16]), 0);
        let _ = InodeRecord::decode(&bytes[..128], 0);
        let _ = DirentRecord::decode(&bytes[..288], 0);
        let _ = ExtentRecord::decode(&bytes[..32], 0);
        let _ = AttrPart::decode(&bytes[..128], 0);
        let _ = InodeRecord::decode(&bytes[..7], 0);
    }

    #[test]
    fn resealed_image_mutations_never_panic(which in any::<prop::sample::Index>(), at in 40usize..4092, value in any::<u8>(), count in 1usize..4) {
        let mut vol = sample_volume_cached();
        let (_, blocks) = image_blocks(&vol);
        let (b, _) = blocks[which.index(blocks.len())];
        for k in 0..count {
            let i = (at + k * 7) % (4092 - 40) + 40;
            vol[b as usize * BS + i] ^= value | 1;
        }
        reseal(&mut vol, b);
        open_must_not_panic(&vol);
    }

    #[test]
    fn raw_byte_flips_anywhere_never_panic(at in 0usize..(2 << 20), value in 1u8..) {
        let mut vol = sample_volume_cached();
        vol[at] ^= value;
        open_must_not_panic(&vol);
    }
}

/// A small closed volume of two members, a file spanning both: (member 0, member 1).
fn two_members() -> (Vec<u8>, Vec<u8>) {
    let (a, b) = (Arc::new(MemoryCarrier::new(1 << 20)), Arc::new(MemoryCarrier::new(1 << 20)));
    let fmt = FormatOptions { image_blocks: Some(16), ..FormatOptions::default() };
    let first = MemberCarrier::new(Box::new(Arc::clone(&a)));
    let second = MemberCarrier::new(Box::new(Arc::clone(&b)));
    let v = Volume::format_members(first, vec![second], &fmt, VolumeOptions::default()).unwrap();
    v.create_file("/span").unwrap().write_at(&vec![7u8; 1_500_000], 0).unwrap();
    v.close().unwrap();
    (a.to_bytes(), b.to_bytes())
}

fn two_members_cached() -> (Vec<u8>, Vec<u8>) {
    static CACHE: std::sync::OnceLock<(Vec<u8>, Vec<u8>)> = std::sync::OnceLock::new();
    CACHE.get_or_init(two_members).clone()
}

fn open_members_must_not_panic(a: &[u8], b: &[u8]) {
    let (x, y) = (MemoryCarrier::from_bytes(a), MemoryCarrier::from_bytes(b));
    let _ = vellum_engine::check_members(&[&x, &y]);
    let given = vec![
        MemberCarrier::new(Box::new(MemoryCarrier::from_bytes(b))),
        MemberCarrier::new(Box::new(MemoryCarrier::from_bytes(a))),
    ];
    if let Ok(v) = Volume::open_members(given, VolumeOptions::default()) {
        v.check_invariants();
        let _ = v.open_file("/span").and_then(|f| f.read_to_end());
        let _ = v.create_file("/new").and_then(|f| f.write_at(&vec![1u8; 300_000], 0));
        let _ = v.commit();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// Either member's superblock, changed at any byte and resealed into both slots, is
    /// refused or opens; never a panic, in open or in the checker.
    #[test]
    fn resealed_member_superblock_mutations_never_panic(at in 0usize..4092, value in any::<u8>(), which in 0usize..2) {
        let (mut a, mut b) = two_members_cached();
        let bytes = if which == 0 { &mut a } else { &mut b };
        let sb = Superblock::decode(&bytes[..4096], 0)
            .or_else(|_| Superblock::decode(&bytes[4096..8192], 1))
            .unwrap();
        for slot in 0..2u8 {
            let mut s = sb.encode(slot);
            s[at] = value;
            let crc = checksum::superblock(slot, &sb.uuid, &s[..4092]);
            s[4092..].copy_from_slice(&crc.to_le_bytes());
            let off = superblock::slot_offset(slot) as usize;
            bytes[off..off + 4096].copy_from_slice(&s);
        }
        open_members_must_not_panic(&a, &b);
    }
}

/// Found by the property test above: a member table entry (resealed) that gives a later
/// member terabytes its carrier does not hold once made the checker size the allocator's bitmap
/// by it and abort on the allocation. Open and check must refuse it first.
#[test]
fn a_member_table_asking_more_than_the_carrier_holds_is_refused() {
    let (mut a, b) = two_members_cached();
    let mut sb = Superblock::decode(&a[..4096], 0)
        .or_else(|_| Superblock::decode(&a[4096..8192], 1))
        .unwrap();
    assert_eq!(sb.carrier_index, 0);
    sb.members[1].capacity_blocks = 1 << 46;
    for slot in 0..2u8 {
        let off = superblock::slot_offset(slot) as usize;
        a[off..off + 4096].copy_from_slice(&sb.encode(slot));
    }
    let (x, y) = (MemoryCarrier::from_bytes(&a), MemoryCarrier::from_bytes(&b));
    let report = vellum_engine::check_members(&[&x, &y]);
    assert_ne!(report.exit_code(), 0, "{report:?}");
    let given = vec![
        MemberCarrier::new(Box::new(MemoryCarrier::from_bytes(&a))),
        MemberCarrier::new(Box::new(MemoryCarrier::from_bytes(&b))),
    ];
    let err = Volume::open_members(given, VolumeOptions::default()).err().unwrap();
    assert!(err.to_string().contains("carrier"), "{err}");
}

#[test]
fn two_members_open_and_check_clean() {
    let (a, b) = two_members_cached();
    let (x, y) = (MemoryCarrier::from_bytes(&a), MemoryCarrier::from_bytes(&b));
    assert_eq!(vellum_engine::check_members(&[&x, &y]).exit_code(), 0);
    open_members_must_not_panic(&a, &b);
}

fn sample_volume_cached() -> Vec<u8> {
    static CACHE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    CACHE.get_or_init(sample_volume).clone()
}

#[test]
fn reseal_really_reaches_the_records() {
    // Control: an untouched reseal opens, and a resealed record edit is judged by the record
    // decoders (not by a checksum).
    let mut vol = sample_volume_cached();
    let (_, blocks) = image_blocks(&vol);
    let (b, _) = *blocks.iter().find(|(_, k)| *k == BlockKind::Records).unwrap();
    reseal(&mut vol, b);
    Volume::open(Box::new(MemoryCarrier::from_bytes(&vol)), VolumeOptions::default()).unwrap();
    // Give the first record an unknown tag.
    vol[b as usize * BS + chain::PAYLOAD_AT] = 0x7F;
    reseal(&mut vol, b);
    let e = Volume::open(Box::new(MemoryCarrier::from_bytes(&vol)), VolumeOptions::default())
        .unwrap_err();
    assert!(matches!(e, vellum_engine::Error::Unsupported(_)), "{e:?}");
    let _ = MemoryCarrier::new(1).geometry();
}

/// Copies superblock `sb` (generation raised to `generation`) into `bytes`' older slot.
fn plant_in_older_slot(bytes: &mut [u8], mut sb: Superblock, generation: u64) {
    let gen_of = |slot: u8| {
        let off = superblock::slot_offset(slot) as usize;
        Superblock::decode(&bytes[off..off + 4096], slot).map_or(0, |s| s.generation)
    };
    let older = u8::from(gen_of(0) > gen_of(1));
    sb.generation = generation;
    let off = superblock::slot_offset(older) as usize;
    bytes[off..off + 4096].copy_from_slice(&sb.encode(older));
}

fn newest_superblock(bytes: &[u8]) -> Superblock {
    let a = Superblock::decode(&bytes[..4096], 0);
    let b = Superblock::decode(&bytes[4096..8192], 1);
    match (a, b) {
        (Ok(a), Ok(b)) => {
            if a.generation >= b.generation {
                a
            } else {
                b
            }
        }
        (Ok(a), Err(_)) => a,
        (Err(_), Ok(b)) => b,
        (Err(e), Err(_)) => panic!("{e}"),
    }
}

/// Found by review: open placed the volume's members by the newest slot before adoption, so
/// a newer slot of another volume (another journal size, another member table) made the
/// fallback to this volume's own slot read its image through the other volume's layout and
/// trip the area checks. Each candidate is placed by its own table now: the volume opens at
/// its own commit and checks clean.
#[test]
fn a_newer_foreign_slot_of_another_layout_falls_back_cleanly() {
    let foreign_of = |journal_bytes: u64| {
        let carrier = Arc::new(MemoryCarrier::new(2 << 20));
        let fmt =
            FormatOptions { image_blocks: Some(32), journal_bytes, ..FormatOptions::default() };
        Volume::format(Box::new(Arc::clone(&carrier)), &fmt, VolumeOptions::default())
            .unwrap()
            .close()
            .unwrap();
        newest_superblock(&carrier.to_bytes())
    };
    // One member, a foreign slot with a journal region where this volume has none.
    let mut vol = sample_volume_cached();
    let ours = newest_superblock(&vol);
    let foreign = foreign_of(256 << 10);
    assert_ne!(foreign.layout.journal, ours.layout.journal);
    plant_in_older_slot(&mut vol, foreign, ours.generation + 5);
    assert_eq!(check(&MemoryCarrier::from_bytes(&vol)).exit_code(), 0);
    let v =
        Volume::open(Box::new(MemoryCarrier::from_bytes(&vol)), VolumeOptions::default()).unwrap();
    assert_eq!(v.open_report().generation, ours.generation);
    v.check_invariants();
    assert_eq!(v.open_file("/a/f7").unwrap().read_to_end().unwrap(), vec![7u8; 700]);
    v.close().unwrap();

    // Member 0 of two members, a foreign slot of one member and another journal.
    let (mut a, b) = two_members_cached();
    let ours = newest_superblock(&a);
    let foreign = foreign_of(256 << 10);
    assert_ne!(foreign.layout.journal, ours.layout.journal);
    plant_in_older_slot(&mut a, foreign, ours.generation + 5);
    let given = vec![
        MemberCarrier::new(Box::new(MemoryCarrier::from_bytes(&a))),
        MemberCarrier::new(Box::new(MemoryCarrier::from_bytes(&b))),
    ];
    match Volume::open_members(given, VolumeOptions::default()) {
        Ok(v) => {
            assert_eq!(v.open_report().generation, ours.generation);
            assert_eq!(v.open_file("/span").unwrap().read_to_end().unwrap().len(), 1_500_000);
            v.close().unwrap();
        }
        // Gathering goes by the newest slot, which names one member: a named refusal is
        // acceptable, a panic is not.
        Err(e) => assert!(e.to_string().contains("member"), "{e}"),
    }
}
