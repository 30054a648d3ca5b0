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

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::super::error::SandboxError;

/// The low bits of socket(2)'s type argument that name the type (the rest are
/// SOCK_NONBLOCK and SOCK_CLOEXEC).
const SOCK_TYPE_MASK: u64 = 0xf;

/// Which additions a run gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closures {
    /// Refuse AF_INET and AF_INET6 sockets (network `none`).
    pub inet: bool,
    /// Refuse AF_UNIX sockets other than stream and seqpacket pairs.
    pub unix_paths: bool,
}

fn arch() -> TargetArch {
    #[cfg(target_arch = "x86_64")]
    return TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    return TargetArch::aarch64;
}

fn eq(arg: u8, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
        .map_err(|e| SandboxError::Seccomp(format!("condition: {e}")))
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conds).map_err(|e| SandboxError::Seccomp(format!("rule: {e}")))
}

/// The rules of `closures`: system call number -> the argument patterns refused.
fn rules(closures: Closures) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut socket = Vec::new();
    let mut socketpair = Vec::new();
    if closures.inet {
        socket.push(rule(vec![eq(0, libc::AF_INET as u64)?])?);
        socket.push(rule(vec![eq(0, libc::AF_INET6 as u64)?])?);
    }
    if closures.unix_paths {
        socket.push(rule(vec![eq(0, libc::AF_UNIX as u64)?])?);
        let dgram = SeccompCondition::new(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK),
            libc::SOCK_DGRAM as u64,
        )
        .map_err(|e| SandboxError::Seccomp(format!("condition: {e}")))?;
        socketpair.push(rule(vec![eq(0, libc::AF_UNIX as u64)?, dgram])?);
    }
    let mut map = BTreeMap::new();
    if !socket.is_empty() {
        map.insert(libc::SYS_socket, socket);
    }
    if !socketpair.is_empty() {
        map.insert(libc::SYS_socketpair, socketpair);
    }
    Ok(map)
}

/// The extra program (None when `closures` closes nothing).
pub fn build(closures: Closures) -> Result<Option<BpfProgram>, SandboxError> {
    let rules = rules(closures)?;
    if rules.is_empty() {
        return Ok(None);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch(),
    )
    .map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    let prog: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| SandboxError::Seccomp(e.to_string()))?;
    Ok(Some(prog))
}

/// The `--dry-run` lines of `closures`.
pub fn describe(closures: Closures) -> String {
    let mut s = String::new();
    if closures.inet {
        s.push_str(
            "seccomp EACCES socket AF_INET, AF_INET6 (network none: no host network at all)\n",
        );
    }
    if closures.unix_paths {
        s.push_str(
            "seccomp EACCES socket AF_UNIX, socketpair AF_UNIX SOCK_DGRAM (Landlock ABI < 9 cannot mediate \
             connects to pathname sockets)\n",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_closure_has_its_rules() {
        let none = Closures {
            inet: false,
            unix_paths: false,
        };
        assert!(build(none).unwrap().is_none());
        assert!(describe(none).is_empty());
        let r = rules(Closures {
            inet: true,
            unix_paths: false,
        })
        .unwrap();
        assert_eq!(r[&libc::SYS_socket].len(), 2);
        assert!(!r.contains_key(&libc::SYS_socketpair));
        let r = rules(Closures {
            inet: true,
            unix_paths: true,
        })
        .unwrap();
        assert_eq!(r[&libc::SYS_socket].len(), 3);
        assert_eq!(r[&libc::SYS_socketpair].len(), 1);
        assert!(build(Closures {
            inet: false,
            unix_paths: true
        })
        .unwrap()
        .is_some());
    }
}
