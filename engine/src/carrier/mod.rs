//! Carriers: the media a volume lives on (FORMAT.md, "Media assumptions").
//!
//! A carrier is a flat, positional byte store with two durability primitives: a `barrier`
//! after which every write that returned before it is on stable storage, and a
//! `write_durable_at` that is on stable storage when it returns (write-through: O_DIRECT +
//! `pwritev2(RWF_DSYNC)`, never an `fsync`). The volume above decides the order of writes;
//! a carrier never reorders what it was told is durable, and never reports durability it
//! does not have.
//!
//! Every carrier counts its own operations in [`CarrierStats`] (writes, bytes, durable writes,
//! barriers): tests assert those counts, and the same numbers are exported as metrics.

mod device;
#[cfg(any(test, feature = "test-util"))]
mod faulty;
mod fd;
mod file;
mod memory;
mod stats;
#[allow(unsafe_code)]
mod sys;

use std::fmt;
use std::io;
use std::path::Path;

pub use crate::aligned::AlignedBuf;
pub use device::DeviceCarrier;
#[cfg(any(test, feature = "test-util"))]
pub use faulty::{
    CrashPlan, FaultRng, FaultyCarrier, InjectedError, OpKind, OpRecord, PowerGroup, WriteHook,
};
pub(crate) use fd::FdCore;
pub(crate) use file::looks_empty as file_looks_empty;
pub use file::{CreateOptions, FileCarrier};
pub use memory::MemoryCarrier;
pub use stats::names as stats_names;
pub use stats::{CarrierStats, StatsSnapshot};
pub(crate) use sys::flock;

use crate::error::{Error, Knob, Result};

/// The size of a transparent huge page on x86-64 and most arm64 kernels.
const HUGE_PAGE: usize = 2 << 20;

impl AlignedBuf {
    /// A zeroed buffer like [`AlignedBuf::zeroed`] whose pages the kernel is asked to back
    /// with transparent huge pages (where the system allows it): a large IO buffer then
    /// faults in 2 MiB at a time on its first use instead of 4 KiB, and a direct read into it
    /// is a few long segments instead of one per 4 KiB page: on this machine's disk 1 GiB
    /// read in 64 MiB requests took 355 ms into huge pages against 650 to 800 ms into 4 KiB
    /// pages (writes showed no difference). The log's recovery reads whole segments into
    /// two such buffers, and the carriers' bounce buffers are such buffers. Defined here
    /// because the advice is a system call, and the carriers hold the OS boundary.
    pub fn zeroed_huge(len: usize, align: usize) -> AlignedBuf {
        // A buffer of at least one huge page starts on a huge page, so that all of it can
        // be backed by them.
        let align = if len >= HUGE_PAGE { align.max(HUGE_PAGE) } else { align };
        let mut buf = AlignedBuf::zeroed(len, align);
        if let Err(error) = sys::advise_huge_pages(buf.as_mut_slice()) {
            tracing::debug!(%error, "no huge pages for an IO buffer");
        }
        buf
    }
}

/// Which kind of medium a carrier is; decides what each knob means on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CarrierKind {
    /// One file on the host file system (locked with `flock` on the file itself).
    File,
    /// A Linux block device or partition.
    Device,
    /// Process memory (`memory:`).
    Memory,
    /// The fault-injecting test carrier (memory with a power-loss model).
    #[cfg(any(test, feature = "test-util"))]
    Faulty,
}

