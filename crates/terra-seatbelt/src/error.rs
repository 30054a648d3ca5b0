//! Errors: every refusal names what was refused and why.

/// A launch spec or a profile input that terra refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The launch spec's bytes are not a canonical spec.
    #[error("launch spec: {0}")]
    Spec(String),
    /// A path cannot be given to Seatbelt (not absolute, not normal, not UTF-8, NUL).
    #[error("path {path:?}: {reason}")]
    Path { path: String, reason: &'static str },
    /// The launcher's command line (the usage is part of the text).
    #[error("{0}")]
    Args(String),
    /// The plan needs something Seatbelt cannot enforce.
    #[error("the macos backend cannot run this plan: {0}")]
    Unsupported(String),
}

pub type Result<T> = std::result::Result<T, Error>;
