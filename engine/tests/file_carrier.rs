//! The file carrier on the host file system: creation knobs, direct IO with unaligned
//! requests, write-through counts, locking across openers and processes, thin growth.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use vellum_engine::carrier::{Carrier, CarrierOptions, CreateOptions, FileCarrier};
use vellum_engine::{Error, FormatOptions, Volume, VolumeOptions};

fn production(size: u64) -> FormatOptions<'static> {
    FormatOptions { capacity_bytes: Some(size), ..FormatOptions::default() }
}

fn allocated_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn non_sparse_preallocation_writes_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    let v = Volume::create_path(
        &path,
        &production(32 << 20),
        CarrierOptions::PRODUCTION,
        VolumeOptions::default(),
    )
    .unwrap();
    v.close().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 32 << 20);
    assert!(allocated_bytes(&path) >= 32 << 20, "every block is backed");
}

#[test]
fn sparse_and_thin_carriers_take_little_space() {
    let dir = tempfile::tempdir().unwrap();
    let sparse = dir.path().join("sparse.vlm");
    let fmt = FormatOptions { sparse: true, ..production(64 << 20) };
    Volume::create_path(&sparse, &fmt, CarrierOptions::BUFFERED, VolumeOptions::default())
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(std::fs::metadata(&sparse).unwrap().len(), 64 << 20);
    assert!(allocated_bytes(&sparse) < 8 << 20, "holes stay holes");

    let thin = dir.path().join("thin.vlm");
    let fmt = FormatOptions { preallocate: false, sparse: true, ..production(256 << 20) };
    let v = Volume::create_path(&thin, &fmt, CarrierOptions::BUFFERED, VolumeOptions::default())
        .unwrap();
    let small = std::fs::metadata(&thin).unwrap().len();
    assert!(small < 16 << 20, "a thin carrier starts small ({small} bytes)");
    let f = v.create_file("/grow").unwrap();
    let chunk = vec![3u8; 1 << 20];
    for i in 0..40 {
        f.write_at(&chunk, i << 20).unwrap();
    }
    v.close().unwrap();
    let grown = std::fs::metadata(&thin).unwrap().len();
    assert!(grown > 40 << 20 && grown <= 256 << 20, "it grows as blocks are allocated ({grown})");
    let v = Volume::open_path(&thin, CarrierOptions::BUFFERED, VolumeOptions::default()).unwrap();
    let f = v.open_file("/grow").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    f.read_exact_at(&mut buf, 39 << 20).unwrap();
    assert_eq!(buf, chunk);
}

#[test]
fn thin_non_sparse_growth_writes_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let thin = dir.path().join("thin.vlm");
    let fmt = FormatOptions { preallocate: false, sparse: false, ..production(64 << 20) };
    let v = Volume::create_path(&thin, &fmt, CarrierOptions::PRODUCTION, VolumeOptions::default())
        .unwrap();
    v.create_file("/a").unwrap().write_at(&vec![1u8; 5 << 20], 0).unwrap();
    v.close().unwrap();
    let meta = std::fs::metadata(&thin).unwrap();
    assert!(meta.len() < 64 << 20);
    assert!(allocated_bytes(&thin) >= meta.len() - 4096, "grown ranges are written, not holes");
}

#[test]
fn direct_io_absorbs_unaligned_requests() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    let v = Volume::create_path(
        &path,
        &production(16 << 20),
        CarrierOptions::PRODUCTION,
        VolumeOptions::default(),
    )
    .unwrap();
    let f = v.create_file("/f").unwrap();
    f.preallocate(0, 1 << 20).unwrap();
    v.commit().unwrap();
    // Odd offsets, odd lengths, and a buffer that starts off alignment.
    let backing = vec![7u8; 10_001];
    let odd = &backing[1..];
    f.write_at(odd, 12_345).unwrap();
    f.write_at(b"x", 4095).unwrap();
    let mut got = vec![0u8; 10_000];
    f.read_exact_at(&mut got, 12_345).unwrap();
    assert_eq!(got, odd);
    let mut one = [0u8; 3];
    f.read_exact_at(&mut one, 4094).unwrap();
    assert_eq!(one, [0, b'x', 0]);
    v.close().unwrap();
    let v = Volume::open_path(&path, CarrierOptions::PRODUCTION, VolumeOptions::default()).unwrap();
    let mut got = vec![0u8; 10_000];
    v.open_file("/f").unwrap().read_exact_at(&mut got, 12_345).unwrap();
    assert_eq!(got, odd);
}

