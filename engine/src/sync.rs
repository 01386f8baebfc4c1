//! The synchronization primitives the page cache uses. The loom model check
//! (`tests/loom_cache.rs`) compiles the cache's source against loom's versions of the same
//! names, so every lock, condition variable and atomic of the cache comes from here.

pub(crate) use std::sync::atomic;
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
