//! Golden volumes: small volumes committed under `tests/golden/`, which this and every later
//! build must open and read identically: `v1/` (copy-on-write, closed cleanly),
//! `v1-journal/` (the journal feature, left as a power cut leaves it: batches after the
//! checkpoint that open must replay), `v1-grow/` (auto-grow, grown past its first bound) and
//! `v1-members/` (a journaled volume over two members, `member0.vlm` and `member1.vlm`, with a
//! file spanning both; opened from copies, never from the committed files). Regenerate only
//! for a new format or feature, into a new directory:
//! `VELLUM_BLESS_GOLDEN=1 cargo test -p vellum-engine --test golden`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::sync::Arc;

use vellum_engine::carrier::MemoryCarrier;
use vellum_engine::{FileKind, FormatOptions, Volume, VolumeOptions, check};

fn golden_path() -> PathBuf {
    golden_in("v1")
}

fn golden_in(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(dir).join("volume.vlm")
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// One expected entry: (path, kind, content, attributes).
type Expected = (&'static str, FileKind, Vec<u8>, Vec<(&'static [u8], Vec<u8>)>);

/// What the golden volume holds.
fn expected() -> Vec<Expected> {
    let mut sparse = vec![0u8; 40_000];
    sparse.extend_from_slice(b"after the hole");
    vec![
        ("/docs", FileKind::Directory, vec![], vec![]),
        (
            "/docs/readme",
            FileKind::File,
            b"Vellum golden volume, format v1.\n".to_vec(),
            vec![(b"mime", b"text/plain".to_vec())],
        ),
        ("/docs/nested", FileKind::Directory, vec![], vec![]),
        ("/docs/nested/blob", FileKind::File, pattern(3, 50_000), vec![(b"big", pattern(9, 400))]),
        ("/log", FileKind::Directory, vec![], vec![]),
        (
            "/log/segment-0001",
            FileKind::File,
            {
                let mut s = vec![0u8; 32_768];
                s[..11].copy_from_slice(b"entry-00001");
                s
            },
            vec![],
        ),
        ("/renamed", FileKind::File, pattern(5, 5000), vec![]),
        ("/sparse", FileKind::File, sparse, vec![]),
        ("/truncated", FileKind::File, pattern(7, 1234), vec![]),
        ("/\u{e9}t\u{e9} \u{1}x", FileKind::File, b"byte-exact name".to_vec(), vec![]),
    ]
}

fn build(v: &Volume) {
    v.create_dir_all("/docs/nested").unwrap();
    let f = v.create_file("/docs/readme").unwrap();
    f.write_at(b"Vellum golden volume, format v1.\n", 0).unwrap();
    f.set_attr(b"mime", b"text/plain").unwrap();
    let f = v.create_file("/docs/nested/blob").unwrap();
    f.write_at(&pattern(3, 50_000), 0).unwrap();
    f.set_attr(b"big", &pattern(9, 400)).unwrap();
    v.create_dir("/log").unwrap();
    let seg = v.create_file("/log/segment-0001").unwrap();
    seg.preallocate(0, 32_768).unwrap();
    v.commit().unwrap();
    seg.write_at(b"entry-00001", 0).unwrap();
    v.create_file("/to-rename").unwrap().write_at(&pattern(5, 5000), 0).unwrap();
    v.rename("/to-rename", "/renamed").unwrap();
    v.create_file("/sparse").unwrap().write_at(b"after the hole", 40_000).unwrap();
    let t = v.create_file("/truncated").unwrap();
    t.write_at(&pattern(7, 9000), 0).unwrap();
    t.set_len(1234).unwrap();
    v.create_file("/removed").unwrap().write_at(b"gone", 0).unwrap();
    v.commit().unwrap();
    v.remove("/removed").unwrap();
    v.create_file("/\u{e9}t\u{e9} \u{1}x").unwrap().write_at(b"byte-exact name", 0).unwrap();
}

fn verify(v: &Volume) {
    verify_with(v, Vec::new());
}

