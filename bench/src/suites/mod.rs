//! The suites. Each measures a thing and its baseline in the same run, interleaved.

pub mod appender;
pub mod cache;
pub mod carrier;
pub mod carriers;
pub mod cluster;
pub mod devops;
pub mod harness;
pub mod hdd;
pub mod journal;
pub mod log;
pub mod media;
pub mod memory;
pub mod metadata;
pub mod multiraft;
#[cfg(feature = "peers")]
pub mod peers;
pub mod prealloc;
pub mod recovery;
pub mod scaleout;
pub mod tls;

use std::path::Path;

use vellum_engine::carrier::CarrierOptions;
use vellum_engine::{FormatOptions, Volume, VolumeOptions};

/// A fresh preallocated, zero-filled volume file with the given carrier knobs.
pub fn fresh_volume(path: &Path, bytes: u64, knobs: CarrierOptions) -> Result<Volume, String> {
    let _ = std::fs::remove_file(path);
    let fmt =
        FormatOptions { capacity_bytes: Some(bytes), force: true, ..FormatOptions::default() };
    Volume::create_path(path, &fmt, knobs, VolumeOptions::default())
        .map_err(|e| format!("creating {}: {e}", path.display()))
}

/// Converts an engine error for a suite.
pub fn e<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |err| format!("{what}: {err}")
}
