//! The broker's own confinement, applied by [`crate::broker_main`] after its
//! descriptors are adopted and before it serves anything.
//!
//! Both filters are built from the tables below, and [`describe`] (what
//! `terra run --dry-run` prints) is written from the same tables, so the
//! description cannot drift from what is installed.
//!
//! Landlock: every filesystem access is handled and only reading the files
//! passed to [`apply`] is granted; the broker passes none (it has read
//! resolv.conf and hosts already, and the receipt descriptor is open), so
//! nothing can be opened, created or written; TCP bind is handled and never
//! granted; abstract UNIX sockets and signals are scoped.
//!
//! seccomp (default allow, listed calls fail with EPERM; see [`REFUSED`],
//! [`SOCKET_FAMILIES`], [`IOCTLS`], [`CLONE_NS_FLAGS`]): sockets other than
//! AF_INET/AF_INET6, every bind (the broker only connects; the kernel picks
//! the ephemeral port, for its TCP connections and for its resolver's UDP
//! sockets alike, see `resolve`), listen and accept, ptrace, the mount
//! family, namespaces, exec, kernel-extending calls; clone3 fails with ENOSYS
//! so the C library falls back to clone, whose flags seccomp can read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetError, RulesetStatus, Scope, ABI,
};
use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule,
};

/// What confinement was applied.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// Landlock status ("fully enforced", "partially enforced", "not enforced").
    pub landlock: String,
}

/// Why the broker could not confine itself (its start is refused).
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// A seccomp filter could not be built (a condition, a rule, the program).
    #[error("seccomp: building the {filter} filter: {source}")]
    Build {
        filter: &'static str,
        source: BackendError,
    },
    /// seccompiler has no backend for this architecture.
    #[error("seccomp: unsupported architecture {arch}: {source}")]
    Architecture {
        arch: &'static str,
        source: BackendError,
    },
    /// The kernel refused a filter (prctl or seccomp(2) failed).
    #[error("seccomp: installing the {filter} filter: {source}")]
    Install {
        filter: &'static str,
        source: seccompiler::Error,
    },
    /// The Landlock ruleset could not be created or enforced.
    #[error("landlock: {0}")]
    Landlock(#[from] RulesetError),
    /// A file to grant could not be opened or added to the ruleset.
    #[error("landlock: {}: {source}", path.display())]
    Grant { path: PathBuf, source: RulesetError },
}

/// ioctl request numbers (the libc crate types them differently on glibc and musl).
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;

/// System calls that always fail with EPERM.
pub const REFUSED: &[(&str, i64)] = &[
    // The broker only connects (the kernel picks every local port).
    ("bind", libc::SYS_bind),
    ("listen", libc::SYS_listen),
    ("accept", libc::SYS_accept),
    ("accept4", libc::SYS_accept4),
    // Never needed after startup.
    ("socketpair", libc::SYS_socketpair),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("execve", libc::SYS_execve),
    ("execveat", libc::SYS_execveat),
    ("personality", libc::SYS_personality),
    ("acct", libc::SYS_acct),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
];

/// The only socket families `socket()` may create; any other fails with EPERM.
pub const SOCKET_FAMILIES: &[(&str, u64)] = &[
    ("AF_INET", libc::AF_INET as u64),
    ("AF_INET6", libc::AF_INET6 as u64),
];

/// ioctl requests that fail with EPERM (compared on the low 32 bits).
pub const IOCTLS: &[(&str, u64)] = &[("TIOCSTI", TIOCSTI), ("TIOCLINUX", TIOCLINUX)];

/// clone() with any of these flags fails with EPERM (the box's table).
pub use terra_sandbox::linux::CLONE_NS_FLAGS;

/// System calls that fail with ENOSYS (their flags live in memory seccomp
/// cannot read; the C library falls back to a call it can).
pub const ABSENT: &[(&str, i64)] = &[("clone3", libc::SYS_clone3)];

/// The Landlock ABI the ruleset is written for (older kernels enforce what
/// they know: best effort).
const LANDLOCK_ABI: ABI = ABI::V6;

/// The IPC scopes the broker's Landlock domain restricts.
const LANDLOCK_SCOPES: &[(&str, Scope)] = &[
    ("abstract UNIX sockets", Scope::AbstractUnixSocket),
    ("signals", Scope::Signal),
];

/// The files the broker keeps reading once confined: none (resolv.conf and
/// hosts are read before, the receipt descriptor is already open).
pub const BROKER_READABLE: &[&str] = &[];