impl CarrierKind {
    /// The medium's name as logs and `vellum info` show it (`file`, `device`, `memory`, ...).
    pub fn name(self) -> &'static str {
        match self {
            CarrierKind::File => "file",
            CarrierKind::Device => "device",
            CarrierKind::Memory => "memory",
            #[cfg(any(test, feature = "test-util"))]
            CarrierKind::Faulty => "faulty",
        }
    }

    /// True when what is written can outlive the process (everything but memory): only then
    /// does a barrier or write-through mean anything.
    pub fn is_durable(self) -> bool {
        self != CarrierKind::Memory
    }

    /// The knobs of `options` that mean something on this medium: direct IO and
    /// write-through are dropped on memory (where asking for them is an error).
    pub fn adapt(self, options: CarrierOptions) -> CarrierOptions {
        let keep = |knob, on| on && self.knob_support(knob) != KnobSupport::Meaningless;
        CarrierOptions {
            direct_io: keep(Knob::DirectIo, options.direct_io),
            write_through: keep(Knob::WriteThrough, options.write_through),
            read_only: options.read_only,
        }
    }

    /// What `knob` means on this medium (the design's "implemented, physically meaningless,
    /// or inherent" rule, stated per medium).
    pub fn knob_support(self, knob: Knob) -> KnobSupport {
        use KnobSupport::{Forced, Implemented, Inherent, Meaningless};
        match (self, knob) {
            (CarrierKind::File, _) => Implemented,
            (CarrierKind::Device, Knob::Preallocation | Knob::Sparseness) => Inherent,
            (CarrierKind::Device, Knob::DirectIo) => Forced,
            (CarrierKind::Device, Knob::WriteThrough | Knob::Cache) => Implemented,
            (CarrierKind::Memory, Knob::Preallocation) => Inherent,
            // A cache in front of memory only copies memory.
            (
                CarrierKind::Memory,
                Knob::Sparseness | Knob::DirectIo | Knob::WriteThrough | Knob::Cache,
            ) => Meaningless,
            #[cfg(any(test, feature = "test-util"))]
            (CarrierKind::Faulty, Knob::Cache) => Implemented,
            // The fault model honours write-through (durable on return) and barriers; it has
            // no page cache to bypass.
            #[cfg(any(test, feature = "test-util"))]
            (CarrierKind::Faulty, Knob::WriteThrough) => Implemented,
            #[cfg(any(test, feature = "test-util"))]
            (CarrierKind::Faulty, Knob::Preallocation) => Inherent,
            #[cfg(any(test, feature = "test-util"))]
            (CarrierKind::Faulty, Knob::Sparseness | Knob::DirectIo) => Meaningless,
        }
    }
}

impl fmt::Display for CarrierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a knob relates to a medium: a carrier's ([`CarrierKind::knob_support`]) or a media
/// facade's (`media::Medium::knob_support`), one vocabulary for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnobSupport {
    /// Both settings work and differ physically.
    Implemented,
    /// Always on by the nature of the medium (a block device is preallocated and non-sparse;
    /// write-through on object storage: a completed upload is durable).
    Inherent,
    /// Always on because the carrier insists (direct IO on a device: the kernel cache is not
    /// trusted when an advisory lock cannot stop outside writers).
    Forced,
    /// Has no physical meaning (write-through on memory); asking for it is an error.
    Meaningless,
}

impl fmt::Display for KnobSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KnobSupport::Implemented => "implemented",
            KnobSupport::Inherent => "inherent",
            KnobSupport::Forced => "forced",
            KnobSupport::Meaningless => "physically meaningless",
        })
    }
}

/// Open-time carrier knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarrierOptions {
    /// Bypass the host page cache (O_DIRECT). Unaligned requests go through a bounce buffer.
    pub direct_io: bool,
    /// Data writes are durable when they return (`pwritev2(RWF_DSYNC)`).
    pub write_through: bool,
    /// Open for reading only (shared lock; every write fails).
    pub read_only: bool,
}

impl CarrierOptions {
    /// Production knobs: direct IO and write-through.
    pub const PRODUCTION: CarrierOptions =
        CarrierOptions { direct_io: true, write_through: true, read_only: false };
    /// Development knobs: buffered, no write-through.
    pub const BUFFERED: CarrierOptions =
        CarrierOptions { direct_io: false, write_through: false, read_only: false };

    /// Rejects knobs that are physically meaningless on `medium`.
    pub fn validate_for(&self, medium: CarrierKind) -> Result<()> {
        for (knob, on) in
            [(Knob::DirectIo, self.direct_io), (Knob::WriteThrough, self.write_through)]
        {
            if on && medium.knob_support(knob) == KnobSupport::Meaningless {
                return Err(Error::KnobMeaningless { knob, medium: medium.name() });
            }
        }
        Ok(())
    }
}

/// Sizes and alignments of a carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Current length of the medium in bytes (a thin file carrier grows).
    pub len_bytes: u64,
    /// Smallest addressable unit (BLKSSZGET on devices).
    pub logical_sector: u32,
    /// Unit the device writes atomically (BLKPBSZGET on devices).
    pub physical_sector: u32,
    /// Required buffer address alignment for direct IO (1 when buffered).
    pub mem_align: u32,
    /// Required offset and length alignment for direct IO (1 when buffered).
    pub offset_align: u32,
}

