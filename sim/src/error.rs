//! Why a simulation could not run.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SimError {
    /// A flag or target the sim cannot use.
    #[error("{0}")]
    Usage(String),
    /// The `weir` binary is missing and could not be built.
    #[error("{0}")]
    WeirBinary(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// A node exited by itself; `line` is the last line it logged.
    #[error("node {node} exited ({status}): {line}")]
    NodeExited {
        node: String,
        status: String,
        line: String,
    },
    /// Membership did not converge before the deadline.
    #[error("cluster did not form within {secs}s: {detail}")]
    NotFormed { secs: u64, detail: String },
    /// Network namespaces could not be set up for a partition.
    #[error("network setup failed: {0}")]
    Network(String),
}

impl SimError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> SimError {
        SimError::Io {
            what: what.into(),
            source,
        }
    }
}
