//! The workload's seccomp filter: default allow, listed system calls fail with
//! EPERM (clone3 and openat2 with ENOSYS so libc falls back to clone and
//! openat, whose arguments can be checked). Nothing is killed, except what
//! seccompiler's architecture check does: a system call made through another
//! ABI (i386 `int 0x80` on x86_64) kills the process. x32 system calls
//! (numbers with bit 30 set) fail with EPERM through a small extra filter.
//!
//! No file may gain the set-user-ID or set-group-ID bit from inside the box:
//! every call that sets a mode (the chmod family, and the creating calls with
//! their mode argument) fails with EPERM when the mode holds either bit. File
//! capabilities need CAP_SETFCAP, which the workload does not have.
//!
//! Sockets: only the families a plan can need (AF_UNIX, AF_INET, AF_INET6,
//! AF_NETLINK with NETLINK_ROUTE); any other family fails with EAFNOSUPPORT,
//! another netlink protocol with EPROTONOSUPPORT. vsock, packet, alg, xdp and
//! the rest are not per network namespace, or reach the kernel or hypervisor
//! in ways no plan grants.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::error::SandboxError;

/// System calls refused without conditions, with the reason shown by `describe`.
fn refused() -> Vec<(&'static str, i64)> {
    vec![
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("move_mount", libc::SYS_move_mount),
        ("open_tree", libc::SYS_open_tree),
        ("fsopen", libc::SYS_fsopen),
        ("fsmount", libc::SYS_fsmount),
        ("fsconfig", libc::SYS_fsconfig),
        ("fspick", libc::SYS_fspick),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("unshare", libc::SYS_unshare),
        ("setns", libc::SYS_setns),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("reboot", libc::SYS_reboot),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("acct", libc::SYS_acct),
        ("chroot", libc::SYS_chroot),
    ]
}

/// clone() with any of these flags fails with EPERM: the one table of
/// namespace flags every terra filter refuses (the broker's uses it too).
/// CLONE_NEWTIME shares its bit with clone()'s exit-signal field, where no
/// valid signal sets it, so refusing it costs nothing.
pub const CLONE_NS_FLAGS: &[(&str, u64)] = &[
    ("CLONE_NEWNS", libc::CLONE_NEWNS as u64),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP as u64),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS as u64),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC as u64),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER as u64),
    ("CLONE_NEWPID", libc::CLONE_NEWPID as u64),
    ("CLONE_NEWNET", libc::CLONE_NEWNET as u64),
    ("CLONE_NEWTIME", libc::CLONE_NEWTIME as u64),
];
/// The set-user-ID and set-group-ID mode bits.
const SETID_BITS: [(&str, u64); 2] = [
    ("S_ISUID", libc::S_ISUID as u64),
    ("S_ISGID", libc::S_ISGID as u64),
];
/// O_TMPFILE without the O_DIRECTORY bit it includes: the bit that makes an
/// open create an (unnamed) file.
const O_TMPFILE_BIT: u64 = (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64;
const O_CREAT: u64 = libc::O_CREAT as u64;

/// fchmodat2 has number 452 on every architecture (the unified table since
/// Linux 6.6); the libc crate does not name it for aarch64.
const SYS_FCHMODAT2: i64 = 452;

/// System calls that set a file's mode outright, with the index of the mode argument.
fn mode_calls() -> Vec<(&'static str, i64, u8)> {
    let mut v = vec![
        ("fchmod", libc::SYS_fchmod, 1),
        ("fchmodat", libc::SYS_fchmodat, 2),
        ("fchmodat2", SYS_FCHMODAT2, 2),
        ("mknodat", libc::SYS_mknodat, 2),
        ("mkdirat", libc::SYS_mkdirat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        ("chmod", libc::SYS_chmod, 1),
        ("creat", libc::SYS_creat, 1),
        ("mknod", libc::SYS_mknod, 1),
        ("mkdir", libc::SYS_mkdir, 1),
    ]);
    v
}

/// System calls that open and may create a file: (name, number, flags
/// argument, mode argument). The mode counts only with O_CREAT or O_TMPFILE.
fn open_calls() -> Vec<(&'static str, i64, u8, u8)> {
    let mut v = vec![("openat", libc::SYS_openat, 2, 3)];
    #[cfg(target_arch = "x86_64")]
    v.push(("open", libc::SYS_open, 1, 2));
    v
}

/// Socket families the workload may create (`socket` argument 0).
const SOCKET_FAMILIES: [(&str, u64); 4] = [
    ("AF_UNIX", libc::AF_UNIX as u64),
    ("AF_INET", libc::AF_INET as u64),
    ("AF_INET6", libc::AF_INET6 as u64),
    ("AF_NETLINK", libc::AF_NETLINK as u64),
];
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
/// Line-discipline changes: the box's own terminal needs none, and each
/// discipline is kernel code the workload could otherwise reach.
const TIOCSETD: u64 = 0x5423;
const READ_IMPLIES_EXEC: u64 = 0x0400000;

fn arch() -> TargetArch {
    #[cfg(target_arch = "x86_64")]
    return TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    return TargetArch::aarch64;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    compile_error!("terra's seccomp filter supports x86_64 and aarch64");
}

fn cond(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, len, op, value)
        .map_err(|e| SandboxError::Seccomp(format!("condition: {e}")))
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conds).map_err(|e| SandboxError::Seccomp(format!("rule: {e}")))
}

