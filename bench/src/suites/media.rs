//! `media`: the media facade's data plane next to each medium's raw floor, in the same run
//! (issue 24, "Benchmarks").
//!
//! - `local://`, `virtual://`, `memory:`: sequential 1 MiB writes and reads through the
//!   facade's [`MediaFile`] against the floor of the same medium with the same knobs
//!   (buffered, no write-through): a host file by `std::fs` positional IO, the raw carrier
//!   (`carrier::open_path`, a `FileCarrier`), `memcpy` into a `Vec`. Target: at least 0.9x.
//! - `s3://` on a moto server the suite starts itself: per-request latency of a 1 MiB PUT
//!   and a 1 MiB ranged GET through the facade next to a plain `object_store` client doing
//!   the same requests (target: the facade's latency at most 1/0.9 of the plain client's);
//!   and archive-like: the seconds to upload and to read back `--archive-mib` MiB (1 GiB at
//!   `--scale 1`) through the facade next to the plain client's multipart upload and GET.
//!
//! A medium that cannot be opened in this build (not built yet, no moto) is listed under
//! "skipped" with the reason, never silently left out.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use vellum_engine::carrier::CarrierOptions;
use vellum_engine::media::testing::MotoServer;
use vellum_engine::media::{self, Bare, MediaFile, MediaOptions, Target};

use super::e;
use crate::stats::{Measurement, Unit};
use crate::sys::time_us;
use crate::{Options, SuiteResult};

const MIB: usize = 1 << 20;

/// The facade's knobs for the data-plane cases: buffered, no write-through, as the floors.
const BUFFERED: MediaOptions =
    MediaOptions { read_only: false, direct_io: Some(false), write_through: Some(false) };

/// MB/s of one 1 MiB operation that took `us` microseconds.
fn mbps(us: f64) -> f64 {
    1.048_576 / (us / 1e6)
}

/// One way of writing and reading 1 MiB at an offset.
type Op<'a> = Box<dyn Fn(&mut [u8], u64, bool) + 'a>;

/// Measures sequential 1 MiB writes, then reads, of `facade` against `floor` over `chunks`
/// MiB (both warmed first: every page touched), as two cases named after `medium`.
fn seq_pair(
    r: &mut SuiteResult,
    opts: &Options,
    medium: &str,
    floor_name: &str,
    chunks: usize,
    facade: &Op<'_>,
    floor: &Op<'_>,
) {
    let src = crate::payload(MIB, 11);
    let mut buf = vec![0u8; MIB];
    buf.copy_from_slice(&src);
    for i in 0..chunks {
        facade(&mut buf, (i * MIB) as u64, true);
        floor(&mut buf, (i * MIB) as u64, true);
    }
    for (what, write) in [("writes", true), ("reads", false)] {
        let case = format!("{medium} sequential 1 MiB {what}");
        let mut ms = [
            Measurement::new("media", &case, "facade", Some(floor_name), Unit::MegabytesPerSec),
            Measurement::new("media", &case, floor_name, None, Unit::MegabytesPerSec),
        ];
        crate::stats::interleaved(
            &mut ms,
            (opts.reps, chunks, 8),
            &mut buf,
            |_| {},
            |buf, v, i| {
                let at = ((i % chunks) * MIB) as u64;
                let us = if v == 0 {
                    time_us(|| facade(buf, at, write))
                } else {
                    time_us(|| floor(buf, at, write))
                };
                mbps(us)
            },
        );
        r.measurements.extend(ms);
        r.target(
            &format!("{case}: facade >= 0.9x {floor_name}"),
            r.ratio(&case, "facade"),
            |x| x >= 0.9,
            "",
        );
    }
}

/// A facade file's positional IO as an [`Op`].
fn facade_op(f: &dyn MediaFile) -> Op<'_> {
    Box::new(move |buf, at, write| {
        if write {
            f.write_at(buf, at).unwrap_or_else(|e| panic!("facade write: {e}"));
        } else {
            let n = f.read_at(buf, at).unwrap_or_else(|e| panic!("facade read: {e}"));
            assert_eq!(n, buf.len(), "facade short read");
        }
    })
}

fn open_media(url: &str, options: MediaOptions) -> Result<Target, String> {
    media::open_str(url, Bare::Local, options).map_err(|e| format!("{url}: {e}"))
}