#[test]
fn write_through_appends_take_one_write_and_no_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    let v = Volume::create_path(
        &path,
        &production(16 << 20),
        CarrierOptions::PRODUCTION,
        VolumeOptions::default(),
    )
    .unwrap();
    let f = v.create_file("/log").unwrap();
    f.preallocate(0, 4 << 20).unwrap();
    v.commit().unwrap();
    let block = vellum_engine::carrier::AlignedBuf::zeroed(4096, 4096);
    for i in 0..16u64 {
        let before = v.carrier_stats();
        f.write_at(block.as_slice(), i * 4096).unwrap();
        let d = v.carrier_stats() - before;
        assert_eq!((d.writes, d.durable_writes, d.barriers), (1, 1, 0), "append {i}");
        assert_eq!(d.written_bytes, 4096);
    }
}

#[test]
fn a_second_opener_is_locked_out_here_and_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    let v = Volume::create_path(
        &path,
        &production(16 << 20),
        CarrierOptions::BUFFERED,
        VolumeOptions::default(),
    )
    .unwrap();
    let e =
        Volume::open_path(&path, CarrierOptions::BUFFERED, VolumeOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Locked { .. }), "{e:?}");
    let ro = CarrierOptions { read_only: true, ..CarrierOptions::BUFFERED };
    assert!(
        matches!(FileCarrier::open(&path, ro), Err(Error::Locked { .. })),
        "readers wait for the writer"
    );
    // Another process taking the same flock on the carrier file is refused too.
    let status = std::process::Command::new("flock")
        .args(["--nonblock", "--conflict-exit-code", "99"])
        .arg(&path)
        .arg("true")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(99), "the lock is visible to other processes");
    v.close().unwrap();
    let again =
        Volume::open_path(&path, CarrierOptions::BUFFERED, VolumeOptions::default()).unwrap();
    again.close().unwrap();
}

#[test]
fn the_lock_holds_whatever_path_reaches_the_carrier() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    let v = Volume::create_path(
        &path,
        &production(16 << 20),
        CarrierOptions::BUFFERED,
        VolumeOptions::default(),
    )
    .unwrap();
    let symlink = dir.path().join("alias.vlm");
    std::os::unix::fs::symlink(&path, &symlink).unwrap();
    let hard = dir.path().join("hard.vlm");
    std::fs::hard_link(&path, &hard).unwrap();
    for other in [&symlink, &hard] {
        let e = Volume::open_path(other, CarrierOptions::BUFFERED, VolumeOptions::default())
            .unwrap_err();
        assert!(matches!(e, Error::Locked { .. }), "{}: {e:?}", other.display());
    }
    v.close().unwrap();
    Volume::open_path(&symlink, CarrierOptions::BUFFERED, VolumeOptions::default())
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn creating_a_carrier_makes_its_directory_entry_durable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    let v = Volume::create_path(
        &path,
        &production(16 << 20),
        CarrierOptions::BUFFERED,
        VolumeOptions::default(),
    )
    .unwrap();
    assert_eq!(v.carrier_stats().dir_syncs, 1, "the parent directory is fsynced once");
    v.close().unwrap();
    let v = Volume::open_path(&path, CarrierOptions::BUFFERED, VolumeOptions::default()).unwrap();
    assert_eq!(v.carrier_stats().dir_syncs, 0, "opening changes no directory");
    v.close().unwrap();
}

#[test]
fn readers_share_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    Volume::create_path(
        &path,
        &production(16 << 20),
        CarrierOptions::BUFFERED,
        VolumeOptions::default(),
    )
    .unwrap()
    .close()
    .unwrap();
    let ro = CarrierOptions { read_only: true, ..CarrierOptions::BUFFERED };
    let a = Volume::open_path(&path, ro, VolumeOptions::default()).unwrap();
    let b = Volume::open_path(&path, ro, VolumeOptions::default()).unwrap();
    assert!(a.info().read_only && b.info().read_only);
    assert!(matches!(
        Volume::open_path(&path, CarrierOptions::BUFFERED, VolumeOptions::default()),
        Err(Error::Locked { .. })
    ));
}

