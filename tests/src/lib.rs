//! The repository's README as doctests (issue 28): its rust code blocks compile and run with
//! `cargo test -p vellum-tests --doc`, with this crate's dev-dependencies (the engine, the
//! raft store, tempfile). Nothing else lives here; the tests are under `tests/`.
#![doc = include_str!("../../README.md")]
