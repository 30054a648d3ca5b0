//! Errors: every refusal names what was refused and why.

/// A plan, a launch spec or a request that the windows backend refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The launch spec's bytes are not a canonical spec.
    #[error("launch spec: {0}")]
    Spec(String),
    /// A path that cannot be granted on Windows (not absolute with a drive
    /// letter, not normal, a reserved name, a character Windows refuses).
    #[error("path {path:?}: {reason}")]
    Path { path: String, reason: String },
    /// The plan needs something the windows backend does not enforce.
    #[error("the windows backend cannot run this plan: {0}")]
    Unsupported(String),
    /// A ledger file that is not one terra wrote.
    #[error("ledger: {0}")]
    Ledger(String),
    /// Walking a granted tree failed.
    #[error("cannot walk {path}: {reason}")]
    Walk { path: String, reason: String },
    /// The broker's wrapper refused to open a socket.
    #[error("socket request refused: {0}")]
    Socket(String),
}

pub type Result<T> = std::result::Result<T, Error>;
