//! Format-time and open-time options of a volume.

use crate::carrier::{CarrierKind, CarrierOptions, KnobSupport};
use crate::error::{Error, Knob, Result};

/// How data writes of different files share the carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteConcurrency {
    /// One data write through the volume at a time (the default; measured faster on fast
    /// carriers, where writers mostly contend for the same queue).
    #[default]
    Serial,
    /// Data writes of different files proceed concurrently; writes of one file, and all
    /// metadata changes, stay serialized.
    ParallelSegments,
}

/// Deliberate protocol breakages that the crash tests must catch (mutation testing of the
/// checker). Only with the `test-util` feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-util"), allow(dead_code))]
pub enum CommitMutation {
    /// Skip the barrier between the first superblock and the second.
    SkipFirstBarrier,
    /// Let this commit reuse the blocks the previous commit freed, before this commit is
    /// durable (the deferred-free rule broken).
    ReuseFreedBlocksEarly,
    /// Mark buffered data unflushed before its carrier write instead of after it returned
    /// (a commit racing the write may then take the only barrier before the write lands).
    UnflushedBeforeWrite,
    /// Write back whole cached pages instead of only the sectors a write touched (a power
    /// cut during the writeback may then tear sectors that were already durable).
    WholePageWriteback,
    /// Journal replay stops at the first bad batch even when an intact later batch shows
    /// that the bad one was acknowledged (damage taken for a torn tail).
    ReplayAcceptsDamage,
    /// A checkpoint frees the journal ring before its superblock flip is durable (the next
    /// batch may overwrite records the durable superblock still needs).
    CheckpointFreesJournalEarly,
    /// Replay differs from the live path: it skips attribute removals.
    ReplayDiffers,
    /// After a torn batch, the next batch reuses the torn one's sequence number (a second
    /// torn batch at the same ring position may then be stitched to the first one's stale
    /// blocks).
    JournalSequenceReuse,
    /// A destroyed ring is filled again before the checkpoint that records its loss (a power
    /// cut between the two erases every trace of the loss).
    FillBeforeLossFlag,
    /// A sync ignores a failed write it did not issue itself (another thread's writeback):
    /// it returns Ok over lost data, and the volume's poison is not checked by syncs.
    SyncIgnoresWritebackError,
    /// Adding a member commits member 0's table before the new member's zeros and
    /// superblocks are durable (no barrier on the new carrier first).
    MemberBeforeZeros,
}

pub use crate::io::Tier;

/// The tiers of a file's reads and writes, chosen separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoPolicy {
    /// The tier of reads.
    pub read: Tier,
    /// The tier of writes.
    pub write: Tier,
}

impl IoPolicy {
    /// Reads and writes through the page cache.
    pub const BUFFERED: IoPolicy = IoPolicy { read: Tier::Buffered, write: Tier::Buffered };
    /// Reads and writes straight to the carrier (aligned direct IO).
    pub const DIRECT: IoPolicy = IoPolicy { read: Tier::Direct, write: Tier::Direct };
}

/// The default page cache budget on media where a cache means something (file, device).
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// Open-time options of the volume layer (the carrier's own knobs are `CarrierOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VolumeOptions {
    /// Whether data writes of different files run in parallel or one at a time.
    pub concurrency: WriteConcurrency,
    /// Open without writing anything (also implied by a read-only carrier or unknown
    /// ro-compat features).
    pub read_only: bool,
    /// The page cache's budget in bytes. `None`: the medium's default
    /// ([`DEFAULT_CACHE_BYTES`] on a file or device, none on memory or the test carrier);
    /// `Some(0)`: no cache (the pure direct form). A cache on memory is physically
    /// meaningless and refused (`KnobMeaningless`).
    pub cache_bytes: Option<usize>,
    /// The tiers files open with when they do not ask (`open_file_with`). `None`: the
    /// medium's default, decided by measurement (docs/BENCHMARKS.md, "cache").
    pub policy: Option<IoPolicy>,
    /// Journaled volumes: how long batches may wait in the ring before a background
    /// checkpoint writes them into the image (bounding replay). `None`: 30 s;
    /// `Some(Duration::ZERO)`: no background checkpoints (the ring is still checkpointed when
    /// it fills and at close).
    pub checkpoint_interval: Option<std::time::Duration>,
    /// A protocol mutant for the crash checkers (`test-util` only).
    #[cfg(feature = "test-util")]
    pub mutation: Option<CommitMutation>,
}

impl VolumeOptions {
    /// The protocol mutant in effect (never one without `test-util`).
    #[cfg_attr(not(feature = "test-util"), allow(clippy::unused_self))]
    pub(crate) fn mutation(&self) -> Option<CommitMutation> {
        #[cfg(feature = "test-util")]
        return self.mutation;
        #[cfg(not(feature = "test-util"))]
        None
    }

