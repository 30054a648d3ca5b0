//! The `landlock` backend's seccomp additions, installed after the workload
//! filter every box has (`seccomp::build`). Without a network namespace the
//! socket families themselves are the network boundary:
//!
//! - network `none`: `socket(AF_INET | AF_INET6, ...)` fails with EACCES, so
//!   no TCP, UDP or raw socket of the host's network exists in the workload;
//! - below Landlock ABI 9 (no `RESOLVE_UNIX`), connecting to a pathname Unix
//!   socket is not mediated by Landlock: `socket(AF_UNIX, ...)` fails with
//!   EACCES, and so does `socketpair(AF_UNIX, SOCK_DGRAM, ...)` (a datagram
//!   socket can `sendto` any path). Stream and seqpacket socketpairs stay:
//!   they are connected at birth and cannot connect again (EISCONN).

use seccompiler::BpfProgram;

use super::super::error::SandboxError;
use super::super::seccomp;

/// Which additions a run gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closures {
    /// Refuse AF_INET and AF_INET6 sockets (network `none`).
    pub inet: bool,
    /// Refuse AF_UNIX sockets other than stream and seqpacket pairs.
    pub unix_paths: bool,
}

/// The `landlock-closures` filters `closures` selects.
fn names(closures: Closures) -> Vec<&'static str> {
    let mut v = Vec::new();
    if closures.inet {
        v.push("inet");
    }
    if closures.unix_paths {
        v.push("unix_paths");
    }
    v
}

/// The extra programs (none when `closures` closes nothing).
pub fn build(closures: Closures) -> Result<Vec<BpfProgram>, SandboxError> {
    seccomp::landlock_closures(&names(closures))
}

/// The `--dry-run` lines of `closures`.
pub fn describe(closures: Closures) -> String {
    let names = names(closures);
    if names.is_empty() {
        return String::new();
    }
    seccomp::describe_table(terra_seccomp::Table::LandlockClosures, Some(&names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_closure_has_its_filter() {
        let none = Closures {
            inet: false,
            unix_paths: false,
        };
        assert!(build(none).unwrap().is_empty());
        assert!(describe(none).is_empty());
        let inet = Closures {
            inet: true,
            unix_paths: false,
        };
        assert_eq!(build(inet).unwrap().len(), 1);
        assert!(describe(inet).contains("AF_INET6") && !describe(inet).contains("AF_UNIX"));
        let both = Closures {
            inet: true,
            unix_paths: true,
        };
        // Both closures merged into one program.
        assert_eq!(build(both).unwrap().len(), 1);
        assert_ne!(build(both).unwrap(), build(inet).unwrap());
        assert!(describe(both).contains("SOCK_DGRAM"));
    }
}
