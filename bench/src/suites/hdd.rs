//! `hdd-model`: the device operations measured by `devops` turned into commit latency on a
//! modelled 7,200 rpm drive. A model, not a measurement: the parameters are stated, the
//! operation counts are the ones this run measured.

use crate::SuiteResult;
use crate::stats::{Measurement, Unit};

/// 7,200 rpm: one rotation is 8.33 ms; a write waits half of one for its sector on average.
pub const HALF_ROTATION_MS: f64 = 60_000.0 / 7_200.0 / 2.0;
/// Average seek of a 3.5" 7,200 rpm drive.
pub const SEEK_MS: f64 = 8.5;
/// A cache flush with nothing left to write: one command round trip.
pub const EMPTY_FLUSH_MS: f64 = 0.1;
/// Media transfer rate.
pub const TRANSFER_MB_S: f64 = 150.0;

/// Modelled milliseconds for one operation of `writes` data writes of `bytes` in total and
/// `flushes` cache flushes, on a drive with its write cache on: every data write reaches the
/// platter (half a rotation on average) when a flush forces it out, every write after the
/// first of the operation lands elsewhere (a seek), and a flush beyond one per write finds
/// the cache clean (a command round trip).
pub fn model_ms(writes: f64, flushes: f64, bytes: f64) -> f64 {
    writes * HALF_ROTATION_MS
        + (writes - 1.0).max(0.0) * SEEK_MS
        + (flushes - writes).max(0.0) * EMPTY_FLUSH_MS
        + bytes / (TRANSFER_MB_S * 1e3)
}

/// The harness case and variant whose counts feed the commit-path model.
const HARNESS_CASE: &str = "1 clients, 256 B writes";
const HARNESS_VARIANT: &str = "vellum, file volumes";
/// The same counted through the openraft 0.10 adapter as the node configures it.
const HARNESS_VARIANT_010: &str =
    "vellum on openraft 0.10, file volumes, replicate submitted entries";

/// A 1-client commit of a 3-node cluster on modelled drives, from the durable writes per
/// client write the `harness` suite counted on the leader and a follower. Under openraft 0.9
/// the leader's append completes before replication starts, so its writes and a follower's
/// are in series; etcd's leader writes in parallel with its followers (one write's time), and
/// so does openraft 0.10 with `broadcast_submitted_on_append` (the slower of the two).
fn commit_path(r: &mut SuiteResult, harness: &SuiteResult) {
    let Some(m) = harness.find(HARNESS_CASE, HARNESS_VARIANT) else {
        r.skipped.push("the commit-path model needs the harness suite's counts".into());
        return;
    };
    let (Some(leader), Some(follower)) =
        (m.extra("leader durable writes per write"), m.extra("follower durable writes per write"))
    else {
        r.skipped.push("the harness suite's counts lack the durable writes per write".into());
        return;
    };
    let one = model_ms(1.0, 1.0, 4096.0);
    let case = "3-node commit, 1 client (model)";
    let etcd = "etcd-style: leader writes in parallel with followers (1 write)";
    let parallel_010 = harness.find(HARNESS_CASE, HARNESS_VARIANT_010).and_then(|m| {
        let l = m.extra("leader durable writes per write")?;
        let f = m.extra("follower durable writes per write")?;
        Some((
            format!(
                "vellum on openraft 0.10: leader in parallel with followers, counted {l:.2} and {f:.2} writes"
            ),
            l.max(f),
        ))
    });
    let rows = [
        (etcd.to_string(), 1.0),
        (
            format!(
                "vellum on openraft 0.9: leader then follower, counted {leader:.2} + {follower:.2} writes"
            ),
            leader + follower,
        ),
        (
            "vellum before this change: + a durable save_committed (3 writes in series)"
                .to_string(),
            leader + follower + 1.0,
        ),
    ];
    let rows: Vec<(String, f64)> = rows.into_iter().chain(parallel_010).collect();
    for (i, (variant, writes)) in rows.iter().enumerate() {
        let mut out =
            Measurement::new("hdd-model", case, variant, (i > 0).then_some(etcd), Unit::Millis);
        out.add_rep(vec![writes * one]);
        out.set_extra("durable writes in series", *writes);
        r.measurements.push(out);
    }
}

pub fn run(devops: Option<&SuiteResult>, harness: Option<&SuiteResult>) -> SuiteResult {
    let mut r = SuiteResult::new("hdd-model");
    match harness {
        Some(h) => commit_path(&mut r, h),
        None => r.skipped.push(
            "the commit-path model needs the harness suite's counts from the same run".into(),
        ),
    }
    let Some(d) = devops.filter(|d| !d.measurements.is_empty()) else {
        r.skipped
            .push("needs the devops suite's counts from the same run (devops needs root)".into());
        return r;
    };
    let per_fdatasync = d
        .find("calibration", "fdatasync of the device")
        .and_then(|m| m.extra("flushes/op"))
        .unwrap_or(1.0)
        .max(1e-9);
    let floor = "raw O_DIRECT pwrite + fdatasync";
    for m in d.measurements.iter().filter(|m| m.case != "calibration") {
        let (w, f, b) = (
            m.extra("data writes/op").unwrap_or(0.0),
            m.extra("flushes/op").unwrap_or(0.0) / per_fdatasync,
            m.extra("bytes/op").unwrap_or(0.0),
        );
        let mut out = Measurement::new(
            "hdd-model",
            &m.case,
            &m.variant,
            (m.case == "durable 4 KiB append" && m.variant != floor).then_some(floor),
            Unit::Millis,
        );
        out.add_rep(vec![model_ms(w, f, b)]);
        out.set_extra("data writes/op", w);
        out.set_extra("flushes/op", f);
        r.measurements.push(out);
    }
    r.notes.push(format!(
        "A model of a 7,200 rpm drive with its write cache on and no FUA, fed with the request counts devops measured in this run: each data write costs a half rotation ({HALF_ROTATION_MS:.2} ms) when a flush forces it to the platter, each further write of the same operation a seek ({SEEK_MS} ms, assumed elsewhere on the platter: a journal, a B-tree page), each flush beyond one per write {EMPTY_FLUSH_MS} ms (the cache is already clean), transfer at {TRANSFER_MB_S} MB/s. Queueing, rotational position of consecutive appends and the drive's own reordering are not modelled."
    ));
    r
}