/// [`verify`], with `extra` entries at the root besides those of `expected()`.
fn verify_with(v: &Volume, extra: Vec<Expected>) {
    let mut seen = 0;
    for (path, kind, content, attrs) in expected().into_iter().chain(extra) {
        let st = v.stat(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(st.kind, kind, "{path}");
        if kind == FileKind::File {
            let f = v.open_file(path).unwrap();
            assert_eq!(f.read_to_end().unwrap(), content, "{path}");
            for (k, val) in attrs {
                assert_eq!(f.attr(k).unwrap().as_deref(), Some(val.as_slice()), "{path}");
            }
        }
        seen += 1;
    }
    let total: usize =
        ["/", "/docs", "/docs/nested", "/log"].iter().map(|d| v.list(d).unwrap().len()).sum();
    assert_eq!(total, seen, "nothing more, nothing less");
}

#[test]
fn golden_v1_opens_and_reads_identically() {
    if std::env::var_os("VELLUM_BLESS_GOLDEN").is_some() {
        let _ = std::fs::remove_file(golden_path());
        let _ = std::fs::remove_file(golden_path().with_extension("vlm.lock"));
        let fmt = FormatOptions {
            capacity_bytes: Some(512 << 10),
            journal_bytes: 16 << 10,
            image_blocks: Some(16),
            ..FormatOptions::default()
        };
        let carrier = Arc::new(MemoryCarrier::new(512 << 10));
        let v =
            Volume::format(Box::new(Arc::clone(&carrier)), &fmt, VolumeOptions::default()).unwrap();
        build(&v);
        v.close().unwrap();
        std::fs::write(golden_path(), carrier.to_bytes()).unwrap();
    }
    let bytes = std::fs::read(golden_path()).expect("the golden volume is committed");
    assert_eq!(bytes.len(), 512 << 10);
    let report = check(&MemoryCarrier::from_bytes(&bytes));
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
    let ro = VolumeOptions { read_only: true, ..VolumeOptions::default() };
    let v = Volume::open(Box::new(MemoryCarrier::from_bytes(&bytes)), ro).unwrap();
    assert_eq!(v.info().layout.journal.len, 4, "the reserved journal region survives");
    verify(&v);
    // Writable too: open, change, close, reopen.
    let carrier = Arc::new(MemoryCarrier::from_bytes(&bytes));
    let v = Volume::open(Box::new(Arc::clone(&carrier)), VolumeOptions::default()).unwrap();
    verify(&v);
    v.create_file("/new").unwrap().write_at(b"new", 0).unwrap();
    v.close().unwrap();
    let v = Volume::open(
        Box::new(MemoryCarrier::from_bytes(&carrier.to_bytes())),
        VolumeOptions::default(),
    )
    .unwrap();
    verify_with_new(&v);
}

#[test]
fn golden_journaled_volume_replays_and_reads_identically() {
    let path = golden_in("v1-journal");
    if std::env::var_os("VELLUM_BLESS_GOLDEN").is_some() {
        let fmt = FormatOptions {
            capacity_bytes: Some(1 << 20),
            journal_bytes: 64 << 10,
            journal: true,
            image_blocks: Some(16),
            ..FormatOptions::default()
        };
        let carrier = Arc::new(MemoryCarrier::new(1 << 20));
        let v =
            Volume::format(Box::new(Arc::clone(&carrier)), &fmt, VolumeOptions::default()).unwrap();
        build(&v);
        v.commit().unwrap();
        // Left as a power cut leaves it: the batches since the checkpoint are unreplayed.
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, carrier.to_bytes()).unwrap();
    }
    let bytes = std::fs::read(&path).expect("the golden journaled volume is committed");
    assert_eq!(bytes.len(), 1 << 20);
    let report = check(&MemoryCarrier::from_bytes(&bytes));
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
    let pending = report.journal.expect("journaled").batches;
    assert!(pending >= 2, "the golden volume keeps batches to replay ({pending})");
    let ro = VolumeOptions { read_only: true, ..VolumeOptions::default() };
    let v = Volume::open(Box::new(MemoryCarrier::from_bytes(&bytes)), ro).unwrap();
    assert_eq!(v.open_report().journal.unwrap().batches, pending);
    verify(&v);
    let carrier = Arc::new(MemoryCarrier::from_bytes(&bytes));
    let v = Volume::open(Box::new(Arc::clone(&carrier)), VolumeOptions::default()).unwrap();
    verify(&v);
    v.create_file("/new").unwrap().write_at(b"new", 0).unwrap();
    v.commit().unwrap();
    drop(v);
    let v = Volume::open(
        Box::new(MemoryCarrier::from_bytes(&carrier.to_bytes())),
        VolumeOptions::default(),
    )
    .unwrap();
    verify_with_new(&v);
}