    /// The tiers files open with on `medium` opened with `carrier` options, unless
    /// [`VolumeOptions::policy`] says otherwise. Decided by measurement
    /// (docs/BENCHMARKS.md, "cache"): writes buffered everywhere (small writes gather in
    /// the cache, 3.7x the direct tier; large ones go around it anyway); reads buffered
    /// where the frames are the only cache (a direct-IO carrier: 126x the direct tier on a
    /// hot set), direct where the host's page cache already holds the carrier (a second
    /// copy in our frames costs: the direct tier read 3.2x as fast there).
    ///
    /// Only a file carrier opened without direct IO sits on the host's cache (a device
    /// forces direct IO; the test carrier models a bare disk; memory has no cache).
    pub fn default_policy(&self, medium: CarrierKind, carrier: CarrierOptions) -> IoPolicy {
        let host_caches = medium == CarrierKind::File && !carrier.direct_io;
        self.policy.unwrap_or(if host_caches {
            IoPolicy { read: Tier::Direct, write: Tier::Buffered }
        } else {
            IoPolicy::BUFFERED
        })
    }

    /// The cache budget in effect on `medium`, or the error for a meaningless one.
    pub fn cache_bytes_for(&self, medium: CarrierKind) -> Result<usize> {
        match (self.cache_bytes, medium.knob_support(Knob::Cache)) {
            (Some(0), _) => Ok(0),
            (Some(_), KnobSupport::Meaningless) => {
                Err(Error::KnobMeaningless { knob: Knob::Cache, medium: medium.name() })
            }
            (Some(n), _) => Ok(n),
            (None, _) => Ok(match medium {
                CarrierKind::File | CarrierKind::Device => DEFAULT_CACHE_BYTES,
                // Memory (meaningless) and the test carrier (tests ask for one when they
                // want it).
                _ => 0,
            }),
        }
    }
}

/// What `format` lays out.
#[derive(Clone, Copy)]
pub struct FormatOptions<'a> {
    /// Volume capacity in bytes; `None` takes the whole carrier.
    pub capacity_bytes: Option<u64>,
    /// Block size: a power of two from 4096 to 65536.
    pub block_size: u32,
    /// Bytes reserved for the journal region (may be 0).
    pub journal_bytes: u64,
    /// Use the journal region (at least two blocks): commits become one journal batch.
    pub journal: bool,
    /// Auto-grow: the volume starts at `capacity_bytes` and doubles when its allocator runs
    /// out, up to this many bytes (the bitmap is sized for it). `None`: a fixed capacity.
    pub grow_max_bytes: Option<u64>,
    /// Blocks of the image region; `None` takes 1/64 of the volume (16 to 65,536 blocks).
    pub image_blocks: Option<u64>,
    /// Reserve all space at creation (false: thin, the carrier file grows as used).
    pub preallocate: bool,
    /// Leave unwritten carrier ranges as holes (false: every byte is written at creation).
    pub sparse: bool,
    /// Overwrite a carrier that does not look empty.
    pub force: bool,
    /// Called with `(bytes done, bytes total)` while zero-filling.
    pub progress: Option<&'a (dyn Fn(u64, u64) + Sync)>,
}

impl Default for FormatOptions<'_> {
    /// Production layout: preallocated, non-sparse, 4 KiB blocks, no journal.
    fn default() -> Self {
        FormatOptions {
            capacity_bytes: None,
            block_size: 4096,
            journal_bytes: 0,
            journal: false,
            grow_max_bytes: None,
            image_blocks: None,
            preallocate: true,
            sparse: false,
            force: false,
            progress: None,
        }
    }
}

/// The journal region a volume of `capacity_bytes` gets unless told otherwise: 1/64 of it,
/// from 256 KiB to 64 MiB, in whole 4096-byte blocks.
pub fn default_journal_bytes(capacity_bytes: u64) -> u64 {
    (capacity_bytes / 64).clamp(256 << 10, 64 << 20) / 4096 * 4096
}

impl FormatOptions<'_> {
    /// The production layout with a journal of [`default_journal_bytes`] in use.
    pub fn journaled(capacity_bytes: u64) -> FormatOptions<'static> {
        FormatOptions {
            capacity_bytes: Some(capacity_bytes),
            journal_bytes: default_journal_bytes(capacity_bytes),
            journal: true,
            ..FormatOptions::default()
        }
    }
}

impl std::fmt::Debug for FormatOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FormatOptions")
            .field("capacity_bytes", &self.capacity_bytes)
            .field("block_size", &self.block_size)
            .field("journal_bytes", &self.journal_bytes)
            .field("journal", &self.journal)
            .field("grow_max_bytes", &self.grow_max_bytes)
            .field("image_blocks", &self.image_blocks)
            .field("preallocate", &self.preallocate)
            .field("sparse", &self.sparse)
            .field("force", &self.force)
            .finish_non_exhaustive()
    }
}
