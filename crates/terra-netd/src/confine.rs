//! The broker's own confinement, applied by [`crate::broker_main`] after its
//! descriptors are adopted and before it serves anything.
//!
//! Landlock: every filesystem access is handled and only reading the files
//! passed to [`apply`] is granted; the broker passes none (it has read
//! resolv.conf and hosts already, and the receipt descriptor is open), so
//! nothing can be opened, created or written; TCP bind is handled and never
//! granted; abstract UNIX sockets and signals are scoped.
//!
//! seccomp (default allow, listed calls fail with EPERM):
//! - socket() other than AF_INET/AF_INET6 (no AF_UNIX, AF_NETLINK, AF_PACKET...);
//! - bind() of any kind (the broker only connects; the kernel picks the
//!   ephemeral port, for its TCP connections and for its resolver's UDP
//!   sockets alike, see `resolve`), listen(), accept(), accept4();
//! - ptrace, process_vm_readv/writev, ioctl TIOCSTI/TIOCLINUX;
//! - mount, umount2, pivot_root, chroot, the new mount API, unshare, setns,
//!   clone with any namespace flag, clone3 (ENOSYS, so libc falls back to clone);
//! - bpf, perf_event_open, keyctl, add_key, request_key, kexec_load,
//!   kexec_file_load, init/finit/delete_module, io_uring_*, userfaultfd,
//!   execve, execveat, personality, acct, swapon/swapoff, reboot, sethostname.

use std::collections::BTreeMap;
use std::path::PathBuf;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// What confinement was applied.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// Landlock status ("fully enforced", "partially enforced", "not enforced").
    pub landlock: String,
}

/// ioctl request numbers (the libc crate types them differently on glibc and musl).
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).map_err(|e| e.to_string())
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| e.to_string())
}

/// The broker's seccomp program.
pub fn seccomp_program() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // Unconditionally refused.
    for nr in [
        libc::SYS_bind,
        libc::SYS_listen,
        libc::SYS_accept,
        libc::SYS_accept4,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_userfaultfd,
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_personality,
        libc::SYS_acct,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
    ] {
        rules.insert(nr, vec![]);
    }
    // socket(domain, ...) with domain other than AF_INET and AF_INET6.
    rules.insert(
        libc::SYS_socket,
        vec![rule(vec![
            cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
            cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
        ])?],
    );
    // socketpair: never needed after startup.
    rules.insert(libc::SYS_socketpair, vec![]);
    // ioctl(fd, TIOCSTI | TIOCLINUX, ...).
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, SeccompCmpOp::MaskedEq(0xffff_ffff), TIOCSTI)?])?,
            rule(vec![cond(
                1,
                SeccompCmpOp::MaskedEq(0xffff_ffff),
                TIOCLINUX,
            )?])?,
        ],
    );
    // clone with any namespace flag.
    let ns_flags = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWTIME,
    ];
    let mut clone_rules = Vec::new();
    for f in ns_flags {
        let f = f as u64;
        clone_rules.push(rule(vec![cond(0, SeccompCmpOp::MaskedEq(f), f)?])?);
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        std::env::consts::ARCH
            .try_into()
            .map_err(|e| format!("seccomp: unsupported architecture: {e:?}"))?,
    )
    .map_err(|e| e.to_string())?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    Ok(program)
}

/// clone3 passes its flags in memory seccomp cannot read: this program makes
/// it look absent (ENOSYS) so the C library falls back to clone, which
/// [`seccomp_program`] filters.
pub fn clone3_program() -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, vec![])]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        std::env::consts::ARCH
            .try_into()
            .map_err(|e| format!("seccomp: unsupported architecture: {e:?}"))?,
    )
    .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// Applies Landlock (best effort: the kernel may lack it), granting only
/// reading `readable`, and then seccomp (required) to the whole process.
pub fn apply(readable: &[PathBuf]) -> Result<Confinement, String> {
    let landlock = apply_landlock(readable)?;
    let clone3 = clone3_program()?;
    let program = seccomp_program()?;
    seccompiler::apply_filter_all_threads(&clone3).map_err(|e| format!("seccomp: {e}"))?;
    seccompiler::apply_filter_all_threads(&program).map_err(|e| format!("seccomp: {e}"))?;
    Ok(Confinement { landlock })
}

fn apply_landlock(files: &[PathBuf]) -> Result<String, String> {
    use landlock::{
        Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, Scope, ABI,
    };
    let abi = ABI::V6;
    let mut created = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.handle_access(AccessNet::BindTcp))
        .and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        .and_then(|r| r.create())
        .map_err(|e| format!("landlock: {e}"))?;
    for f in files {
        let Ok(fd) = PathFd::new(f) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::ReadFile))
            .map_err(|e| format!("landlock: {}: {e}", f.display()))?;
    }
    let status = created
        .restrict_self()
        .map_err(|e| format!("landlock: {e}"))?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced",
        RulesetStatus::NotEnforced => "not enforced",
    }
    .to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_compiles() {
        assert!(!seccomp_program().unwrap().is_empty());
        assert!(!clone3_program().unwrap().is_empty());
    }
}