fn local(r: &mut SuiteResult, opts: &Options, dir: &Path, chunks: usize) -> Result<(), String> {
    let facade_path = dir.join("media-local-facade");
    let floor_path = dir.join("media-local-floor");
    let target = match open_media(&format!("local://{}", facade_path.display()), BUFFERED) {
        Ok(t) => t,
        Err(why) => {
            r.skipped.push(format!("local://: {why}"));
            return Ok(());
        }
    };
    let file = target.media.create(&target.path).map_err(e("local:// create"))?;
    let floor = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&floor_path)
        .map_err(e("host file"))?;
    let floor_op: Op<'_> = Box::new(|buf, at, write| {
        if write {
            floor.write_all_at(buf, at).unwrap_or_else(|e| panic!("host write: {e}"));
        } else {
            floor.read_exact_at(buf, at).unwrap_or_else(|e| panic!("host read: {e}"));
        }
    });
    seq_pair(
        r,
        opts,
        "local://",
        "host file (std::fs)",
        chunks,
        &facade_op(file.as_ref()),
        &floor_op,
    );
    file.close().map_err(e("local:// close"))?;
    let _ = std::fs::remove_file(&facade_path);
    let _ = std::fs::remove_file(&floor_path);
    Ok(())
}

fn virtual_(r: &mut SuiteResult, opts: &Options, dir: &Path, chunks: usize) -> Result<(), String> {
    let bytes = (chunks * MIB) as u64;
    let vol = dir.join("media-virtual.vlm");
    let raw = dir.join("media-virtual-raw");
    let knobs = CarrierOptions { direct_io: false, write_through: false, read_only: false };
    super::fresh_volume(&vol, bytes + bytes / 4 + (32 << 20), knobs)?
        .close()
        .map_err(e("closing the fresh volume"))?;
    let target = match open_media(&format!("virtual://{}", vol.display()), BUFFERED) {
        Ok(t) => t,
        Err(why) => {
            r.skipped.push(format!("virtual://: {why}"));
            return Ok(());
        }
    };
    let file = target.media.create("/seq").map_err(e("virtual:// create"))?;
    crate::sys::zero_file(&raw, bytes).map_err(e("raw carrier file"))?;
    let carrier = media::open_carrier(&raw, knobs).map_err(e("raw carrier"))?;
    let floor_op: Op<'_> = Box::new(|buf, at, write| {
        if write {
            carrier.write_all_at(buf, at).unwrap_or_else(|e| panic!("carrier write: {e}"));
        } else {
            carrier.read_exact_at(buf, at).unwrap_or_else(|e| panic!("carrier read: {e}"));
        }
    });
    seq_pair(r, opts, "virtual://", "raw carrier", chunks, &facade_op(file.as_ref()), &floor_op);
    file.close().map_err(e("virtual:// close"))?;
    drop(floor_op);
    drop(target);
    drop(carrier);
    let _ = std::fs::remove_file(&vol);
    let _ = std::fs::remove_file(&raw);
    Ok(())
}

fn memory(r: &mut SuiteResult, opts: &Options, chunks: usize) -> Result<(), String> {
    let options = MediaOptions::default();
    let target = match open_media("memory:/media-bench", options) {
        Ok(t) => t,
        Err(why) => {
            r.skipped.push(format!("memory:: {why}"));
            return Ok(());
        }
    };
    let file = target.media.create(&target.path).map_err(e("memory: create"))?;
    let floor = std::sync::Mutex::new(vec![1u8; chunks * MIB]);
    let floor_op: Op<'_> = Box::new(|buf, at, write| {
        let mut v = floor.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = at as usize;
        if write {
            v[at..at + buf.len()].copy_from_slice(buf);
        } else {
            buf.copy_from_slice(&v[at..at + buf.len()]);
        }
    });
    seq_pair(r, opts, "memory:", "memcpy", chunks, &facade_op(file.as_ref()), &floor_op);
    file.close().map_err(e("memory: close"))?;
    let _ = target.media.remove(&target.path);
    Ok(())
}

/// The plain client: object_store's AWS backend on the same server.
fn plain_client(moto: &MotoServer, bucket: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(moto.endpoint())
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .map_err(e("object_store client"))?;
    Ok(Arc::new(store))
}

