//! The interface every log engine under test implements (Vellum and the floors in `log`, the
//! peer engines in `peers`): its own module, so that `log` uses `peers` and `peers` does not
//! use `log`.

/// One engine under test: appends `count` entries of `len` bytes as one durable write.
pub trait Appender {
    fn name(&self) -> String;
    fn append(&mut self, count: usize, len: usize);
}
