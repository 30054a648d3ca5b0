//! One error kind per refusal class. Every message names what was refused and why.

use thiserror::Error;

/// The refusal classes of the policy compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    Format,
    Limit,
    Argument,
    NonCanonical,
    Io,
    Unsupported,
    Missing,
    Conflict,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Format => "format",
            ErrorClass::Limit => "limit",
            ErrorClass::Argument => "argument",
            ErrorClass::NonCanonical => "non-canonical",
            ErrorClass::Io => "io",
            ErrorClass::Unsupported => "unsupported",
            ErrorClass::Missing => "missing",
            ErrorClass::Conflict => "conflict",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal. The message is complete on its own; the class says which kind.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    #[error("format error: {0}")]
    Format(String),
    #[error("limit exceeded: {0}")]
    Limit(String),
    #[error("invalid argument: {0}")]
    Argument(String),
    #[error("non-canonical MIR: {0}")]
    NonCanonical(String),
    #[error("io error: {0}")]
    Io(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("missing: {0}")]
    Missing(String),
    #[error("conflict: {0}")]
    Conflict(String),
}

impl PolicyError {
    pub fn class(&self) -> ErrorClass {
        match self {
            PolicyError::Format(_) => ErrorClass::Format,
            PolicyError::Limit(_) => ErrorClass::Limit,
            PolicyError::Argument(_) => ErrorClass::Argument,
            PolicyError::NonCanonical(_) => ErrorClass::NonCanonical,
            PolicyError::Io(_) => ErrorClass::Io,
            PolicyError::Unsupported(_) => ErrorClass::Unsupported,
            PolicyError::Missing(_) => ErrorClass::Missing,
            PolicyError::Conflict(_) => ErrorClass::Conflict,
        }
    }

    /// The same class with its message rewritten by `f`.
    pub fn map_detail(self, f: impl FnOnce(&str) -> String) -> PolicyError {
        let m = f(self.detail());
        match self {
            PolicyError::Format(_) => PolicyError::Format(m),
            PolicyError::Limit(_) => PolicyError::Limit(m),
            PolicyError::Argument(_) => PolicyError::Argument(m),
            PolicyError::NonCanonical(_) => PolicyError::NonCanonical(m),
            PolicyError::Io(_) => PolicyError::Io(m),
            PolicyError::Unsupported(_) => PolicyError::Unsupported(m),
            PolicyError::Missing(_) => PolicyError::Missing(m),
            PolicyError::Conflict(_) => PolicyError::Conflict(m),
        }
    }

    /// The message without the class prefix.
    pub fn detail(&self) -> &str {
        match self {
            PolicyError::Format(m)
            | PolicyError::Limit(m)
            | PolicyError::Argument(m)
            | PolicyError::NonCanonical(m)
            | PolicyError::Io(m)
            | PolicyError::Unsupported(m)
            | PolicyError::Missing(m)
            | PolicyError::Conflict(m) => m,
        }
    }
}

pub type Result<T> = std::result::Result<T, PolicyError>;
