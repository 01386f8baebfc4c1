//! The one error type of the `vellum` binary: what failed, as one line for the user, and the
//! exit code. Shared by the command line (`cli`) and the server (`server`), which depend on
//! it and never on each other's internals.
//!
//! Exit codes (docs/OPERATIONS.md, "Exit codes"): 0 success; 1 any other failure; 2 bad
//! arguments (and `vellum check`: corrupt); 3 this node must not run as this member (and
//! `vellum check`: leaks only); 4 the Raft core stopped; 5 not found (a key, a member, a
//! file on a medium); 6 unreachable (no endpoint answered, an object store's included).

use std::fmt;

/// Why a command failed, as one line for the user.
#[derive(Debug)]
pub enum CliError {
    Engine(vellum_engine::Error),
    Io(std::io::Error, String),
    Usage(String),
    /// Arguments that cannot mean anything (a bad URL): exit code 2, as a usage error of the
    /// argument parser.
    BadArguments(String),
    /// This node must not run as the member it was asked to be (it lost its state, the
    /// volume belongs to another node id, or holds another `--groups`): exit code 3, which
    /// the systemd unit does not restart.
    NotThisMember(String),
    /// The Raft core stopped while the node ran (a storage error, or a panic inside
    /// openraft): exit code 4, which the systemd unit restarts (a restart reopens the store
    /// and rejoins as the same member).
    RaftStopped(String),
    /// What a client asked for is not there (a key, a member): exit code 5.
    NotFound(String),
    /// No endpoint a client command was given answered (each failure on its own line):
    /// exit code 6.
    Unreachable(String),
}

impl CliError {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::BadArguments(_) | CliError::Engine(vellum_engine::Error::BadUrl { .. }) => 2,
            CliError::NotThisMember(_) => 3,
            CliError::RaftStopped(_) => 4,
            CliError::NotFound(_) => 5,
            CliError::Unreachable(_) => 6,
            _ => 1,
        }
    }
}

impl From<vellum_engine::Error> for CliError {
    fn from(e: vellum_engine::Error) -> Self {
        CliError::Engine(e)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Engine(e) => write!(f, "{e}"),
            CliError::Io(e, what) => write!(f, "{what}: {e}"),
            CliError::Usage(msg)
            | CliError::BadArguments(msg)
            | CliError::NotThisMember(msg)
            | CliError::NotFound(msg)
            | CliError::Unreachable(msg) => f.write_str(msg),
            CliError::RaftStopped(why) => write!(
                f,
                "the Raft core stopped ({why}): exiting with code 4 so that the node is restarted"
            ),
        }
    }
}
