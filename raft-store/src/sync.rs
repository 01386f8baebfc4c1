//! The synchronization primitives the group-commit queue uses. The loom model check
//! (`tests/loom_group_commit.rs`) compiles the same queue source against loom's versions.

pub(crate) use std::sync::{Condvar, Mutex};
