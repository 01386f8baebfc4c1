//! The `s3://` medium against a real S3-compatible server (moto, started per test on a free
//! loopback port; the tests skip with the reason when `moto_server` is not installed, and fail
//! instead under `VELLUM_REQUIRE_S3=1`, as CI runs them).
//!
//! Credentials: the medium reads the AWS variables; the tests point it at moto's with
//! `testing::set_s3_env(&ENV)` (a process-wide stand-in for the environment: edition 2024
//! makes `std::env::set_var` unsafe), and test other environments with
//! `testing::open_s3_with_env`.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::pattern;

use vellum_engine::Error;
use vellum_engine::error::{Knob, RemoteFailure};
use vellum_engine::media::testing::{ENV, MotoServer, open_s3_with_env, s3_gets, set_s3_env};
use vellum_engine::media::{
    Bare, EntryKind, KnobSupport, MediaOptions, Medium, PutMode, Target, Version, open_str,
};

/// A moto server with `bucket` created and the medium opened on it (`None`: skip).
fn moto(bucket: &str) -> Option<(MotoServer, Target)> {
    let server = MotoServer::start()?;
    let status = server.create_bucket(bucket).unwrap();
    assert!(status.contains("200"), "create bucket: {status}");
    set_s3_env(&ENV);
    let target = open_str(&server.url(bucket, ""), Bare::Local, MediaOptions::default()).unwrap();
    Some((server, target))
}

#[test]
fn read_your_writes_small_and_large() {
    let Some((_server, t)) = moto("ryw") else { return };
    let m = &t.media;
    assert_eq!(m.medium(), Medium::Object);
    assert!(!m.rename_is_atomic());

    // Small: buffered, one PUT on close; readable through the writer before that.
    let small = pattern(100_000, 1);
    let w = m.create("/small/one.bin").unwrap();
    w.write_at(&small[..40_000], 0).unwrap();
    assert_eq!(w.append(&small[40_000..]).unwrap(), 40_000);
    let mut head = vec![0; 10];
    assert_eq!(w.read_at(&mut head, 5).unwrap(), 10);
    assert_eq!(head, small[5..15]);
    assert!(
        matches!(m.stat("/small/one.bin"), Err(Error::NotFound { .. })),
        "visible before close"
    );
    w.close().unwrap();
    let (got, version) = m.get("/small/one.bin").unwrap();
    assert_eq!(got, small);
    let st = m.stat("/small/one.bin").unwrap();
    assert_eq!((st.kind, st.len, st.version), (EntryKind::File, 100_000, Some(version)));
    assert!(st.modified_unix_ns.is_some());

    // An empty object: created on close.
    m.create("/small/empty").unwrap().close().unwrap();
    assert_eq!(m.stat("/small/empty").unwrap().len, 0);
    let r = m.open("/small/empty").unwrap();
    assert_eq!(r.read_at(&mut [0; 8], 0).unwrap(), 0);

    // Large: 20 MiB + a bit in uneven chunks, a multipart upload; ranged reads at odd offsets.
    let len = (20 << 20) + 12_345;
    let big = pattern(len, 2);
    let w = m.create("/big/object").unwrap();
    let chunks = [1 << 20, (3 << 20) + 17, 777, (5 << 20) + 1, 65_537, 9 << 20];
    let (mut at, mut i) = (0, 0);
    while at < len {
        let n = chunks[i % chunks.len()].min(len - at);
        w.write_at(&big[at..at + n], at as u64).unwrap();
        at += n;
        i += 1;
    }
    assert_eq!(w.len().unwrap(), len as u64);
    w.sync().unwrap();
    assert!(matches!(w.append(b"more"), Err(Error::NotSupported { .. })));
    let mut back = vec![0; 4099];
    assert_eq!(w.read_at(&mut back, 7).unwrap(), 4099, "the writer reads the completed object");
    assert_eq!(back, big[7..7 + 4099]);
    w.close().unwrap();

    let r = m.open("/big/object").unwrap();
    assert_eq!(r.len().unwrap(), len as u64);
    for (offset, n) in [
        (0, 1),
        (1, 4095),
        (4097, 1 << 20),
        ((8 << 20) - 3, 7),
        ((8 << 20) + 1, (3 << 20) + 5),
        ((len - 10) as u64, 10),
        ((len - 10) as u64, 100),
        (len as u64, 5),
    ] {
        let mut buf = vec![0; n];
        let got = r.read_at(&mut buf, offset).unwrap();
        let start = (offset as usize).min(len);
        let want = n.min(len - start);
        assert_eq!(got, want, "read of {n} at {offset}");
        assert_eq!(buf[..got], big[start..start + want], "read of {n} at {offset}");
    }
    // Sequentially in small reads (served from the readahead).
    let mut whole = Vec::with_capacity(len);
    let mut buf = vec![0; 65_521];
    loop {
        let n = r.read_at(&mut buf, whole.len() as u64).unwrap();
        if n == 0 {
            break;
        }
        whole.extend_from_slice(&buf[..n]);
    }
    assert!(whole == big, "sequential read differs");
    let (got, _) = m.get("/big/object").unwrap();
    assert!(got == big, "get differs");

    // Concurrent readers: one shared handle and one handle each.
    let r = std::sync::Arc::new(r);
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let r = std::sync::Arc::clone(&r);
            let (m, big) = (m, &big);
            s.spawn(move || {
                let own = m.open("/big/object").unwrap();
                for j in 0..8u64 {
                    let offset = (k * 5_000_003 + j * 611_953) % len as u64;
                    let mut a = vec![0; 300_001];
                    let mut b = vec![0; 300_001];
                    let na = r.read_at(&mut a, offset).unwrap();
                    let nb = own.read_at(&mut b, offset).unwrap();
                    let o = offset as usize;
                    assert_eq!(na, nb);
                    assert!(a[..na] == big[o..o + na] && b[..nb] == big[o..o + nb]);
                }
            });
        }
    });
}

