//! The node's security, in one place: who the node is to its peers and clients, and whom it
//! lets in. The server and the CLI use it; it uses neither (its errors are its own, and the
//! HTTP layer maps them to statuses).
//!
//! - `tls`: TLS identities and configs (rustls with `ring`); the identity convention that a
//!   member's certificate is valid for `node-N.vellum`.
//! - `cert`: the CA and node certificates `vellum cert` makes.
//! - `tokens`: the client API's bearer tokens with roles, compared in constant time.
//! - `exposure`: what `vellum serve` refuses or warns about before it listens (plain HTTP off
//!   loopback, an API that authenticates nobody).
//!
//! Invariants:
//! - No secret (a token, a private key) appears in a log line, an error or a `Debug` output.
//! - A certificate of the peer CA proves a node *name*, never membership: the Raft port also
//!   checks that the named node is a member of the receiver's configuration.

pub mod cert;
pub mod exposure;
pub mod tls;
pub mod tokens;
