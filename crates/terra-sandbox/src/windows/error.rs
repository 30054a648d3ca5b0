//! The launcher's errors: a Win32 call that failed (with the call and the
//! OS error), a launch refused (what and why), or a plan, spec, path or
//! ledger terra-appcontainer refused.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Win32 call failed.
    #[error("{call}: {source}")]
    Os {
        call: String,
        source: std::io::Error,
    },
    /// The launch is refused: what and why.
    #[error("{0}")]
    Refused(String),
    /// terra-appcontainer refused the plan, the spec, a path or a ledger.
    #[error(transparent)]
    Plan(#[from] terra_appcontainer::Error),
}

impl From<String> for Error {
    fn from(why: String) -> Error {
        Error::Refused(why)
    }
}

impl From<&str> for Error {
    fn from(why: &str) -> Error {
        Error::Refused(why.to_string())
    }
}