fn s3(r: &mut SuiteResult, opts: &Options) -> Result<(), String> {
    let Some(moto) = MotoServer::start() else {
        r.skipped
            .push("s3://: moto_server is not installed (pip install 'moto[s3,server]')".into());
        return Ok(());
    };
    // The facade reads credentials from the usual AWS environment (moto accepts any); the
    // suite cannot set them itself (no unsafe `set_var` in this workspace).
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        r.skipped.push(
            "s3://: no AWS credentials in the environment: run with AWS_ACCESS_KEY_ID=test \
             AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 (moto accepts any)"
                .into(),
        );
        return Ok(());
    }
    let bucket = "media-bench";
    moto.create_bucket(bucket).map_err(e("creating the bucket"))?;
    let target = match open_media(&moto.url(bucket, ""), MediaOptions::default()) {
        Ok(t) => t,
        Err(why) => {
            r.skipped.push(format!("s3://: {why}"));
            return Ok(());
        }
    };
    let media = Arc::clone(&target.media);
    let plain = plain_client(&moto, bucket)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(e("tokio runtime"))?;
    let body = bytes::Bytes::from(crate::payload(MIB, 21));
    let requests = opts.n(200, 20);

    // Per-request latency: 1 MiB PUT (a whole object) and 1 MiB ranged GET.
    let case = "s3:// 1 MiB PUT";
    let base = "object_store client";
    let mut ms = [
        Measurement::new("media", case, "facade", Some(base), Unit::Millis),
        Measurement::new("media", case, base, None, Unit::Millis),
    ];
    crate::stats::interleaved(
        &mut ms,
        (opts.reps, requests, 4),
        &mut (),
        |()| {},
        |(), v, i| {
            let key = format!("put/{v}-{}", i % 16);
            let us = if v == 0 {
                time_us(|| {
                    let f = media.create(&format!("/{key}")).unwrap_or_else(|e| panic!("{e}"));
                    f.write_at(&body, 0).unwrap_or_else(|e| panic!("{e}"));
                    f.close().unwrap_or_else(|e| panic!("{e}"));
                })
            } else {
                time_us(|| {
                    rt.block_on(plain.put(&key.as_str().into(), body.clone().into()))
                        .unwrap_or_else(|e| panic!("{e}"));
                })
            };
            us / 1e3
        },
    );
    r.measurements.extend(ms);
    r.target(
        &format!("{case}: facade latency <= 1.11x the plain client (>= 0.9x throughput)"),
        r.ratio(case, "facade"),
        |x| x <= 1.0 / 0.9,
        "",
    );

    // Ranged GETs of 1 MiB out of a 16 MiB object, at offsets that never continue the
    // previous read (7 steps apart, modulo 16): a sequential read would be served by the s3
    // medium's read-ahead stream, which is the archive case below, not a ranged GET.
    let big: Vec<u8> = (0..16u64).flat_map(|s| crate::payload(MIB, 100 + s)).collect();
    rt.block_on(plain.put(&"get/big".into(), bytes::Bytes::from(big).into()))
        .map_err(e("uploading the GET object"))?;
    let reader = media.open("/get/big").map_err(e("s3:// open"))?;
    let case = "s3:// 1 MiB ranged GET";
    let mut ms = [
        Measurement::new("media", case, "facade", Some(base), Unit::Millis),
        Measurement::new("media", case, base, None, Unit::Millis),
    ];
    let mut buf = vec![0u8; MIB];
    crate::stats::interleaved(
        &mut ms,
        (opts.reps, requests, 4),
        &mut buf,
        |_| {},
        |buf, v, i| {
            let at = (((i * 7) % 16) * MIB) as u64;
            let us = if v == 0 {
                time_us(|| {
                    let n = reader.read_at(buf, at).unwrap_or_else(|e| panic!("{e}"));
                    assert_eq!(n, MIB);
                })
            } else {
                time_us(|| {
                    let b = rt
                        .block_on(plain.get_range(&"get/big".into(), at..at + MIB as u64))
                        .unwrap_or_else(|e| panic!("{e}"));
                    buf.copy_from_slice(&b);
                })
            };
            us / 1e3
        },
    );
    r.measurements.extend(ms);
    r.target(
        &format!("{case}: facade latency <= 1.11x the plain client (>= 0.9x throughput)"),
        r.ratio(case, "facade"),
        |x| x <= 1.0 / 0.9,
        "",
    );
    drop(reader);

    // Archive-like: upload then read back a large object, whole.
    let archive = opts.archive_bytes.unwrap_or_else(|| opts.bytes(1 << 30, 32 << 20));
    let chunks = (archive as usize).div_ceil(MIB);
    let up = format!("archive upload ({} MiB)", archive >> 20);
    let down = format!("archive read back ({} MiB)", archive >> 20);
    let mut ms = [
        Measurement::new("media", &up, "facade", Some(base), Unit::MegabytesPerSec),
        Measurement::new("media", &up, base, None, Unit::MegabytesPerSec),
        Measurement::new("media", &down, "facade", Some(base), Unit::MegabytesPerSec),
        Measurement::new("media", &down, base, None, Unit::MegabytesPerSec),
    ];
    let reps = opts.reps.min(3);
    let mb = archive as f64 / 1e6;
    let mut secs = [0.0f64; 4];
    for rep in 0..reps {
        for turn in 0..2 {
            let v = (rep + turn) % 2;
            // Upload.
            let started = Instant::now();
            if v == 0 {
                let f = media.create("/archive/facade").map_err(e("s3:// create"))?;
                for i in 0..chunks {
                    f.write_at(&body, (i * MIB) as u64).map_err(e("s3:// write"))?;
                }
                f.close().map_err(e("s3:// close"))?;
            } else {
                rt.block_on(async {
                    let upload = plain.put_multipart(&"archive/plain".into()).await?;
                    let mut w = WriteMultipart::new(upload);
                    for _ in 0..chunks {
                        w.write(&body);
                    }
                    w.finish().await.map(drop)
                })
                .map_err(e("object_store upload"))?;
            }
            let s = started.elapsed().as_secs_f64();
            ms[v].add_rep(vec![mb / s]);
            secs[v] += s / reps as f64;
            // Read back.
            let started = Instant::now();
            let got = if v == 0 {
                let f = media.open("/archive/facade").map_err(e("s3:// open"))?;
                let mut buf = vec![0u8; 8 * MIB];
                let mut at = 0u64;
                loop {
                    let n = f.read_at(&mut buf, at).map_err(e("s3:// read"))?;
                    if n == 0 {
                        break at;
                    }
                    at += n as u64;
                }
            } else {
                rt.block_on(async {
                    use futures::StreamExt;
                    let mut stream = plain.get(&"archive/plain".into()).await?.into_stream();
                    let mut n = 0u64;
                    while let Some(b) = stream.next().await {
                        n += b?.len() as u64;
                    }
                    Ok::<u64, object_store::Error>(n)
                })
                .map_err(e("object_store read"))?
            };
            if got != (chunks * MIB) as u64 {
                return Err(format!("archive read back {got} bytes of {}", chunks * MIB));
            }
            let s = started.elapsed().as_secs_f64();
            ms[2 + v].add_rep(vec![mb / s]);
            secs[2 + v] += s / reps as f64;
        }
    }
    for (m, s) in ms.iter_mut().zip(secs) {
        m.set_extra("seconds", s);
    }
    r.measurements.extend(ms);
    r.target(
        &format!("{up}: facade >= 0.9x the plain client"),
        r.ratio(&up, "facade"),
        |x| x >= 0.9,
        "",
    );
    r.target(
        &format!("{down}: facade >= 0.9x the plain client"),
        r.ratio(&down, "facade"),
        |x| x >= 0.9,
        "",
    );
    r.notes.push(format!(
        "s3://: moto_server on loopback (one Python process, so absolute figures are moto's, not \
         S3's); {requests} requests per repetition and variant; archive: {} MiB, mean seconds \
         upload facade {:.2} / plain {:.2}, read back facade {:.2} / plain {:.2} (the plain \
         client uploads with WriteMultipart and reads with one streamed GET).",
        archive >> 20,
        secs[0],
        secs[1],
        secs[2],
        secs[3]
    ));
    Ok(())
}

pub fn run(opts: &Options) -> Result<SuiteResult, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut r = SuiteResult::new("media");
    let total = opts.bytes(256 << 20, 16 << 20);
    let chunks = (total >> 20) as usize;
    local(&mut r, opts, &opts.dir, chunks)?;
    virtual_(&mut r, opts, &opts.dir, chunks)?;
    memory(&mut r, opts, chunks)?;
    s3(&mut r, opts)?;
    r.notes.push(format!(
        "local://, virtual://, memory:: {chunks} MiB per repetition and variant, buffered, no \
         write-through on both sides (page cache warm), the floor the same medium without the \
         facade: a host file by std::fs positional IO, the raw FileCarrier, memcpy into a Vec."
    ));
    Ok(r)
}
