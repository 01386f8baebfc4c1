//! openraft storage on a Vellum volume.
//!
//! Not built yet: this crate is a placeholder in the workspace layout. The raft-store issue
//! fills it; until then it exports nothing.
