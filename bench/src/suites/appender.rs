//! The interface every log engine under test implements (Vellum and the floors in `log`, the
//! peer engines in `peers`): its own module, so that `log` uses `peers` and `peers` does not
//! use `log`.

/// One engine under test: appends `count` entries of `len` bytes as one durable write.
///
/// Making the entries (their bytes, the engine's entry type) is [`Appender::prepare`], which
/// no clock times: a caller of a log engine has its entries in memory already, and making 64
/// entries of 4 KiB (pseudo-random bytes) costs about 65 us here, a quarter of a batched
/// durable write on this machine's disk. Timing it flattered every engine's ratio to the
/// floor, and the engines that make more entries per append more than the others.
pub trait Appender {
    fn name(&self) -> String;
    /// Makes the next append's `count` entries of `len` bytes (not timed).
    fn prepare(&mut self, count: usize, len: usize);
    /// Appends what [`Appender::prepare`] made, as one durable write (timed).
    fn write(&mut self);
    /// [`Appender::prepare`], then [`Appender::write`].
    fn append(&mut self, count: usize, len: usize) {
        self.prepare(count, len);
        self.write();
    }
}