fn build_err(filter: &'static str) -> impl Fn(BackendError) -> ConfineError {
    move |source| ConfineError::Build { filter, source }
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, ConfineError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value).map_err(build_err("main"))
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, ConfineError> {
    SeccompRule::new(conds).map_err(build_err("main"))
}

/// Compiles `rules` (matching calls fail with `errno`, the rest is allowed)
/// for this architecture.
fn compile(
    filter: &'static str,
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
) -> Result<BpfProgram, ConfineError> {
    let arch = std::env::consts::ARCH;
    let target = arch
        .try_into()
        .map_err(|source| ConfineError::Architecture { arch, source })?;
    let filter_obj = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        target,
    )
    .map_err(build_err(filter))?;
    filter_obj.try_into().map_err(build_err(filter))
}

/// The broker's seccomp program (EPERM), from [`REFUSED`],
/// [`SOCKET_FAMILIES`], [`IOCTLS`] and [`CLONE_NS_FLAGS`].
pub fn seccomp_program() -> Result<BpfProgram, ConfineError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in REFUSED {
        rules.insert(*nr, vec![]);
    }
    // socket(domain, ...) with a domain none of SOCKET_FAMILIES.
    let not_listed = SOCKET_FAMILIES
        .iter()
        .map(|(_, f)| cond(0, SeccompCmpOp::Ne, *f))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_socket, vec![rule(not_listed)?]);
    // ioctl(fd, request, ...), the request's low 32 bits.
    let ioctls = IOCTLS
        .iter()
        .map(|(_, req)| rule(vec![cond(1, SeccompCmpOp::MaskedEq(0xffff_ffff), *req)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctls);
    // clone(flags, ...) with any namespace flag.
    let clones = CLONE_NS_FLAGS
        .iter()
        .map(|(_, f)| rule(vec![cond(0, SeccompCmpOp::MaskedEq(*f), *f)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clones);
    compile("main", rules, libc::EPERM)
}

/// The ENOSYS program, from [`ABSENT`]: clone3 passes its flags in memory
/// seccomp cannot read, so it looks absent and the C library falls back to
/// clone, which [`seccomp_program`] filters.
pub fn clone3_program() -> Result<BpfProgram, ConfineError> {
    let rules = ABSENT.iter().map(|(_, nr)| (*nr, vec![])).collect();
    compile("clone3", rules, libc::ENOSYS)
}

/// Applies Landlock (best effort: the kernel may lack it), granting only
/// reading `readable`, and then seccomp (required) to the whole process.
pub fn apply(readable: &[PathBuf]) -> Result<Confinement, ConfineError> {
    let landlock = apply_landlock(readable)?;
    let clone3 = clone3_program()?;
    let program = seccomp_program()?;
    seccompiler::apply_filter_all_threads(&clone3).map_err(|source| ConfineError::Install {
        filter: "clone3",
        source,
    })?;
    seccompiler::apply_filter_all_threads(&program).map_err(|source| ConfineError::Install {
        filter: "main",
        source,
    })?;
    if let Some(x32) = terra_sandbox::linux::x32_filter() {
        seccompiler::apply_filter_all_threads(&x32).map_err(|source| ConfineError::Install {
            filter: "x32",
            source,
        })?;
    }
    Ok(Confinement { landlock })
}

/// The broker's confinement: [`apply`] granting [`BROKER_READABLE`].
pub fn apply_broker() -> Result<Confinement, ConfineError> {
    let readable: Vec<PathBuf> = BROKER_READABLE.iter().map(PathBuf::from).collect();
    apply(&readable)
}

fn apply_landlock(files: &[PathBuf]) -> Result<String, ConfineError> {
    let scopes = LANDLOCK_SCOPES
        .iter()
        .fold(landlock::BitFlags::<Scope>::EMPTY, |acc, (_, s)| acc | *s);
    let mut created = Ruleset::default()
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))
        .and_then(|r| r.handle_access(AccessNet::BindTcp))
        .and_then(|r| r.scope(scopes))
        .and_then(|r| r.create())?;
    for f in files {
        // A file that cannot be opened is not granted (nothing to read).
        let Ok(fd) = PathFd::new(f) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::ReadFile))
            .map_err(grant_err(f))?;
    }
    let status = created.restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced",
        RulesetStatus::NotEnforced => "not enforced",
    }
    .to_owned())
}