/// `arg & bit == bit`, on the low 32 bits (modes and open flags are C ints).
fn has_bit(arg: u8, bit: u64) -> Result<SeccompCondition, SandboxError> {
    cond(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(bit),
        bit,
    )
}

/// Rules matching a mode argument with the set-user-ID or set-group-ID bit
/// (and, for the open calls, the flags that make the mode count).
fn setid_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut rules = BTreeMap::new();
    for (_, nr, mode) in mode_calls() {
        let r = SETID_BITS
            .iter()
            .map(|(_, bit)| rule(vec![has_bit(mode, *bit)?]))
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(nr, r);
    }
    for (_, nr, flags, mode) in open_calls() {
        let mut r = Vec::new();
        for creating in [O_CREAT, O_TMPFILE_BIT] {
            for (_, bit) in SETID_BITS {
                r.push(rule(vec![has_bit(flags, creating)?, has_bit(mode, bit)?])?);
            }
        }
        rules.insert(nr, r);
    }
    Ok(rules)
}

/// socket() of a family outside [`SOCKET_FAMILIES`]; socketpair() of any but AF_UNIX.
fn family_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let ne = |v: u64| cond(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v);
    let mut rules = BTreeMap::new();
    let others = SOCKET_FAMILIES
        .iter()
        .map(|(_, f)| ne(*f))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_socket, vec![rule(others)?]);
    rules.insert(
        libc::SYS_socketpair,
        vec![rule(vec![ne(libc::AF_UNIX as u64)?])?],
    );
    Ok(rules)
}

/// socket(AF_NETLINK, _, protocol) with a protocol other than NETLINK_ROUTE.
fn netlink_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut rules = BTreeMap::new();
    rules.insert(
        libc::SYS_socket,
        vec![rule(vec![
            cond(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                libc::AF_NETLINK as u64,
            )?,
            cond(
                2,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                libc::NETLINK_ROUTE as u64,
            )?,
        ])?],
    );
    Ok(rules)
}

fn masked_rule(arg: u8, mask: u64) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(vec![cond(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        mask,
    )?])
    .map_err(|e| SandboxError::Seccomp(format!("rule: {e}")))
}

