//! `MemoryCarrier`: a volume in process memory (`memory:`).
//!
//! Write-through and direct IO are physically meaningless here (nothing survives the process),
//! and `CarrierOptions::validate_for` refuses them rather than pretending. Barriers and durable
//! writes are still counted, so count-based tests run unchanged on memory. The bytes are held
//! in 1 MiB chunks with a lock each, so writers of different chunks do not serialize.

use std::io;
use std::sync::RwLock;

use super::{Carrier, CarrierKind, CarrierOptions, CarrierStats, Geometry};

const CHUNK: usize = 1 << 20;

/// A volume carrier in memory.
#[derive(Debug)]
pub struct MemoryCarrier {
    chunks: Vec<RwLock<Box<[u8]>>>,
    len_bytes: u64,
    stats: CarrierStats,
}

fn out_of_range(offset: u64, len: usize, size: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("{len} bytes at {offset} lie outside the {size}-byte memory carrier"),
    )
}

impl MemoryCarrier {
    /// A zeroed carrier of `len_bytes`.
    pub fn new(len_bytes: u64) -> MemoryCarrier {
        let chunk_count = (len_bytes as usize).div_ceil(CHUNK);
        let chunks = (0..chunk_count)
            .map(|i| {
                let n = (len_bytes as usize - i * CHUNK).min(CHUNK);
                RwLock::new(vec![0u8; n].into_boxed_slice())
            })
            .collect();
        MemoryCarrier { chunks, len_bytes, stats: CarrierStats::default() }
    }

    /// A zeroed carrier of `len_bytes` that refuses knobs without physical meaning in memory
    /// (direct IO, write-through) instead of pretending to honour them.
    pub fn with_options(
        len_bytes: u64,
        options: CarrierOptions,
    ) -> crate::error::Result<MemoryCarrier> {
        options.validate_for(CarrierKind::Memory)?;
        Ok(MemoryCarrier::new(len_bytes))
    }

    /// A carrier holding `bytes` (a crash image, a golden volume, a copy of another carrier).
    pub fn from_bytes(bytes: &[u8]) -> MemoryCarrier {
        let carrier = MemoryCarrier::new(bytes.len() as u64);
        for (i, chunk) in carrier.chunks.iter().enumerate() {
            let mut c = chunk.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = c.len();
            c.copy_from_slice(&bytes[i * CHUNK..i * CHUNK + n]);
        }
        carrier
    }

    /// A copy of every byte.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len_bytes as usize);
        for chunk in &self.chunks {
            out.extend_from_slice(&chunk.read().unwrap_or_else(std::sync::PoisonError::into_inner));
        }
        out
    }

    /// Visits the chunk pieces covering `[offset, offset + len)`.
    fn for_each_piece(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(&RwLock<Box<[u8]>>, usize, std::ops::Range<usize>),
    ) -> io::Result<()> {
        let end = offset.checked_add(len as u64).filter(|&e| e <= self.len_bytes);
        if end.is_none() {
            return Err(out_of_range(offset, len, self.len_bytes));
        }
        let mut done = 0usize;
        while done < len {
            let at = offset as usize + done;
            let (index, within) = (at / CHUNK, at % CHUNK);
            let n = (CHUNK - within).min(len - done);
            f(&self.chunks[index], within, done..done + n);
            done += n;
        }
        Ok(())
    }
}

impl Carrier for MemoryCarrier {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.for_each_piece(offset, buf.len(), |chunk, within, range| {
            let c = chunk.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = range.len();
            buf[range].copy_from_slice(&c[within..within + n]);
        })?;
        self.stats.record_read(buf.len());
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.for_each_piece(offset, buf.len(), |chunk, within, range| {
            let mut c = chunk.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = range.len();
            c[within..within + n].copy_from_slice(&buf[range]);
        })?;
        self.stats.record_write(buf.len(), None);
        Ok(())
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // Memory has no stable storage to reach; the write is counted as durable so that
        // count-based tests read the same on every carrier.
        self.for_each_piece(offset, buf.len(), |chunk, within, range| {
            let mut c = chunk.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = range.len();
            c[within..within + n].copy_from_slice(&buf[range]);
        })?;
        self.stats.record_write(buf.len(), Some(std::time::Duration::ZERO));
        Ok(())
    }

    fn barrier(&self) -> io::Result<()> {
        self.stats.record_barrier(std::time::Duration::ZERO);
        Ok(())
    }

    fn grow(&self, len_bytes: u64, _sparse: bool) -> io::Result<()> {
        if len_bytes <= self.len_bytes {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::StorageFull, "a memory carrier cannot grow"))
        }
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            len_bytes: self.len_bytes,
            logical_sector: 512,
            physical_sector: 512,
            mem_align: 1,
            offset_align: 1,
        }
    }

    fn options(&self) -> CarrierOptions {
        CarrierOptions::BUFFERED
    }

    fn medium(&self) -> CarrierKind {
        CarrierKind::Memory
    }

    fn stats(&self) -> &CarrierStats {
        &self.stats
    }
}