fn grant_err(path: &Path) -> impl Fn(RulesetError) -> ConfineError + '_ {
    move |source| ConfineError::Grant {
        path: path.to_owned(),
        source,
    }
}

fn names<T>(table: &[(&'static str, T)]) -> Vec<&'static str> {
    table.iter().map(|(n, _)| *n).collect()
}

/// What [`apply_broker`] installs, one line per rule, written from the same
/// tables the filters are built from.
pub fn describe() -> String {
    let mut s = String::new();
    let granted = if BROKER_READABLE.is_empty() {
        "none granted (resolv.conf and hosts are read before it confines itself)".to_owned()
    } else {
        format!("reading {} granted", BROKER_READABLE.join(" "))
    };
    s.push_str(&format!(
        "landlock (ABI {LANDLOCK_ABI:?}, best effort): all file access handled, {granted}; TCP bind handled, never granted\n"
    ));
    s.push_str(&format!(
        "landlock scoped: {}\n",
        names(LANDLOCK_SCOPES).join(", ")
    ));
    s.push_str("seccomp default allow; listed calls fail with EPERM (never killed)\n");
    s.push_str(&format!(
        "seccomp EPERM socket of a family other than {}\n",
        names(SOCKET_FAMILIES).join(" ")
    ));
    s.push_str(&format!("seccomp EPERM {}\n", names(REFUSED).join(" ")));
    s.push_str(&format!(
        "seccomp EPERM ioctl {} (request, low 32 bits)\n",
        names(IOCTLS).join(", ")
    ));
    s.push_str(&format!(
        "seccomp EPERM clone with any of {}\n",
        names(CLONE_NS_FLAGS).join("|")
    ));
    s.push_str(&format!(
        "seccomp ENOSYS {} (libc falls back to clone)\n",
        names(ABSENT).join(" ")
    ));
    if cfg!(target_arch = "x86_64") {
        s.push_str("seccomp EPERM x32 system calls (numbers from 0x40000000)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BPF_JMP | BPF_JEQ | BPF_K: how the compiled program compares a value.
    const JEQ_K: u16 = 0x15;

    fn compared(program: &BpfProgram) -> Vec<u32> {
        program
            .iter()
            .filter(|i| i.code == JEQ_K)
            .map(|i| i.k)
            .collect()
    }

    #[test]
    fn programs_compile_and_hold_every_table_entry() {
        let main = seccomp_program().unwrap();
        let absent = clone3_program().unwrap();
        let in_main = compared(&main);
        let conditional = [libc::SYS_socket, libc::SYS_ioctl, libc::SYS_clone];
        for nr in REFUSED.iter().map(|(_, nr)| *nr).chain(conditional) {
            assert!(in_main.contains(&(nr as u32)), "syscall {nr} not filtered");
        }
        let in_absent = compared(&absent);
        for (name, nr) in ABSENT {
            assert!(in_absent.contains(&(*nr as u32)), "{name} not filtered");
            assert!(
                !in_main.contains(&(*nr as u32)),
                "{name} in the EPERM program"
            );
        }
    }

    #[test]
    fn description_names_every_rule() {
        let d = describe();
        // Each table's names, on a line of the rule it belongs to.
        let tables: [(&str, Vec<&str>); 6] = [
            ("seccomp EPERM ", names(REFUSED)),
            (
                "seccomp EPERM socket of a family other than ",
                names(SOCKET_FAMILIES),
            ),
            ("seccomp EPERM ioctl ", names(IOCTLS)),
            ("seccomp EPERM clone with any of ", names(CLONE_NS_FLAGS)),
            ("seccomp ENOSYS ", names(ABSENT)),
            ("landlock scoped: ", names(LANDLOCK_SCOPES)),
        ];
        for (prefix, names) in &tables {
            for name in names {
                let found = d.lines().filter(|l| l.starts_with(prefix)).any(|l| {
                    let rest = &l[prefix.len()..];
                    if name.contains(' ') {
                        rest.contains(name)
                    } else {
                        rest.split(|c: char| c.is_whitespace() || ",|();".contains(c))
                            .any(|w| w == *name)
                    }
                });
                assert!(found, "{name} missing from the {prefix:?} lines of:\n{d}");
            }
        }
        // Only the listed families are described as allowed.
        let families = d.lines().find(|l| l.starts_with(tables[1].0)).unwrap();
        assert!(families.ends_with("AF_INET AF_INET6"), "{families}");
        assert!(d.contains("TCP bind handled, never granted"), "{d}");
        assert!(d.contains("none granted"), "{d}");
    }
}