#[test]
fn golden_growing_volume_opens_and_reads_identically() {
    let path = golden_in("v1-grow");
    if std::env::var_os("VELLUM_BLESS_GOLDEN").is_some() {
        let fmt = FormatOptions {
            capacity_bytes: Some(512 << 10),
            grow_max_bytes: Some(2 << 20),
            image_blocks: Some(8),
            ..FormatOptions::default()
        };
        let carrier = Arc::new(MemoryCarrier::new(2 << 20));
        let v =
            Volume::format(Box::new(Arc::clone(&carrier)), &fmt, VolumeOptions::default()).unwrap();
        build(&v);
        v.create_file("/ballast").unwrap().write_at(&vec![9; 700 << 10], 0).unwrap();
        v.commit().unwrap();
        v.remove("/ballast").unwrap();
        assert!(v.info().layout.total_blocks > 128, "the golden volume grew");
        v.close().unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, carrier.to_bytes()).unwrap();
    }
    let bytes = std::fs::read(&path).expect("the golden growing volume is committed");
    let report = check(&MemoryCarrier::from_bytes(&bytes));
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
    let carrier = Arc::new(MemoryCarrier::from_bytes(&bytes));
    let v = Volume::open(Box::new(Arc::clone(&carrier)), VolumeOptions::default()).unwrap();
    let layout = v.info().layout;
    assert!(layout.total_blocks > 128 && layout.max_blocks == 512, "{layout:?}");
    verify(&v);
    v.create_file("/new").unwrap().write_at(&vec![1; 300 << 10], 0).unwrap();
    v.close().unwrap();
    let v = Volume::open(
        Box::new(MemoryCarrier::from_bytes(&carrier.to_bytes())),
        VolumeOptions::default(),
    )
    .unwrap();
    assert_eq!(v.open_file("/new").unwrap().read_to_end().unwrap(), vec![1; 300 << 10]);
    v.remove("/new").unwrap();
    verify(&v);
}

fn verify_with_new(v: &Volume) {
    assert_eq!(v.open_file("/new").unwrap().read_to_end().unwrap(), b"new");
    v.remove("/new").unwrap();
    verify(v);
}

/// The spanning file of the 2-member golden volume: larger than member 0's data space.
fn spanning() -> Expected {
    ("/span", FileKind::File, pattern(11, 1_300_000), vec![(b"spans", b"member 0 and 1".to_vec())])
}

fn golden_member(k: usize) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/v1-members")
        .join(format!("member{k}.vlm"))
}

