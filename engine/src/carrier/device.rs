//! `DeviceCarrier`: a Linux block device or partition, opened natively.
//!
//! Capacity comes from BLKGETSIZE64 (a device's `fstat` size is 0), the sector sizes from
//! BLKSSZGET / BLKPBSZGET, and the direct-IO alignment from `statx(STATX_DIOALIGN)` where the
//! kernel reports it (the logical sector size otherwise). Direct IO is forced: an advisory
//! lock cannot stop outside writers, so the kernel's cache of the device is not trusted. The
//! device is opened with O_EXCL (the kernel refuses it while mounted) and `flock`ed, so a
//! second Vellum opener gets `Locked`.
//!
//! A durable write is a direct write followed by one cache flush (`fdatasync`, which on a
//! block device is exactly that). The kernel's O_DSYNC on a block device costs more: it
//! issues the write with FUA and then flushes anyway, and without FUA support the block
//! layer adds a second flush to emulate it (1 write + 2 flushes per durable write, seen at
//! the block_rq_issue tracepoint by `vellum-bench devops`).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::fd::FdCore;
use super::file::EMPTY_PROBE_LEN;
use super::{Carrier, CarrierKind, CarrierOptions, CarrierStats, Geometry, sys};
use crate::aligned::AlignedBuf;
use crate::error::{Error, Result};

/// Attempts (25 ms apart) to open and lock the device before giving up with `Locked` or
/// `DeviceBusy`.
const LOCK_RETRIES: u32 = 80;

/// A volume carrier on a block device.
#[derive(Debug)]
pub struct DeviceCarrier {
    core: FdCore,
    path: PathBuf,
}

fn open_error(path: &Path, source: io::Error) -> Error {
    Error::Open { path: path.to_owned(), source }
}

impl DeviceCarrier {
    /// Opens `path` (a block device) for a volume. Direct IO is forced whatever
    /// `options.direct_io` says.
    pub fn open(path: &Path, options: CarrierOptions) -> Result<DeviceCarrier> {
        let options = CarrierOptions { direct_io: true, ..options };
        let mut flags = libc::O_CLOEXEC | libc::O_DIRECT;
        if !options.read_only {
            flags |= libc::O_EXCL;
        }
        // Another opener may hold the device for a moment: udev takes a brief shared flock
        // while it probes a device that was just written and closed (systemd's block-device
        // locking protocol), and losetup locks a loop device while it sets it up. Wait such
        // holders out for a while before calling the device locked or busy.
        let mut tries = 0;
        let file = loop {
            let busy = match OpenOptions::new()
                .read(true)
                .write(!options.read_only)
                .custom_flags(flags)
                .open(path)
            {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => true,
                Err(e) => return Err(open_error(path, e)),
                Ok(file) => {
                    Self::check_block_device(&file, path)?;
                    match sys::flock(file.as_fd(), !options.read_only) {
                        Ok(()) => break file,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                        Err(e) => return Err(open_error(path, e)),
                    }
                }
            };
            if tries == LOCK_RETRIES {
                return Err(if busy {
                    Self::busy(path)
                } else {
                    Error::Locked { path: path.to_owned() }
                });
            }
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(25));
        };
        let geometry = Self::probe(&file).map_err(|e| open_error(path, e))?;
        let core = FdCore::new(file, options, geometry).with_flush_writes();
        Ok(DeviceCarrier { core, path: path.to_owned() })
    }

    fn check_block_device(file: &File, path: &Path) -> Result<()> {
        use std::os::unix::fs::FileTypeExt;
        let meta = file.metadata().map_err(|e| open_error(path, e))?;
        if meta.file_type().is_block_device() {
            Ok(())
        } else {
            Err(open_error(path, io::Error::new(io::ErrorKind::InvalidInput, "not a block device")))
        }
    }

    /// EBUSY from O_EXCL: another Vellum opener (which also holds the flock) or the kernel.
    fn busy(path: &Path) -> Error {
        let held_by_vellum = File::open(path).ok().is_some_and(|f| {
            sys::flock(f.as_fd(), false).is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock)
        });
        if held_by_vellum {
            Error::Locked { path: path.to_owned() }
        } else {
            Error::DeviceBusy { path: path.to_owned() }
        }
    }

    fn probe(file: &File) -> io::Result<Geometry> {
        let fd = file.as_fd();
        let len_bytes = sys::block_device_size(fd)?;
        let logical_sector = sys::logical_sector_size(fd)?;
        let physical_sector = sys::physical_sector_size(fd)?.max(logical_sector);
        let (mem_align, offset_align) =
            sys::dio_alignment(fd).unwrap_or((logical_sector, logical_sector));
        Ok(Geometry { len_bytes, logical_sector, physical_sector, mem_align, offset_align })
    }

    /// True when the first and last MiB of the device read as zeros: formatting anything
    /// else needs an explicit force.
    pub fn looks_empty(&self) -> Result<bool> {
        let len = self.core.geometry().len_bytes;
        let probe = (EMPTY_PROBE_LEN as u64).min(len);
        let align = self.core.geometry().offset_align;
        let tail = (len - probe) / u64::from(align) * u64::from(align);
        let mut buf = AlignedBuf::zeroed(probe as usize, 4096);
        for at in [0, tail] {
            self.core
                .read_exact_at(buf.as_mut_slice(), at)
                .map_err(|e| open_error(&self.path, e))?;
            if buf.as_slice().iter().any(|&b| b != 0) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The device path this carrier was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Carrier for DeviceCarrier {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.core.read_exact_at(buf, offset)
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        self.core.read_vectored_at(bufs, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.core.write_vectored_at(bufs, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.core.write_at(buf, offset, false)
    }
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.core.write_at(buf, offset, true)
    }
    fn barrier(&self) -> io::Result<()> {
        self.core.barrier()
    }
    fn grow(&self, len_bytes: u64, _sparse: bool) -> io::Result<()> {
        if len_bytes <= self.core.geometry().len_bytes {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::StorageFull, "a block device cannot grow"))
        }
    }
    fn geometry(&self) -> Geometry {
        self.core.geometry()
    }
    fn options(&self) -> CarrierOptions {
        self.core.options()
    }
    fn medium(&self) -> CarrierKind {
        CarrierKind::Device
    }
    fn stats(&self) -> &CarrierStats {
        self.core.stats()
    }
}
