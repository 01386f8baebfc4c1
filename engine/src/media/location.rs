//! Where a volume lives, and the doors that open one there (issue 24: this knowledge used to
//! be spread over the carrier module, `Volume::open_or_create` and the node's CLI).
//!
//! - [`Location`]: `memory:` or a path (a file or a block device), as a user names it;
//! - [`open_carrier`]: the carrier at a path, a [`DeviceCarrier`](crate::carrier) for a block
//!   device and a file carrier otherwise;
//! - [`open_volume`]: the volume at a path with production knobs, falling back to buffered IO
//!   where the host file system refuses `O_DIRECT` (the one copy of that fallback);
//! - [`open_or_create_volume`]: open what is there, or format a new volume.
//!
//! The volume module never imports this one: media depend on volumes, not the reverse.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::carrier::{self, Carrier, CarrierKind, CarrierOptions, MemoryCarrier};
use crate::error::{Error, Invalid, Result};
use crate::{FormatOptions, Volume, VolumeOptions};

/// Where a volume lives, as a user names it: `memory:` (process memory, gone at exit) or a
/// path (a file, or a block device). `./memory:` names a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Process memory (`memory:`): nothing survives the process.
    Memory,
    /// A file or a block device at this path.
    Path(PathBuf),
}

impl Location {
    /// The spelling of the memory location.
    pub const MEMORY: &'static str = "memory:";

    /// Reads a user's spelling: exactly `memory:` is memory, anything else a path.
    ///
    /// ```
    /// use vellum_engine::media::Location;
    /// assert_eq!(Location::parse("memory:"), Location::Memory);
    /// assert_eq!(Location::parse("./memory:"), Location::Path("./memory:".into()));
    /// ```
    pub fn parse(s: impl AsRef<std::ffi::OsStr>) -> Location {
        let s = s.as_ref();
        if s == Location::MEMORY { Location::Memory } else { Location::Path(s.into()) }
    }

    /// The kind of carrier a volume here lives on.
    pub fn carrier_kind(&self) -> CarrierKind {
        match self {
            Location::Memory => CarrierKind::Memory,
            Location::Path(p) if is_block_device(p) => CarrierKind::Device,
            Location::Path(_) => CarrierKind::File,
        }
    }