#[test]
fn golden_two_member_volume_opens_and_reads_identically() {
    use vellum_engine::MemberCarrier;
    use vellum_engine::carrier::{Carrier, CarrierOptions, FileCarrier};
    const MEMBER: usize = 1 << 20;
    if std::env::var_os("VELLUM_BLESS_GOLDEN").is_some() {
        let fmt = FormatOptions {
            capacity_bytes: Some(MEMBER as u64),
            journal_bytes: 64 << 10,
            journal: true,
            image_blocks: Some(16),
            ..FormatOptions::default()
        };
        let m0 = Arc::new(MemoryCarrier::new(MEMBER as u64));
        let m1 = Arc::new(MemoryCarrier::new(MEMBER as u64));
        let v = Volume::format_members(
            MemberCarrier::new(Box::new(Arc::clone(&m0))),
            vec![MemberCarrier::new(Box::new(Arc::clone(&m1)))],
            &fmt,
            VolumeOptions::default(),
        )
        .unwrap();
        build(&v);
        let (path, _, content, attrs) = spanning();
        let f = v.create_file(path).unwrap();
        f.write_at(&content, 0).unwrap();
        for (k, val) in attrs {
            f.set_attr(k, &val).unwrap();
        }
        drop(f);
        v.close().unwrap();
        std::fs::create_dir_all(golden_member(0).parent().unwrap()).unwrap();
        std::fs::write(golden_member(0), m0.to_bytes()).unwrap();
        std::fs::write(golden_member(1), m1.to_bytes()).unwrap();
    }
    let bytes: Vec<Vec<u8>> = (0..2)
        .map(|k| std::fs::read(golden_member(k)).expect("the golden members are committed"))
        .collect();
    assert!(bytes.iter().all(|b| b.len() == MEMBER));
    let memory = |k: usize| -> Box<dyn Carrier> { Box::new(MemoryCarrier::from_bytes(&bytes[k])) };
    let carriers = [memory(0), memory(1)];
    let refs: Vec<&dyn Carrier> = carriers.iter().map(AsRef::as_ref).collect();
    let report = vellum_engine::check_members(&refs);
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
    assert_eq!(report.members.len(), 1, "member 1's superblocks are checked");

    // Read-only over memory copies, member 1 given first (any order opens).
    let ro = VolumeOptions { read_only: true, ..VolumeOptions::default() };
    let v = Volume::open_members(
        vec![MemberCarrier::new(memory(1)), MemberCarrier::new(memory(0))],
        ro,
    )
    .unwrap();
    let members = v.members();
    assert_eq!(members.len(), 2);
    assert_eq!((members[1].first_block, members[1].blocks), (members[0].blocks, 256));
    let extents = v.open_file("/span").unwrap().extents().unwrap();
    assert!(
        extents.iter().any(|e| e.physical_block + e.blocks > members[1].first_block)
            && extents.iter().any(|e| e.physical_block < members[1].first_block),
        "the golden /span lies on both members: {extents:?}"
    );
    verify_with(&v, vec![spanning()]);
    drop(v);

    // Member 0 alone, or member 1 alone, is refused by name.
    assert!(matches!(
        Volume::open_members(vec![MemberCarrier::new(memory(0))], ro),
        Err(vellum_engine::Error::Member { .. })
    ));
    assert!(matches!(
        Volume::open_members(vec![MemberCarrier::new(memory(1))], ro),
        Err(vellum_engine::Error::Member { .. })
    ));

    // Writable over file copies in a temporary directory (never the committed files).
    let dir = tempfile::tempdir().unwrap();
    let copies: Vec<PathBuf> = (0..2)
        .map(|k| {
            let to = dir.path().join(format!("member{k}.vlm"));
            std::fs::copy(golden_member(k), &to).unwrap();
            to
        })
        .collect();
    let knobs = CarrierOptions { direct_io: false, write_through: true, read_only: false };
    let open = |knobs: CarrierOptions| -> Vec<MemberCarrier> {
        copies
            .iter()
            .map(|p| MemberCarrier {
                carrier: Box::new(FileCarrier::open(p, knobs).unwrap()),
                path: Some(p.clone()),
            })
            .collect()
    };
    let v = Volume::open_members(open(knobs), VolumeOptions::default()).unwrap();
    verify_with(&v, vec![spanning()]);
    v.create_file("/new").unwrap().write_at(b"new", 0).unwrap();
    v.close().unwrap();
    let v = Volume::open_members(open(knobs), VolumeOptions::default()).unwrap();
    assert_eq!(v.open_file("/new").unwrap().read_to_end().unwrap(), b"new");
    v.remove("/new").unwrap();
    verify_with(&v, vec![spanning()]);
    v.close().unwrap();
    let ro_knobs = CarrierOptions { read_only: true, ..knobs };
    let carriers: Vec<Box<dyn Carrier>> = open(ro_knobs).into_iter().map(|m| m.carrier).collect();
    let refs: Vec<&dyn Carrier> = carriers.iter().map(AsRef::as_ref).collect();
    let report = vellum_engine::check_members(&refs);
    assert_eq!(report.exit_code(), 0, "{:?}", report.findings);
}
