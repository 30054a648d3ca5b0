//! The workload's seccomp filter: default allow, listed system calls fail with
//! EPERM (clone3 with ENOSYS so libc falls back to clone, whose namespace flags
//! can be checked). Nothing is killed, except what seccompiler's architecture
//! check does: a system call made through another ABI (i386 `int 0x80` on
//! x86_64) kills the process. x32 system calls (numbers with bit 30 set) fail
//! with EPERM through a small extra filter.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

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

const CLONE_NEW_FLAGS: [(&str, u64); 7] = [
    ("CLONE_NEWNS", libc::CLONE_NEWNS as u64),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP as u64),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS as u64),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC as u64),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER as u64),
    ("CLONE_NEWPID", libc::CLONE_NEWPID as u64),
    ("CLONE_NEWNET", libc::CLONE_NEWNET as u64),
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
) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, len, op, value).map_err(|e| format!("seccomp condition: {e}"))
}

fn masked_rule(arg: u8, mask: u64) -> Result<SeccompRule, String> {
    SeccompRule::new(vec![cond(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        mask,
    )?])
    .map_err(|e| format!("seccomp rule: {e}"))
}

/// The filters, in installation order. Several filters all run; the most
/// restrictive answer wins (all here are ERRNO or ALLOW).
pub fn build() -> Result<Vec<BpfProgram>, String> {
    let e = |x: seccompiler::BackendError| format!("seccomp: {x}");
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in refused() {
        rules.insert(nr, vec![]);
    }
    // clone with any CLONE_NEW* flag (flags are argument 0 on x86_64 and aarch64).
    let clone_rules = CLONE_NEW_FLAGS
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
            .map_err(|e| format!("seccomp rule: {e}"))
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
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    let clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch(),
    )
    .map_err(e)?;
    let mut out: Vec<BpfProgram> = vec![
        main.try_into()
            .map_err(|x: seccompiler::BackendError| format!("seccomp: {x}"))?,
        clone3
            .try_into()
            .map_err(|x: seccompiler::BackendError| format!("seccomp: {x}"))?,
    ];
    if let Some(x32) = x32_filter() {
        out.push(x32);
    }
    Ok(out)
}

/// x86_64: refuse x32 system calls (number >= 0x40000000) with EPERM.
fn x32_filter() -> Option<BpfProgram> {
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
pub fn install(filters: &[BpfProgram]) -> Result<(), String> {
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| format!("seccomp install: {e}"))?;
    }
    Ok(())
}

pub fn describe() -> String {
    let mut s =
        String::from("seccomp default allow; listed calls fail with EPERM (never killed)\n");
    let names: Vec<&str> = refused().iter().map(|(n, _)| *n).collect();
    s.push_str(&format!("seccomp EPERM {}\n", names.join(" ")));
    let flags: Vec<&str> = CLONE_NEW_FLAGS.iter().map(|(n, _)| *n).collect();
    s.push_str(&format!(
        "seccomp EPERM clone with any of {}\n",
        flags.join("|")
    ));
    s.push_str("seccomp ENOSYS clone3 (libc falls back to clone)\n");
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