    /// True when a volume already exists here to be opened (never for memory).
    pub fn exists(&self) -> bool {
        match self {
            Location::Memory => false,
            Location::Path(p) => p.exists(),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Memory => f.write_str(Location::MEMORY),
            Location::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// True when `path` names a block device.
pub fn is_block_device(path: &Path) -> bool {
    carrier::is_block_device(path)
}

/// Opens the file or block device carrier at `path` with `options`, choosing by what the
/// path is.
pub fn open_carrier(path: &Path, options: CarrierOptions) -> Result<Box<dyn Carrier>> {
    carrier::open_path(path, options)
}

/// True for the error a file carrier gives when the host file system refuses `O_DIRECT`.
fn refuses_direct_io(e: &Error, path: &Path) -> bool {
    matches!(e, Error::Open { source, .. } if source.kind() == std::io::ErrorKind::InvalidInput)
        && !is_block_device(path)
}

/// A new carrier at `path` for a volume or a member, with production knobs (buffered where
/// the host file system refuses `O_DIRECT`): a block device whole, refused (`NotEmpty`) when
/// its first or last MiB is not zero unless `force`; or a new file of `size_bytes`,
/// preallocated and zero-filled (`force`: also over a file that does not look empty).
/// Returns the carrier and whether this call created the file; a file it created is removed
/// again when it fails.
pub fn create_carrier(
    path: &Path,
    size_bytes: Option<u64>,
    force: bool,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<(Box<dyn Carrier>, bool)> {
    if is_block_device(path) {
        let device = carrier::DeviceCarrier::open(path, CarrierOptions::PRODUCTION)?;
        if !force && !device.looks_empty()? {
            return Err(Error::NotEmpty { path: path.to_owned() });
        }
        return Ok((Box::new(device), false));
    }
    let Some(capacity_bytes) = size_bytes else {
        return Err(Error::Invalid(Invalid::Capacity { bytes: 0 }));
    };
    let existed = path.exists();
    let mut create = carrier::CreateOptions {
        capacity_bytes,
        preallocate: true,
        sparse: false,
        force,
        progress,
    };
    let result = match carrier::FileCarrier::create(path, &create, CarrierOptions::PRODUCTION) {
        Err(e) if refuses_direct_io(&e, path) => {
            // The file is there, zero-filled: create it again buffered.
            create.force = true;
            let buffered = CarrierOptions { direct_io: false, ..CarrierOptions::PRODUCTION };
            carrier::FileCarrier::create(path, &create, buffered)
        }
        other => other,
    };
    match result {
        Ok(c) => Ok((Box::new(c), !existed)),
        Err(e) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Err(e)
        }
    }
}

/// Whether `path` may become a carrier without force (what `create_carrier` refuses
/// otherwise): a block device whose first and last MiB read as zeros, a file whose first MiB
/// does, or nothing there yet.
pub fn looks_empty(path: &Path) -> Result<bool> {
    if is_block_device(path) {
        let ro = CarrierOptions { direct_io: true, write_through: false, read_only: true };
        return carrier::DeviceCarrier::open(path, ro)?.looks_empty();
    }
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(source) => return Err(Error::Open { path: path.to_owned(), source }),
    };
    let len =
        file.metadata().map_err(|source| Error::Open { path: path.to_owned(), source })?.len();
    carrier::file_looks_empty(&file, len)
        .map_err(|source| Error::Open { path: path.to_owned(), source })
}

/// Opens the carrier at `path` with production knobs (direct IO, write-through; read-only
/// when asked), or buffered where the host file system refuses `O_DIRECT` (tmpfs). A block
/// device is never opened buffered.
pub fn open_production_carrier(path: &Path, read_only: bool) -> Result<Box<dyn Carrier>> {
    let production = CarrierOptions { read_only, ..CarrierOptions::PRODUCTION };
    match open_carrier(path, production) {
        Err(e) if refuses_direct_io(&e, path) => {
            open_carrier(path, CarrierOptions { direct_io: false, ..production })
        }
        other => other,
    }
}

/// Opens the volume on the file or block device at `path` with production knobs (direct IO
/// and write-through), or buffered where the host file system refuses `O_DIRECT`; read-only
/// when asked. Every opener of a volume by path (the CLI, `vellum serve`, `virtual://`) goes
/// through here.
pub fn open_volume(path: &Path, read_only: bool) -> Result<Volume> {
    open_volume_with(path, None, None, read_only)
}

/// [`open_volume`] with the knobs given where they are `Some` (no fallback for a direct-IO
/// knob given explicitly).
pub(crate) fn open_volume_with(
    path: &Path,
    direct_io: Option<bool>,
    write_through: Option<bool>,
    read_only: bool,
) -> Result<Volume> {
    let options = VolumeOptions { read_only, ..VolumeOptions::default() };
    let knobs = CarrierOptions {
        direct_io: direct_io.unwrap_or(true),
        write_through: write_through.unwrap_or(true),
        read_only,
    };
    // Each member with its own knobs: one on a file system that refuses O_DIRECT falls back
    // to buffered IO alone.
    let member = |p: &Path| -> Result<Box<dyn Carrier>> {
        match open_carrier(p, knobs) {
            Err(e) if direct_io.is_none() && refuses_direct_io(&e, p) => {
                open_carrier(p, CarrierOptions { direct_io: false, ..knobs })
            }
            other => other,
        }
    };
    match Volume::open_path_with(path, knobs, options, &member) {
        Err(e) if direct_io.is_none() && refuses_direct_io(&e, path) => Volume::open_path_with(
            path,
            CarrierOptions { direct_io: false, ..knobs },
            options,
            &member,
        ),
        other => other,
    }
}

/// Opens the volume at `location`, or formats a new one with `format` there when there is
/// none (a missing file; memory, always: `format.capacity_bytes` is then required). The
/// carrier knobs that mean nothing on the medium are dropped (write-through on memory); the
/// volume options are kept as given, so a cache asked for on memory is refused. An existing
/// volume keeps its own layout; a block device is opened, never formatted implicitly.
/// Returns the volume and whether it was created.
///
/// ```
/// use vellum_engine::media::{CarrierOptions, Location, open_or_create_volume};
/// use vellum_engine::{FormatOptions, VolumeOptions};
///
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let location = Location::parse(dir.path().join("log.vlm"));
/// let format = FormatOptions::journaled(16 << 20);
/// let (volume, created) =
///     open_or_create_volume(&location, &format, CarrierOptions::PRODUCTION, VolumeOptions::default())?;
/// assert!(created);
/// volume.close()?;
/// let (_volume, created) =
///     open_or_create_volume(&location, &format, CarrierOptions::PRODUCTION, VolumeOptions::default())?;
/// assert!(!created); // an existing volume keeps its own layout
/// # Ok::<(), vellum_engine::Error>(())
/// ```
pub fn open_or_create_volume(
    location: &Location,
    format: &FormatOptions<'_>,
    carrier: CarrierOptions,
    options: VolumeOptions,
) -> Result<(Volume, bool)> {
    let carrier = location.carrier_kind().adapt(carrier);
    match location {
        Location::Memory => {
            let Some(capacity_bytes) = format.capacity_bytes else {
                return Err(Error::Invalid(Invalid::Capacity { bytes: 0 }));
            };
            let memory = Box::new(MemoryCarrier::new(capacity_bytes));
            Ok((Volume::format(memory, format, options)?, true))
        }
        Location::Path(p) if p.exists() => Ok((Volume::open_path(p, carrier, options)?, false)),
        Location::Path(p) => Ok((Volume::create_path(p, format, carrier, options)?, true)),
    }
}
