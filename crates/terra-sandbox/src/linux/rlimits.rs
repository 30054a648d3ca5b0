//! Resource limits the workload sets on itself right before its Landlock
//! domain and seccomp filters (both backends). The caller decides which
//! limit an rlimit enforces (terra-supervisor's `limits`): a cgroup, when
//! one applies, is set on the host and not here.

use nix::sys::resource::{setrlimit, Resource};
use serde::{Deserialize, Serialize};

use super::error::{Result, SandboxError};

/// The rlimits of one workload; `None`: left as inherited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rlimits {
    /// RLIMIT_AS, bytes of address space (not resident memory).
    pub address_space: Option<u64>,
    /// RLIMIT_NPROC: processes of the workload's real uid in its user
    /// namespace (the box's init and network service count too).
    pub processes: Option<u64>,
    /// RLIMIT_FSIZE, bytes: a larger write fails with EFBIG after SIGXFSZ.
    pub file_size: Option<u64>,
}

impl Rlimits {
    pub fn is_empty(&self) -> bool {
        *self == Rlimits::default()
    }
}

/// Sets each limit given, soft and hard alike, so the workload cannot raise
/// it again.
pub fn apply(limits: &Rlimits) -> Result<()> {
    let set = |res: Resource, v: Option<u64>, call: &'static str| -> Result<()> {
        match v {
            Some(v) => setrlimit(res, v, v).map_err(|e| SandboxError::sys(call, e)),
            None => Ok(()),
        }
    };
    set(
        Resource::RLIMIT_AS,
        limits.address_space,
        "setrlimit(RLIMIT_AS)",
    )?;
    set(
        Resource::RLIMIT_NPROC,
        limits.processes,
        "setrlimit(RLIMIT_NPROC)",
    )?;
    set(
        Resource::RLIMIT_FSIZE,
        limits.file_size,
        "setrlimit(RLIMIT_FSIZE)",
    )
}