#[test]
fn a_sequential_read_is_one_streaming_get() {
    let Some((_server, t)) = moto("stream") else { return };
    let m = &t.media;
    let len = (20 << 20) + 4321;
    let big = pattern(len, 3);
    m.put("/seq", &big, PutMode::Overwrite).unwrap();

    // 1 MiB reads from the start to the end: one GET, not twenty-one.
    let r = m.open("/seq").unwrap();
    let mut whole = Vec::with_capacity(len);
    let mut buf = vec![0; 1 << 20];
    loop {
        let n = r.read_at(&mut buf, whole.len() as u64).unwrap();
        if n == 0 {
            break;
        }
        whole.extend_from_slice(&buf[..n]);
    }
    assert!(whole == big, "streamed read differs");
    assert_eq!(s3_gets("s3://stream/seq"), 1, "GETs for a sequential read");

    // Small reads: one readahead GET, then one stream for the rest. A read elsewhere drops
    // the stream (a ranged GET); reading on from there streams again.
    let r = m.open("/seq").unwrap();
    let mut small = vec![0; 100_000];
    let mut at = 0;
    while at < 3 << 20 {
        let n = r.read_at(&mut small, at as u64).unwrap();
        assert_eq!(small[..n], big[at..at + n]);
        at += n;
    }
    assert_eq!(s3_gets("s3://stream/seq"), 3);
    let mut at = 15 << 20;
    for _ in 0..4 {
        let n = r.read_at(&mut buf, at as u64).unwrap();
        assert_eq!(buf[..n], big[at..at + n]);
        at += n;
    }
    assert_eq!(s3_gets("s3://stream/seq"), 5);
    drop(r);

    // A replaced object: the stream opened after is refused, never a mix of versions.
    let r = m.open("/seq").unwrap();
    r.read_at(&mut buf, 0).unwrap();
    m.put("/seq", &pattern(len, 4), PutMode::Overwrite).unwrap();
    let r2 = m.open("/seq").unwrap();
    let mut small = vec![0; 10];
    r2.read_at(&mut small, 0).unwrap();
    m.put("/seq", &pattern(len, 5), PutMode::Overwrite).unwrap();
    let e = r2.read_at(&mut buf, 10).unwrap_err();
    assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
    let mut rest = vec![0; len];
    let e = r.read_at(&mut rest, 1 << 20);
    // The first reader's stream was open on its version before the replacement: what it
    // serves is that version whole, or the read is refused.
    match e {
        Ok(n) => assert!(rest[..n] == big[1 << 20..(1 << 20) + n], "a mix of versions"),
        Err(e) => assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}"),
    }
}

