//! Why the launcher refused or failed, as kinds callers can match: a failed
//! system call keeps its name, its errno and the path it was about; a refusal
//! says which kind of request it could not honour.

use nix::errno::Errno;

/// Why the launcher refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A system call failed. `path` is the path (or `source -> target` of a
    /// mount) the call was about, when there is one.
    #[error("{call}{}: {errno}", path.as_ref().map(|p| format!("({p})")).unwrap_or_default())]
    Sys {
        call: &'static str,
        errno: Errno,
        path: Option<String>,
    },
    /// The plan asks for something this backend does not declare.
    #[error("{capability}: {why}")]
    UnsupportedCapability {
        capability: terra_policy::Capability,
        why: String,
    },
    /// The plan (or the request around it) cannot be lowered as given.
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    /// The request itself is malformed (empty command, a NUL byte in an
    /// argument, a bad host name or descriptor number).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The host cannot do it (a path that is not UTF-8, namespaces refused).
    #[error("unsupported on this host: {0}")]
    Unsupported(String),
    /// Building the box's root would touch the host, or a path it relies on
    /// changed under it.
    #[error("box root: {0}")]
    Root(String),
    #[error("landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("landlock: open {path}: {source}")]
    LandlockPath {
        path: String,
        source: landlock::PathFdError,
    },
    #[error("seccomp: {0}")]
    Seccomp(String),
    #[error("launcher failed: {0}")]
    Launch(String),
    #[error("activation check failed: {0}")]
    Activation(String),
    #[error("io error: {0}")]
    Io(String),
    /// A socket of the box could not be bound or listen at `addr`.
    #[error("{what} {addr}: {source}")]
    Socket {
        what: &'static str,
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// `source`, while doing `what`.
    #[error("{what}: {source}")]
    Context {
        what: &'static str,
        source: Box<SandboxError>,
    },
}

impl SandboxError {
    /// A failed call without a path.
    pub fn sys(call: &'static str, errno: Errno) -> SandboxError {
        SandboxError::Sys {
            call,
            errno,
            path: None,
        }
    }

    /// A failed call on `path`.
    pub fn sys_at(call: &'static str, errno: Errno, path: impl Into<String>) -> SandboxError {
        SandboxError::Sys {
            call,
            errno,
            path: Some(path.into()),
        }
    }

    /// A failed std I/O call on `path`: its errno when it carries one.
    pub fn io_at(call: &'static str, e: &std::io::Error, path: impl Into<String>) -> SandboxError {
        match e.raw_os_error() {
            Some(n) => SandboxError::sys_at(call, Errno::from_raw(n), path),
            None => SandboxError::Io(format!("{call}({}): {e}", path.into())),
        }
    }

    /// This error, while doing `what`.
    pub fn context(self, what: &'static str) -> SandboxError {
        SandboxError::Context {
            what,
            source: Box::new(self),
        }
    }

    /// The errno of the failed system call, looking through context.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            SandboxError::Sys { errno, .. } => Some(*errno),
            SandboxError::Context { source, .. } => source.errno(),
            _ => None,
        }
    }
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_call_names_the_call_the_path_and_the_errno() {
        let e = SandboxError::sys_at("mount", Errno::EPERM, "/a -> /b");
        assert_eq!(
            e.to_string(),
            "mount(/a -> /b): EPERM: Operation not permitted"
        );
        let e = SandboxError::sys("pipe2", Errno::EMFILE).context("uid/gid maps");
        assert!(
            e.to_string().starts_with("uid/gid maps: pipe2: EMFILE"),
            "{e}"
        );
        assert_eq!(e.errno(), Some(Errno::EMFILE));
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert!(matches!(
            SandboxError::io_at("write", &io, "/x"),
            SandboxError::Sys {
                errno: Errno::ENOENT,
                ..
            }
        ));
    }
}
