//! Cluster tests: real `vellum serve` processes on free loopback ports.
//!
//! They use the `vellum` binary that `cargo test --workspace` builds (the node package's own
//! tests need it); run `cargo build --release -p vellum-node` first when running this crate
//! alone.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod harness;
mod rpc;
mod t100_tokens;
mod t10_basic;
mod t110_mtls;
mod t120_bad_snapshot;
mod t120_raft_authority;
mod t130_flood;
mod t140_first_hour;
mod t150_client_cli;
mod t160_archive;
mod t170_groups;
mod t180_full_volume;
mod t190_moves;
mod t20_membership;
mod t30_crash_restart;
mod t35_lost_quorum;
mod t40_bad_input;
mod t50_prometheus;
mod t60_deploy;
mod t70_snapshot;
mod t80_cli;
mod t90_lost_volume;
mod t95_large_writes;