#[test]
fn refuses_to_format_over_a_file_with_data_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.bin");
    std::fs::write(&path, b"precious").unwrap();
    let e = Volume::create_path(
        &path,
        &production(16 << 20),
        CarrierOptions::BUFFERED,
        VolumeOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::NotEmpty { .. }), "{e:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    let forced = FormatOptions { force: true, ..production(16 << 20) };
    Volume::create_path(&path, &forced, CarrierOptions::BUFFERED, VolumeOptions::default())
        .unwrap()
        .close()
        .unwrap();
}

#[test]
fn missing_and_foreign_files_get_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = Volume::open_path(
        &dir.path().join("nope"),
        CarrierOptions::BUFFERED,
        VolumeOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Open { .. }), "{e:?}");
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![0x5Au8; 1 << 20]).unwrap();
    let e =
        Volume::open_path(&junk, CarrierOptions::BUFFERED, VolumeOptions::default()).unwrap_err();
    assert!(matches!(e, Error::NotAVolume), "{e:?}");
    let tiny = dir.path().join("tiny");
    std::fs::write(&tiny, b"abc").unwrap();
    let e =
        Volume::open_path(&tiny, CarrierOptions::BUFFERED, VolumeOptions::default()).unwrap_err();
    assert!(matches!(e, Error::NotAVolume), "{e:?}");
}

#[test]
fn a_truncated_carrier_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    Volume::create_path(
        &path,
        &production(16 << 20),
        CarrierOptions::BUFFERED,
        VolumeOptions::default(),
    )
    .unwrap()
    .close()
    .unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(8 << 20).unwrap();
    let e =
        Volume::open_path(&path, CarrierOptions::BUFFERED, VolumeOptions::default()).unwrap_err();
    assert!(
        matches!(e, Error::Invalid(vellum_engine::error::Invalid::CarrierTooSmall { .. })),
        "{e:?}"
    );
}

#[test]
fn zero_fill_reports_progress() {
    let dir = tempfile::tempdir().unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let report = |done: u64, total: u64| seen.lock().unwrap().push((done, total));
    let create = CreateOptions {
        capacity_bytes: 24 << 20,
        preallocate: true,
        sparse: false,
        force: false,
        progress: Some(&report),
    };
    let c =
        FileCarrier::create(&dir.path().join("p.vlm"), &create, CarrierOptions::BUFFERED).unwrap();
    assert_eq!(c.geometry().len_bytes, 24 << 20);
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.last(), Some(&(24 << 20, 24 << 20)));
}

/// The page cache on a real file with direct IO: readahead fills frames with one `preadv`,
/// writeback writes runs with one `pwritev` (plus single pages and partial sectors), and
/// everything reads back after a close and reopen.
#[test]
fn the_cache_reads_and_writes_back_through_vectored_direct_io() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.vlm");
    let knobs = CarrierOptions { write_through: false, ..CarrierOptions::PRODUCTION };
    let opts = VolumeOptions { cache_bytes: Some(4 << 20), ..VolumeOptions::default() };
    let v = Volume::create_path(&path, &production(32 << 20), knobs, opts).unwrap();
    let f = v.create_file("/f").unwrap();
    f.preallocate(0, 2 << 20).unwrap();
    v.commit().unwrap();
    let data: Vec<u8> = (0..(2 << 20)).map(|i: u32| (i % 251) as u8).collect();
    // The first MiB in one write: it goes around the cache (a long write is not copied
    // through it); the second in 64 KiB writes: dirty pages, written back in long runs.
    f.write_at(&data[..1 << 20], 0).unwrap();
    for at in ((1 << 20)..(2 << 20)).step_by(64 << 10) {
        f.write_at(&data[at..at + (64 << 10)], at as u64).unwrap();
    }
    f.write_at(b"odd", 4097).unwrap(); // one sector of one page
    v.sync().unwrap();
    let s = v.cache_stats().unwrap();
    assert!(s.writeback_writes < s.writeback_pages, "no run went out as one write: {s:?}");
    v.close().unwrap();
    let v = Volume::open_path(&path, knobs, opts).unwrap();
    let f = v.open_file("/f").unwrap();
    let mut got = vec![0u8; 2 << 20];
    for (i, chunk) in got.chunks_mut(64 << 10).enumerate() {
        f.read_exact_at(chunk, (i << 16) as u64).unwrap();
    }
    let mut want = data;
    want[4097..4100].copy_from_slice(b"odd");
    assert_eq!(got, want);
    let s = v.cache_stats().unwrap();
    assert!(s.readahead_pages > 0 && s.misses < 32, "{s:?}");
}