/// A flat, positional, durable byte store. See the module docs for the contract.
pub trait Carrier: Send + Sync + fmt::Debug {
    /// Reads `buf.len()` bytes at `offset`. Bytes past the end of a thin carrier read as zeros.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Writes all of `buf` at `offset`; durable once a later `barrier` returns.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Writes all of `buf` at `offset` and returns only once it is on stable storage.
    /// With write-through off this is a write followed by a barrier.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Makes every write that returned before this call durable.
    fn barrier(&self) -> io::Result<()>;

    /// Reads into `bufs` in order from `offset` as one read (one `preadv` where the carrier
    /// can: the page cache fills its frames with no copy). By default, one read into a
    /// buffer of the whole range, copied out.
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        let mut all = AlignedBuf::zeroed(len, 4096);
        self.read_exact_at(all.as_mut_slice(), offset)?;
        let mut at = 0;
        for b in bufs.iter_mut() {
            b.copy_from_slice(&all.as_slice()[at..at + b.len()]);
            at += b.len();
        }
        Ok(())
    }

    /// Writes `bufs` in order from `offset` as one plain write (one `pwritev` where the
    /// carrier can). By default, the buffers gathered into one and written at once.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        let mut all = AlignedBuf::zeroed(len, 4096);
        let mut at = 0;
        for b in bufs {
            all.as_mut_slice()[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        self.write_all_at(all.as_slice(), offset)
    }

    /// Grows the medium to at least `len_bytes`: zero-filled for real unless `sparse`.
    fn grow(&self, len_bytes: u64, sparse: bool) -> io::Result<()>;

    /// Size, logical and physical sector sizes, direct-IO alignment: what the carrier probed.
    fn geometry(&self) -> Geometry;
    /// The knobs the carrier was opened with (after the medium adjusted them).
    fn options(&self) -> CarrierOptions;
    /// Which medium this is.
    fn medium(&self) -> CarrierKind;
    /// The carrier's operation counters (reads, writes, durable writes, flushes).
    fn stats(&self) -> &CarrierStats;
}

/// Opens a file or block device carrier at `path`, choosing by what the path is (the
/// mechanism; the public door is `media::open_carrier`).
pub(crate) fn open_path(path: &Path, options: CarrierOptions) -> Result<Box<dyn Carrier>> {
    if is_block_device(path) {
        Ok(Box::new(DeviceCarrier::open(path, options)?))
    } else {
        Ok(Box::new(FileCarrier::open(path, options)?))
    }
}

/// True when `path` names a block device.
pub(crate) fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// A shared carrier is a carrier: tests keep an `Arc` of a `FaultyCarrier` (feature
/// `test-util`) to arm faults and take crash images while the volume owns the other handle.
impl<C: Carrier + ?Sized> Carrier for std::sync::Arc<C> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_all_at(buf, offset)
    }
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_durable_at(buf, offset)
    }
    fn barrier(&self) -> io::Result<()> {
        (**self).barrier()
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        (**self).read_vectored_at(bufs, offset)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        (**self).write_vectored_at(bufs, offset)
    }
    fn grow(&self, len_bytes: u64, sparse: bool) -> io::Result<()> {
        (**self).grow(len_bytes, sparse)
    }
    fn geometry(&self) -> Geometry {
        (**self).geometry()
    }
    fn options(&self) -> CarrierOptions {
        (**self).options()
    }
    fn medium(&self) -> CarrierKind {
        (**self).medium()
    }
    fn stats(&self) -> &CarrierStats {
        (**self).stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer advised for huge pages is an ordinary zeroed, aligned buffer; one of a huge
    /// page or more starts on a huge page, so that the kernel can back all of it.
    #[test]
    fn huge_page_buffers_are_zeroed_aligned_and_start_on_a_huge_page() {
        for (len, align) in [(4096, 4096), (1 << 20, 512), (HUGE_PAGE, 4096), (3 * HUGE_PAGE, 4096)]
        {
            let mut buf = AlignedBuf::zeroed_huge(len, align);
            assert_eq!(buf.len(), len);
            assert!(buf.as_slice().iter().all(|&b| b == 0));
            let at = buf.as_slice().as_ptr() as usize;
            assert!(at.is_multiple_of(align));
            if len >= HUGE_PAGE {
                assert!(at.is_multiple_of(HUGE_PAGE), "{len} bytes at {at:#x}");
            }
            buf.as_mut_slice().fill(7);
            assert!(buf.as_slice().iter().all(|&b| b == 7));
        }
    }
}
