//! Aligned buffers and the bounce path that lets direct IO accept any request.
//!
//! The buffer type of the IO path, public as `vellum_engine::AlignedBuf` (issue 24: users
//! of the engine, the raft log among them, take it from the crate root, not from the carrier
//! module). It sits at the crate root rather than inside `io` because the carriers use it too
//! and carriers are the bottom layer: they import nothing above them.
//!
//! Direct IO needs the buffer address, the offset and the length aligned. A fully aligned
//! request goes to the kernel as is (zero-copy); anything else is widened to the covering
//! aligned range in a bounce buffer: reads copy out of it, writes read-modify-write the edge
//! sectors. The buffer is built from a `Vec` with safe code (over-allocate, start at the
//! aligned offset), so no allocator `unsafe` is needed.

/// A heap buffer whose first byte sits on an `align`-byte boundary.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes aligned to `align` (a power of two).
    pub fn zeroed(len: usize, align: usize) -> AlignedBuf {
        assert!(align.is_power_of_two(), "alignment {align} is not a power of two");
        let storage = vec![0u8; len + align];
        let start = storage.as_ptr().align_offset(align);
        assert!(start < align, "align_offset gave {start} for alignment {align}");
        AlignedBuf { storage, start, len }
    }

    /// Length in bytes (a multiple of the alignment it was made with).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, starting at the aligned address.
    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    /// The bytes, writable, starting at the aligned address.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// True when `buf`, `offset` and the length meet direct IO's alignment.
pub(crate) fn is_aligned(buf: &[u8], offset: u64, mem_align: u32, offset_align: u32) -> bool {
    let oa = u64::from(offset_align);
    (buf.as_ptr() as usize).is_multiple_of(mem_align as usize)
        && offset.is_multiple_of(oa)
        && (buf.len() as u64).is_multiple_of(oa)
}

/// The aligned range `[start, end)` that covers `[offset, offset + len)`.
pub(crate) fn covering(offset: u64, len: usize, align: u32) -> (u64, u64) {
    let a = u64::from(align);
    let start = offset / a * a;
    let end = (offset + len as u64).div_ceil(a) * a;
    (start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned() {
        for align in [512usize, 4096, 65536] {
            let mut b = AlignedBuf::zeroed(8192, align);
            assert_eq!(b.as_slice().as_ptr() as usize % align, 0);
            assert_eq!(b.as_mut_slice().len(), 8192);
        }
    }

    #[test]
    fn covering_ranges() {
        assert_eq!(covering(0, 512, 512), (0, 512));
        assert_eq!(covering(1, 1, 512), (0, 512));
        assert_eq!(covering(511, 2, 512), (0, 1024));
        assert_eq!(covering(4096, 0, 4096), (4096, 4096));
    }
}
