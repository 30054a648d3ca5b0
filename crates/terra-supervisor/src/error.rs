//! The supervisor crate's error: one kind per refusal class, each carrying
//! what was refused and why; system errors keep their `io::Error` or nix
//! `Errno` (so the errno survives, see [`Error::errno`]), the operation and
//! the path. `terra run` turns an `Error` into `terra: MESSAGE` and exit
//! [`crate::EXIT_REFUSED`] in one place (`fail` in the CLI's main.rs).

use std::io;
use std::path::{Path, PathBuf};

use terra_policy::PolicyError;

#[cfg(unix)]
use crate::files::{OutError, ReadError};

/// Why a run was refused or failed before its workload started (exit
/// [`crate::EXIT_REFUSED`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command-line value or run option is refused (names the flag and value).
    #[error("{0}")]
    Argument(String),
    /// The policy, or the plan resolved from it, is refused.
    #[error("{context}: {source}")]
    Policy {
        /// Which policy (e.g. `--policy p.json`, `the default policy`).
        context: String,
        #[source]
        source: PolicyError,
    },
    /// This build or host cannot do what the run asks.
    #[error("{0}")]
    Unsupported(String),
    /// A file-system operation failed (std's `io::Error`).
    #[error("{}", io_text(op, path.as_deref(), source))]
    Io {
        /// What was being done, e.g. `cannot create the run's temp directory in`.
        op: String,
        /// The path it was done on, when there is one.
        path: Option<PathBuf>,
        #[source]
        source: io::Error,
    },
    /// A system call failed (nix's `Errno`, shown as `ENAME: text`).
    #[cfg(unix)]
    #[error("{}", io_text(op, path.as_deref(), errno))]
    Sys {
        /// What was being done, e.g. `cannot lock`.
        op: String,
        /// The path it was done on, when there is one.
        path: Option<PathBuf>,
        #[source]
        errno: nix::errno::Errno,
    },
    /// What was being done (a flag and its value, e.g. `--write cache`, or
    /// an operation) when the error inside happened.
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<Error>,
    },
    /// A directory, file or descriptor on this host is not as the run needs
    /// it (names it and why).
    #[error("{0}")]
    Host(String),
    /// Several things failed (every candidate directory, both receipts): each one's error.
    #[error("{}", join(.0))]
    Several(Vec<Error>),
    /// The network broker of a mediated run did not start.
    #[error("{0}")]
    Broker(String),
    /// The launcher refused or failed.
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Sandbox(#[from] terra_sandbox::linux::SandboxError),
    /// The run request between the CLI and the supervisor is malformed or
    /// does not match what was decided.
    #[error("{0}")]
    Request(String),
    /// An input file was not read.
    #[cfg(unix)]
    #[error(transparent)]
    Input(#[from] ReadError),
    /// An output file was not written.
    #[cfg(unix)]
    #[error(transparent)]
    Output(#[from] OutError),
}

/// `OP PATH: CAUSE`, leaving out what is empty.
fn io_text(op: &str, path: Option<&Path>, source: &dyn std::fmt::Display) -> String {
    let what = match path {
        Some(p) if op.is_empty() => p.display().to_string(),
        Some(p) => format!("{op} {}", p.display()),
        None => op.to_string(),
    };
    if what.is_empty() {
        source.to_string()
    } else {
        format!("{what}: {source}")
    }
}

fn join(errors: &[Error]) -> String {
    errors
        .iter()
        .map(Error::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// This error, with what was being done (e.g. the flag whose value it refuses).
    pub fn context(self, context: impl Into<String>) -> Error {
        Error::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }

    /// A failed operation on `path`.
    pub fn io(op: impl Into<String>, path: &Path, source: io::Error) -> Error {
        Error::Io {
            op: op.into(),
            path: Some(path.to_path_buf()),
            source,
        }
    }

    /// A failed operation that names no path.
    pub fn op(op: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            op: op.into(),
            path: None,
            source,
        }
    }

    /// A failed system call that names no path.
    #[cfg(unix)]
    pub fn sys(op: impl Into<String>, errno: nix::errno::Errno) -> Error {
        Error::Sys {
            op: op.into(),
            path: None,
            errno,
        }
    }

    /// A failed system call on `path`.
    #[cfg(unix)]
    pub fn sys_at(op: impl Into<String>, path: &Path, errno: nix::errno::Errno) -> Error {
        Error::Sys {
            op: op.into(),
            path: Some(path.to_path_buf()),
            errno,
        }
    }

    /// A refused policy, with which policy it was.
    pub fn policy(context: impl Into<String>, source: PolicyError) -> Error {
        Error::Policy {
            context: context.into(),
            source,
        }
    }

    /// The OS error number behind a system error, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            #[cfg(unix)]
            Error::Sys { errno, .. } => Some(*errno as i32),
            Error::Context { source, .. } => source.errno(),
            _ => None,
        }
    }
}

/// Result of the supervisor crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_the_operation_the_path_and_the_errno() {
        let e = Error::io(
            "cannot create the run's temp directory in",
            Path::new("/nowhere"),
            io::Error::from_raw_os_error(2),
        );
        assert_eq!(e.errno(), Some(2));
        let text = e.to_string();
        assert!(
            text.starts_with("cannot create the run's temp directory in /nowhere: "),
            "{text}"
        );
        let e = Error::op("read", io::Error::from_raw_os_error(24));
        assert_eq!(e.errno(), Some(24));
        assert!(e.to_string().starts_with("read: "), "{e}");
        // nix's errno keeps its name in the message, as before the error type.
        #[cfg(unix)]
        {
            let e = Error::sys("pipe", nix::errno::Errno::EMFILE).context("--flag x");
            assert_eq!(e.errno(), Some(nix::libc::EMFILE));
            assert!(e.to_string().starts_with("--flag x: pipe: EMFILE: "), "{e}");
        }
        assert_eq!(Error::Argument("x".into()).errno(), None);
    }
}
