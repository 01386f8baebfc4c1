//! std / loom shim: the group-commit handoff is model-checked with loom (`--cfg loom`), so it
//! takes its primitives from here.

#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex};