#[test]
fn namespace_list_rename_remove_stat() {
    let Some((server, t)) = moto("ns-bucket") else { return };
    let m = &t.media;
    m.mkdir("/d").unwrap();
    for (path, body) in [
        ("/d/a", &b"aa"[..]),
        ("/d/b", b"bbb"),
        ("/d/sub/c", b"c"),
        ("/d/sub/deep/e", b"e"),
        ("/top", b"t"),
    ] {
        m.put(path, body, PutMode::Overwrite).unwrap();
    }
    let listed: Vec<_> =
        m.list("/d").unwrap().into_iter().map(|e| (e.path, e.kind, e.len)).collect();
    assert_eq!(
        listed,
        vec![
            ("/d/a".to_string(), EntryKind::File, 2),
            ("/d/b".to_string(), EntryKind::File, 3),
            ("/d/sub".to_string(), EntryKind::Directory, 0),
        ]
    );
    let root: Vec<_> = m.list("/").unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(root, ["/d", "/top"]);
    assert_eq!(m.list("/d/").unwrap().len(), 3, "a trailing slash names the same directory");
    assert!(m.list("/nothing").unwrap().is_empty(), "a missing prefix lists as empty");
    assert!(matches!(m.list("/top"), Err(Error::NotADirectory { .. })));
    assert!(matches!(m.list("relative"), Err(Error::Invalid(_))));
    assert!(matches!(m.list("/a//b"), Err(Error::Invalid(_))));

    // stat: files by HEAD, directories by what is under them.
    assert_eq!(m.stat("/d/sub").unwrap().kind, EntryKind::Directory);
    assert_eq!(m.stat("/").unwrap().kind, EntryKind::Directory);
    assert!(matches!(m.stat("/d/none"), Err(Error::NotFound { .. })));
    assert!(matches!(m.open("/d/sub"), Err(Error::IsADirectory { .. })));

    // rename: copy + delete.
    m.rename("/d/a", "/d/sub/a2").unwrap();
    assert!(matches!(m.stat("/d/a"), Err(Error::NotFound { .. })));
    assert_eq!(m.get("/d/sub/a2").unwrap().0, b"aa");
    m.rename("/d/sub/a2", "/d/sub/a2").unwrap();
    assert!(matches!(m.rename("/d/gone", "/d/x"), Err(Error::NotFound { .. })));
    assert!(matches!(m.rename("/d/sub", "/d/x"), Err(Error::NotSupported { .. })));

    // remove: a missing object is NotFound; a prefix with objects is not empty.
    m.remove("/d/b").unwrap();
    assert!(matches!(m.remove("/d/b"), Err(Error::NotFound { .. })));
    assert!(matches!(m.remove("/d/sub"), Err(Error::DirectoryNotEmpty { .. })));
    let left: Vec<_> = m.list("/d").unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(left, ["/d/sub"]);

    // attributes: user metadata (none written by the facade).
    assert!(m.attributes("/top").unwrap().is_empty());
    assert!(matches!(m.attributes("/nope"), Err(Error::NotFound { .. })));

    // Writers are sequential; readers read.
    let w = m.create("/seq").unwrap();
    w.write_at(b"abc", 0).unwrap();
    for bad in [w.write_at(b"x", 10), w.write_at(b"x", 1), w.set_len(1)] {
        let e = bad.unwrap_err();
        assert!(matches!(e, Error::NotSupported { .. }), "{e}");
    }
    let why = w.write_at(b"x", 0).unwrap_err().to_string();
    assert!(why.contains("append"), "{why}");
    w.set_len(3).unwrap();
    w.append(b"def").unwrap();
    w.close().unwrap();
    assert_eq!(m.get("/seq").unwrap().0, b"abcdef");
    let r = m.open("/seq").unwrap();
    assert!(matches!(r.write_at(b"z", 6), Err(Error::NotSupported { .. })));
    // A writer dropped without close publishes nothing.
    let w = m.create("/dropped").unwrap();
    w.append(&[1; 1000]).unwrap();
    drop(w);
    assert!(matches!(m.stat("/dropped"), Err(Error::NotFound { .. })));

    // Knobs: write-through is inherent, direct IO meaningless.
    assert_eq!(m.knob_support(Knob::WriteThrough), KnobSupport::Inherent);
    assert_eq!(m.knob_support(Knob::DirectIo), KnobSupport::Meaningless);
    let url = server.url("ns-bucket", "");
    let wt = MediaOptions { write_through: Some(true), ..MediaOptions::default() };
    open_str(&url, Bare::Local, wt).unwrap();
    let dio = MediaOptions { direct_io: Some(true), ..MediaOptions::default() };
    let e = open_str(&url, Bare::Local, dio).unwrap_err();
    assert!(matches!(e, Error::KnobMeaningless { knob: Knob::DirectIo, .. }), "{e}");
    // Read-only: reads work, writes are refused.
    let ro =
        open_str(&url, Bare::Local, MediaOptions { read_only: true, ..MediaOptions::default() })
            .unwrap();
    assert_eq!(ro.media.get("/top").unwrap().0, b"t");
    assert!(matches!(ro.media.put("/top", b"x", PutMode::Overwrite), Err(Error::ReadOnly)));
    assert!(matches!(ro.media.create("/new"), Err(Error::ReadOnly)));
}