/// The filters, in installation order. Several filters all run; the most
/// restrictive answer wins (all here are ERRNO or ALLOW).
pub fn build() -> Result<Vec<BpfProgram>, SandboxError> {
    let e = |x: seccompiler::BackendError| SandboxError::Seccomp(x.to_string());
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in refused() {
        rules.insert(nr, vec![]);
    }
    // clone with any CLONE_NEW* flag (flags are argument 0 on x86_64 and aarch64).
    let clone_rules = CLONE_NS_FLAGS
        .iter()
        .map(|(_, f)| masked_rule(0, *f))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    // ioctl TIOCSTI / TIOCLINUX / TIOCSETD, the request compared on its low 32 bits.
    let ioctl = [TIOCSTI, TIOCLINUX, TIOCSETD]
        .iter()
        .map(|r| {
            SeccompRule::new(vec![cond(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                *r,
            )?])
            .map_err(|e| SandboxError::Seccomp(format!("rule: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl);
    rules.insert(
        libc::SYS_personality,
        vec![masked_rule(0, READ_IMPLIES_EXEC)?],
    );
    let main = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch(),
    )
    .map_err(e)?;
    let mut enosys = BTreeMap::new();
    enosys.insert(libc::SYS_clone3, vec![]);
    // openat2 takes its flags and mode in a structure seccomp cannot read.
    enosys.insert(libc::SYS_openat2, vec![]);
    let filter = |rules, errno: i32| {
        SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch(),
        )
        .map_err(e)
    };
    let mut out: Vec<BpfProgram> = Vec::new();
    for f in [
        main,
        filter(enosys, libc::ENOSYS)?,
        filter(setid_rules()?, libc::EPERM)?,
        filter(family_rules()?, libc::EAFNOSUPPORT)?,
        filter(netlink_rules()?, libc::EPROTONOSUPPORT)?,
    ] {
        out.push(
            f.try_into()
                .map_err(|x: seccompiler::BackendError| SandboxError::Seccomp(x.to_string()))?,
        );
    }
    if let Some(x32) = x32_filter() {
        out.push(x32);
    }
    Ok(out)
}

/// x86_64: refuse x32 system calls (number >= 0x40000000) with EPERM. Every
/// terra seccomp program needs it (the broker's too): seccompiler checks the
/// architecture, and x32 shares x86_64's, so without it a filter's bans could
/// be sidestepped through x32 numbers on kernels that enable that ABI.
pub fn x32_filter() -> Option<BpfProgram> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    const LD_W_ABS: u16 = 0x20;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    Some(vec![
        stmt(LD_W_ABS, 0), // seccomp_data.nr
        sock_filter {
            code: JGE_K,
            jt: 0,
            jf: 1,
            k: 0x4000_0000,
        },
        stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
    ])
}

/// Installs the filters on the calling thread (no_new_privs must be set).
pub fn install(filters: &[BpfProgram]) -> Result<(), SandboxError> {
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| SandboxError::Seccomp(format!("install: {e}")))?;
    }
    Ok(())
}

pub fn describe() -> String {
    let mut s =
        String::from("seccomp default allow; listed calls fail with EPERM (never killed)\n");
    let names: Vec<&str> = refused().iter().map(|(n, _)| *n).collect();
    s.push_str(&format!("seccomp EPERM {}\n", names.join(" ")));
    let flags: Vec<&str> = CLONE_NS_FLAGS.iter().map(|(n, _)| *n).collect();
    s.push_str(&format!(
        "seccomp EPERM clone with any of {}\n",
        flags.join("|")
    ));
    s.push_str("seccomp ENOSYS clone3, openat2 (libc falls back to clone, openat)\n");
    let bits: Vec<&str> = SETID_BITS.iter().map(|(n, _)| *n).collect();
    let calls: Vec<&str> = mode_calls().iter().map(|(n, _, _)| *n).collect();
    let opens: Vec<&str> = open_calls().iter().map(|(n, _, _, _)| *n).collect();
    s.push_str(&format!(
        "seccomp EPERM {} with a mode holding {}; {} with O_CREAT or O_TMPFILE and such a mode\n",
        calls.join(" "),
        bits.join(" or "),
        opens.join(" ")
    ));
    let fams: Vec<&str> = SOCKET_FAMILIES.iter().map(|(n, _)| *n).collect();
    s.push_str(&format!(
        "seccomp EAFNOSUPPORT socket of a family other than {}; socketpair other than AF_UNIX\n",
        fams.join(" ")
    ));
    s.push_str("seccomp EPROTONOSUPPORT socket AF_NETLINK other than NETLINK_ROUTE\n");
    s.push_str("seccomp EPERM ioctl TIOCSTI, TIOCLINUX, TIOCSETD (request, low 32 bits)\n");
    s.push_str("seccomp EPERM personality with READ_IMPLIES_EXEC\n");
    if cfg!(target_arch = "x86_64") {
        s.push_str(
            "seccomp EPERM x32 system calls; i386 (int 0x80) calls kill the process (arch check)\n",
        );
    } else {
        s.push_str("seccomp calls of another architecture kill the process (arch check)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_build_and_describe_every_rule() {
        let filters = build().unwrap();
        // main, ENOSYS, set-id modes, socket families, netlink protocols (+ x32 on x86_64).
        assert_eq!(
            filters.len(),
            if cfg!(target_arch = "x86_64") { 6 } else { 5 }
        );
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

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fchmodat2_number_matches_libc() {
        assert_eq!(SYS_FCHMODAT2, libc::SYS_fchmodat2);
    }
}
