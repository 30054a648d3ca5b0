//! The box's seccomp programs, compiled from terra-seccomp's tables (the
//! tables and what each refuses are documented there and in
//! docs/sandbox-linux.md):
//!
//! - the workload: the `workload` deny lists (default allow; listed calls
//!   fail with EPERM, clone3 and openat2 with ENOSYS so the C library falls
//!   back to calls whose arguments can be checked, foreign socket families
//!   with EAFNOSUPPORT), x32 numbers EPERM, another ABI killed;
//! - the box's init once the workload runs, and the box's proxy service:
//!   their allowlists (any other call kills the process).

use seccompiler::BpfProgram;
use terra_seccomp::Table;

use super::error::SandboxError;

fn programs(table: Table, only: Option<&[&str]>) -> Result<Vec<BpfProgram>, SandboxError> {
    let compiled = match only {
        Some(names) => terra_seccomp::compile_only(table, names),
        None => terra_seccomp::compile(table),
    };
    compiled
        .map(|v| v.into_iter().map(|p| p.bpf).collect())
        .map_err(|e| SandboxError::Seccomp(e.to_string()))
}

/// The workload's programs, in installation order.
pub fn build() -> Result<Vec<BpfProgram>, SandboxError> {
    programs(Table::Workload, None)
}

/// The workload's connect-notification filter (mediated networking).
pub fn workload_notify() -> Result<BpfProgram, SandboxError> {
    programs(Table::WorkloadNotify, None)?
        .into_iter()
        .next()
        .ok_or_else(|| SandboxError::Seccomp("the workload-notify table has no filter".into()))
}

/// The box init's allowlist, installed once the workload runs.
pub fn box_init() -> Result<Vec<BpfProgram>, SandboxError> {
    programs(Table::BoxInit, None)
}

/// The vm backend's relay (`terra __vm` once QEMU runs): its allowlist.
pub fn vm_host() -> Result<Vec<BpfProgram>, SandboxError> {
    programs(Table::VmHost, None)
}

/// The box proxy service's allowlist.
pub fn box_service() -> Result<Vec<BpfProgram>, SandboxError> {
    programs(Table::BoxService, None)
}

/// The landlock backend's extra deny lists named in `only` (`inet`, `unix_paths`).
pub fn landlock_closures(only: &[&str]) -> Result<Vec<BpfProgram>, SandboxError> {
    if only.is_empty() {
        return Ok(Vec::new());
    }
    programs(Table::LandlockClosures, Some(only))
}

/// Installs the programs on the calling thread (no_new_privs must be set).
pub fn install(filters: &[BpfProgram]) -> Result<(), SandboxError> {
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| SandboxError::Seccomp(format!("install: {e}")))?;
    }
    Ok(())
}

/// The `--dry-run` lines of `table` (its filters in `only`, or all).
pub fn describe_table(table: Table, only: Option<&[&str]>) -> String {
    terra_seccomp::describe(table, only).unwrap_or_else(|e| format!("seccomp: {e}\n"))
}

/// The workload's `--dry-run` lines.
pub fn describe() -> String {
    describe_table(Table::Workload, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_box_programs_build_and_describe_every_rule() {
        // One program per installation: refused, absent, setid, families
        // and netlink merged (terra-seccomp's merge.rs), likewise each role.
        assert_eq!(build().unwrap().len(), 1);
        assert_eq!(box_init().unwrap().len(), 1);
        assert_eq!(box_service().unwrap().len(), 1);
        assert_eq!(landlock_closures(&["inet", "unix_paths"]).unwrap().len(), 1);
        assert!(landlock_closures(&[]).unwrap().is_empty());
        let d = describe();
        for needle in [
            "openat2",
            "fchmodat2",
            "S_ISUID",
            "AF_NETLINK",
            "NETLINK_ROUTE",
        ] {
            assert!(d.contains(needle), "{needle} missing from:\n{d}");
        }
    }
}
