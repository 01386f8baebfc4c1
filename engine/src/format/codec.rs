//! Bounds-checked little-endian `Reader` and `Writer`.
//!
//! Bytes read from a carrier are input: the `Reader` returns `Err` on every short or hostile
//! buffer and never panics. Bytes written are program state: the `Writer` asserts that each
//! field lands inside its buffer, because overrunning it would write wrong bytes.

use crate::error::{Corruption, Error, Region, Result, Unsupported};

/// Sequential little-endian decoder over one on-disk structure.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    region: Region,
    /// Carrier byte offset of `bytes[0]`, for error messages.
    base: u64,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], region: Region, base: u64) -> Self {
        Reader { bytes, pos: 0, region, base }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(Error::corrupt(
                self.region,
                self.base + self.pos as u64,
                Corruption::Truncated {
                    needed: n as u64,
                    available: (self.bytes.len() - self.pos) as u64,
                },
            )),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u16_le(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32_le(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64_le(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        self.take(n)
    }

    pub fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.array()
    }

    /// Consumes `n` bytes that the format reserves; any non-zero byte refuses the structure
    /// (unknown means refuse, never misread).
    pub fn expect_zero(&mut self, n: usize, field: &'static str) -> Result<()> {
        if self.take(n)?.iter().all(|&b| b == 0) {
            Ok(())
        } else {
            Err(Error::Unsupported(Unsupported::ReservedNonZero { field }))
        }
    }

    /// The error for a field whose value the format does not allow.
    pub fn bad_value(&self, field: &'static str, value: u64) -> Error {
        Error::corrupt(
            self.region,
            self.base + self.pos as u64,
            Corruption::BadValue { field, value },
        )
    }
}

/// Sequential little-endian encoder into a buffer sized by the caller.
pub struct Writer<'a> {
    bytes: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub fn new(bytes: &'a mut [u8]) -> Self {
        Writer { bytes, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn put(&mut self, src: &[u8]) {
        let end = self.pos + src.len();
        assert!(
            end <= self.bytes.len(),
            "encode overruns its buffer: {end} > {}",
            self.bytes.len()
        );
        self.bytes[self.pos..end].copy_from_slice(src);
        self.pos = end;
    }

    pub fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }

    pub fn u16_le(&mut self, v: u16) {
        self.put(&v.to_le_bytes());
    }

    pub fn u32_le(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }

    pub fn u64_le(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }

    /// Writes `n` zero bytes (reserved space).
    pub fn zeros(&mut self, n: usize) {
        let end = self.pos + n;
        assert!(
            end <= self.bytes.len(),
            "encode overruns its buffer: {end} > {}",
            self.bytes.len()
        );
        self.bytes[self.pos..end].fill(0);
        self.pos = end;
    }

    /// Asserts that the encoder stands exactly at `at` (offsets derived in code must agree
    /// with the fields actually written).
    pub fn assert_at(&self, at: usize) {
        assert_eq!(self.pos, at, "encoder is at byte {} but the layout says {at}", self.pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffer_is_an_error_not_a_panic() {
        let mut r = Reader::new(&[1, 2, 3], Region::Image, 100);
        assert_eq!(r.u16_le().unwrap(), 0x0201);
        let err = r.u32_le().unwrap_err();
        assert!(matches!(
            err,
            Error::Corrupt {
                offset: 102,
                reason: Corruption::Truncated { needed: 4, available: 1 },
                ..
            }
        ));
    }

    #[test]
    fn reserved_bytes_must_be_zero() {
        let mut r = Reader::new(&[0, 0, 1], Region::Image, 0);
        let err = r.expect_zero(3, "pad").unwrap_err();
        assert!(matches!(err, Error::Unsupported(Unsupported::ReservedNonZero { field: "pad" })));
    }

    #[test]
    fn writer_round_trips_with_reader() {
        let mut buf = [0u8; 15];
        let mut w = Writer::new(&mut buf);
        w.u8(7);
        w.u16_le(0xBEEF);
        w.u32_le(0xDEAD_BEEF);
        w.u64_le(u64::MAX - 1);
        w.assert_at(15);
        let mut r = Reader::new(&buf, Region::Image, 0);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u16_le().unwrap(), 0xBEEF);
        assert_eq!(r.u32_le().unwrap(), 0xDEAD_BEEF);
        assert_eq!(r.u64_le().unwrap(), u64::MAX - 1);
    }
}