#[test]
fn conditional_writes_fence_a_stale_writer() {
    let Some((_server, t)) = moto("fence") else { return };
    let m = &t.media;
    let v1 = m.put("/manifest", b"writer 1", PutMode::Create).unwrap();
    let e = m.put("/manifest", b"again", PutMode::Create).unwrap_err();
    assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
    assert_eq!(m.get("/manifest").unwrap(), (b"writer 1".to_vec(), v1.clone()));

    // Writer 2 read v1 and replaces it; writer 1, still at v1, is refused.
    let (_, seen) = m.get("/manifest").unwrap();
    let v2 = m.put("/manifest", b"writer 2", PutMode::Update(seen)).unwrap();
    assert_ne!(v1, v2);
    let e = m.put("/manifest", b"writer 1 late", PutMode::Update(v1.clone())).unwrap_err();
    assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
    assert!(e.to_string().contains("stale"), "{e}");
    assert_eq!(m.get("/manifest").unwrap(), (b"writer 2".to_vec(), v2.clone()));
    assert_eq!(m.stat("/manifest").unwrap().version, Some(v2.clone()));

    // An update of a removed object fails the same way.
    m.remove("/manifest").unwrap();
    let e = m.put("/manifest", b"x", PutMode::Update(v2)).unwrap_err();
    assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
    let e = m.put("/never", b"x", PutMode::Update(Version("\"nope\"".into()))).unwrap_err();
    assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");

    // A reader holds its version: a replaced object is an error, never a mix of two.
    m.put("/obj", &pattern(3 << 20, 7), PutMode::Overwrite).unwrap();
    let r = m.open("/obj").unwrap();
    let mut buf = vec![0; 10];
    r.read_at(&mut buf, 0).unwrap();
    m.put("/obj", &pattern(3 << 20, 8), PutMode::Overwrite).unwrap();
    let e = r.read_at(&mut buf, 2 << 20).unwrap_err();
    assert!(matches!(e, Error::PreconditionFailed { .. }), "{e}");
}

