//! The synchronization primitives the group-commit combiner uses. The loom model check
//! (`tests/loom_group_commit.rs`) compiles the same source against loom's versions.

pub(crate) use std::sync::{Mutex, MutexGuard, TryLockError};

/// A scheduling point for the model checker (loom switches threads only at instrumented
/// operations, and a mutex release is not one); nothing in normal builds.
#[inline]
pub(crate) fn yield_point() {}