#[test]
fn failures_are_clear_and_quick() {
    // An endpoint nobody listens on: Unreachable in seconds.
    let url = "s3://b/k?endpoint=http://127.0.0.1:1&region=us-east-1";
    let t = open_s3_with_env(url, MediaOptions::default(), &ENV).unwrap();
    let start = Instant::now();
    let e = t.media.stat("/k").unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    assert!(matches!(e, Error::Remote { kind: RemoteFailure::Unreachable, .. }), "{e}");
    eprintln!("unreachable: {e}");
    let line = e.to_string();
    assert!(line.contains("s3://b/k") && line.contains("127.0.0.1:1"), "{line}");
    let e = t.media.put("/k", b"x", PutMode::Overwrite).unwrap_err();
    assert!(matches!(e, Error::Remote { kind: RemoteFailure::Unreachable, .. }), "{e}");

    // No credentials: one line naming the variables, before any request.
    let e = open_s3_with_env(url, MediaOptions::default(), &[]).unwrap_err();
    assert!(matches!(e, Error::Remote { kind: RemoteFailure::Unauthorized, .. }), "{e}");
    eprintln!("no credentials: {e}");
    let line = e.to_string();
    assert!(line.contains("AWS_ACCESS_KEY_ID") && line.contains("AWS_SECRET_ACCESS_KEY"), "{line}");
    // Credentials never go in the endpoint (nor show in its error).
    let e = open_s3_with_env(
        "s3://b/k?endpoint=http://user:secret@127.0.0.1:1",
        MediaOptions::default(),
        &ENV,
    )
    .unwrap_err();
    assert!(matches!(e, Error::BadUrl { .. }), "{e}");
    assert!(!e.to_string().contains("secret"), "{e}");
    let e =
        open_s3_with_env("s3://b/k?endpoint=ftp://x", MediaOptions::default(), &ENV).unwrap_err();
    assert!(matches!(e, Error::BadUrl { .. }), "{e}");

    // A missing bucket.
    let Some(server) = MotoServer::start() else { return };
    set_s3_env(&ENV);
    let t = open_str(&server.url("nobucket", "k"), Bare::Local, MediaOptions::default()).unwrap();
    for e in [
        t.media.stat("/k").unwrap_err(),
        t.media.put("/k", b"x", PutMode::Overwrite).unwrap_err(),
        t.media.list("/").unwrap_err(),
        t.media.open("/k").unwrap_err(),
        t.media.create("/k").unwrap().close().unwrap_err(),
    ] {
        assert!(matches!(e, Error::Remote { kind: RemoteFailure::NoSuchBucket, .. }), "{e}");
        eprintln!("missing bucket: {e}");
    }
    drop(server);

    // Wrong credentials: moto checks keys against its IAM when told to.
    let Some(server) = MotoServer::start_with_env(&[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]) else {
        return;
    };
    let t = open_str(&server.url("b", "k"), Bare::Local, MediaOptions::default()).unwrap();
    for e in
        [t.media.put("/k", b"x", PutMode::Overwrite).unwrap_err(), t.media.list("/").unwrap_err()]
    {
        assert!(matches!(e, Error::Remote { kind: RemoteFailure::Unauthorized, .. }), "{e}");
        eprintln!("wrong credentials: {e}");
        assert!(!e.to_string().contains("test"), "no key in the error: {e}");
    }
}

#[test]
fn the_server_going_away_mid_upload() {
    let Some((server, t)) = moto("gone-bucket") else { return };
    let w = t.media.create("/half").unwrap();
    w.append(&pattern(9 << 20, 4)).unwrap(); // one part sent, the rest buffered
    drop(server);
    let start = Instant::now();
    let e = w.close().unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(15), "took {:?}", start.elapsed());
    assert!(matches!(e, Error::Remote { kind: RemoteFailure::Unreachable, .. }), "{e}");
    eprintln!("server gone mid-upload: {e}");
}

#[test]
fn works_from_inside_a_tokio_runtime() {
    let Some((_server, t)) = moto("rt-bucket") else { return };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // The facade is synchronous: called on a runtime's thread it must neither panic nor
    // deadlock (it waits on its own runtime, not this one).
    rt.block_on(async {
        t.media.put("/x", b"inside", PutMode::Overwrite).unwrap();
        assert_eq!(t.media.get("/x").unwrap().0, b"inside");
        let w = t.media.create("/y").unwrap();
        w.append(&pattern(9 << 20, 3)).unwrap();
        w.close().unwrap();
    });
    drop(rt);
    assert_eq!(t.media.stat("/y").unwrap().len, 9 << 20);
}
